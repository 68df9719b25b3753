"""Path patching, the ground truth: ablate one edge at a time (to its reference) and measure the metric.

score(e) = mean over prompts of m(all edges) - m(all edges but e). Each forward carries ``copies`` edge
ablations at once (the batch repeated). Exact, and one forward per edge: on a model the size of smollm2
(123,211 edges) score a random ``sample`` of edges (the others score 0 and are not ranked first by
anything but their zero); ``circuits.discover.estimate`` gives the cost before it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float, Int

from circuits.counterfactual import PromptSet
from circuits.graph import CircuitGraph
from circuits.intervene import References, run_masked
from core.errors import MethodError


def chosen_edges(graph: CircuitGraph, sample: int = 0, seed: int = 0) -> Int[torch.Tensor, " chosen"]:
    """The edge ids to patch: all of them, or a seeded random sample."""
    sample = int(sample)
    if sample < 0:
        raise MethodError(f"sample must be 0 (every edge) or a positive number of edges (got {sample})")
    if sample == 0 or sample >= graph.n_edges:
        return torch.arange(graph.n_edges)
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randperm(graph.n_edges, generator=gen)[:sample].sort().values


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None, sample: int = 0, seed: int = 0,
          copies: int = 8, edges: Int[torch.Tensor, " chosen"] | None = None) -> Float[torch.Tensor, " edge"]:
    """edges: patch exactly these edge ids (benchmarks); otherwise all of them or a ``sample``."""
    copies = int(copies)
    if copies < 1:
        raise MethodError(f"copies must be at least 1 (got {copies})")
    todo = chosen_edges(graph, sample, seed) if edges is None else edges
    total = torch.zeros(graph.n_edges, dtype=torch.float64)
    everything = torch.ones(1, graph.n_edges, dtype=torch.bool)
    for batch in prompts.batches:
        ref = refs.of(batch)
        full = run_masked(model, graph, batch, ref, everything, prompts.metric)[0]
        for start in range(0, len(todo), copies):
            chunk = todo[start:start + copies]
            keep = everything.repeat(len(chunk), 1)
            keep[torch.arange(len(chunk)), chunk] = False
            patched = run_masked(model, graph, batch, ref, keep, prompts.metric)
            total[chunk] += (full[None] - patched).sum(1).double().cpu()
            if on_step:
                on_step(len(chunk) * batch.size)
    return (total / prompts.n_prompts).float()
