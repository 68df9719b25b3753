"""EAP-IG (Hanna et al. 2024): EAP with the gradient averaged along the straight path from the reference
input embedding to the clean one (``steps`` points alpha = 1/steps, ..., 1), as integrated gradients does.

score(S -> R) = sum over positions of (out_S(clean) - out_S(reference)) . mean_alpha d metric / d input_R
at the input ref_embed + alpha (clean_embed - ref_embed). Cost: ``steps`` forward and backward passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float

from circuits.counterfactual import PromptSet
from circuits.graph import CircuitGraph
from circuits.intervene import References, edge_products, receiver_grads
from core.errors import MethodError


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None, steps: int = 5) -> Float[torch.Tensor, " edge"]:
    steps = check_steps(steps)
    total = torch.zeros(graph.n_edges, dtype=torch.float64)
    for batch in prompts.batches:
        ref = refs.of(batch)
        ref_embed = ref[0]  # [batch or 1, pos or 1, d]
        grad_sum = None
        out = None
        for k in range(1, steps + 1):
            alpha = k / steps

            def embed(x, alpha=alpha, ref_embed=ref_embed):
                return (ref_embed + alpha * (x.detach().float() - ref_embed)).to(x.dtype)

            out_k, grads = receiver_grads(model, graph, batch, prompts.metric, embed=embed)
            grad_sum = grads if grad_sum is None else grad_sum + grads
            if k == steps:
                out = out_k  # alpha = 1 is the clean run
        diff = (out - ref) * batch.real()[None, :, :, None]
        total += edge_products(graph, diff, grad_sum / steps)
        if on_step:
            on_step(batch.size)
    return (total / prompts.n_prompts).float()


def check_steps(steps: Any, method: str = "eap_ig") -> int:
    """An integral's step count as a whole number from 1 to 1000; MethodError (one line) otherwise."""
    try:
        value = float(steps)
    except (TypeError, ValueError):
        raise MethodError(f"{method} steps must be a whole number (got {steps!r})") from None
    if not value.is_integer() or value < 1 or value > 1000:
        raise MethodError(f"{method} steps must be a whole number from 1 to 1000 (got {steps!r})")
    return int(value)
