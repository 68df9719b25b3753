"""Information flow routes (Ferrando and Voita 2024) as edge scores, as MIB's circuit track scores them
(hannamw/EAP-IG ``get_scores_information_flow_routes``).

A receiver's input x_R is the sum of its upstream senders' outputs c_S. On the clean run (one forward, no
gradient, no reference and no target: IFR is prediction-agnostic) the importance of S to R at a position is
S's share of R's input, proximity(x_R, c_S) = max(0, |x_R|_1 - |x_R - c_S|_1) normalised over R's senders;
a prompt's score is the mean over its real positions, the edge's score the mean over prompts.

Unsigned: every score is >= 0 and a receiver's scores sum to 1 over its senders, so a signed faithfulness
curve ranks IFR's edges exactly as by |score|.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float

from attribution.baselines.ifr import proximity
from circuits.counterfactual import PromptBatch, PromptSet
from circuits.graph import CircuitGraph
from circuits.intervene import References, put_output, receiver_hooks, sender_hooks


def shares(x: Float[torch.Tensor, "batch pos d_model"], parts: Float[torch.Tensor, "sender batch pos d_model"],
           ) -> Float[torch.Tensor, "sender batch pos"]:
    """Each part's proximity share of the sum x, per position: >= 0, summing to 1 over the parts wherever
    some part is near x (0 everywhere at a position where none is, which MIB's code leaves as 0 / 0)."""
    near = proximity(x.float()[None], parts.float())
    return near / near.sum(0, keepdim=True).clamp_min(1e-30)


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None) -> Float[torch.Tensor, " edge"]:
    dense = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    for batch in prompts.batches:
        dense += batch_shares(model, graph, batch)
        if on_step:
            on_step(batch.size)
    return graph.flat(dense / prompts.n_prompts).float()


def batch_shares(model: Any, graph: CircuitGraph, batch: PromptBatch) -> Float[torch.Tensor, "sender receiver"]:
    """Sum over the batch's prompts of each edge's share, averaged over each prompt's real positions."""
    n, seq = batch.tokens.shape
    out = torch.zeros(len(graph.senders), n, seq, model.arch.d_model, device=model.device)
    real = batch.real().to(model.device).float()  # [batch, pos]
    dense = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    last: dict[str, Any] = {}

    def per_prompt(x, n_up):
        # a layer's q/k/v inputs are one residual copied per head: its shares are computed once
        if last.get("n_up") == n_up and torch.equal(last["x"], x):
            return last["s"]
        s = (shares(x, out[:n_up]) * real).sum(-1) / real.sum(-1)  # [sender, batch]
        last.update(n_up=n_up, x=x, s=s.sum(1).double().cpu())
        return last["s"]

    def read(x, cols, n_up):
        if x.dim() == 4:  # [batch, pos, head, d] with a [head] tensor of receivers
            for h, col in enumerate(torch.as_tensor(cols).reshape(-1).tolist()):
                dense[:n_up, col] += per_prompt(x[:, :, h], n_up)
        else:
            dense[:n_up, int(cols)] += per_prompt(x, n_up)
        return x

    hooks = sender_hooks(model, graph, lambda slot, x: put_output(out, slot, x)) + receiver_hooks(graph, read)
    with torch.no_grad(), model.split_inputs():
        model.run_with_hooks(batch.tokens, fwd_hooks=hooks, return_type=None)
    return dense
