"""Edge attribution patching (Syed et al. 2023): one forward and one backward on the clean prompts.

score(S -> R) = sum over positions of (out_S(clean) - out_S(reference)) . d metric / d input_R (clean),
the first-order estimate of the metric's drop when the edge is ablated, averaged over prompts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float

from circuits.counterfactual import PromptSet
from circuits.graph import CircuitGraph
from circuits.intervene import References, edge_products, receiver_grads


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None) -> Float[torch.Tensor, " edge"]:
    total = torch.zeros(graph.n_edges, dtype=torch.float64)
    for batch in prompts.batches:
        ref = refs.of(batch)
        out, grads = receiver_grads(model, graph, batch, prompts.metric)
        diff = (out - ref) * batch.real()[None, :, :, None]
        total += edge_products(graph, diff, grads)
        if on_step:
            on_step(batch.size)
    return (total / prompts.n_prompts).float()
