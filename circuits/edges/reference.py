"""Brute-force DPA edge scores for tests: autograd through the model with DPA's frozen, path-weighted
linearisation (``attribution.dpa.reference.reference_hooks``), read at every split receiver input.

No hand-written transposes: the target at receiver R's input is the gradient of the frozen metric with
respect to that input, and score(S -> R) = sum over positions of out_S . grad_R (zero reference). The
engine's ``circuits.edges.dpa`` must agree with it edge by edge.
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float

from attribution.dpa.params import DPAParams
from attribution.dpa.reference import logits_uncapped, reference_hooks
from circuits.graph import CircuitGraph
from circuits.intervene import receiver_hooks, sender_hooks


def dpa_edge_reference(model: Any, enc: Any, **params: Any) -> Float[torch.Tensor, " edge"]:
    """Edge scores [edge] for one encoded prompt (target minus foil when it has a foil)."""
    p = DPAParams.from_kwargs(**params)
    graph = CircuitGraph.of(model)
    n_s, n_r = len(graph.senders), len(graph.receivers)
    seq, d = enc.tokens.shape[1], model.arch.d_model
    out = torch.zeros(seq, n_s, d)
    grads = torch.zeros(seq, n_r, d)
    store: dict[str, Float[torch.Tensor, "1 ..."]] = {}

    def write(slot, x):  # [1, pos, d], or [head, 1, pos, d] for a layer's heads
        out[:, slot] = x[:, 0].detach().transpose(0, 1) if x.dim() == 4 else x[0].detach()

    def read(x, cols, n_up):
        def keep(g, cols=cols):
            grads[:, cols] = g[0].float()
        x.register_hook(keep)
        return x

    hooks = reference_hooks(model, p, store) + sender_hooks(model, graph, write) + receiver_hooks(graph, read)
    with torch.enable_grad(), model.split_inputs(), logits_uncapped(model):
        logits = model.run_with_hooks(enc.tokens, fwd_hooks=hooks)
        value = logits[0, -1, enc.target_id]
        if enc.foil_id is not None:
            value = value - logits[0, -1, enc.foil_id]
        value.backward()
    dense = torch.einsum("psd,prd->sr", out.double(), grads.double())
    return graph.flat(dense * graph.valid).float()
