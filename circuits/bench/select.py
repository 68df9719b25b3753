"""Edge selection options, usable with any scorer: which n edges form the circuit of a size.

- ``topk``: the n highest scores (signed, or by |score| with ``absolute``), MIB's ``apply_topn``;
- ``greedy``: grown from the logits, each step the best-scoring edge into a node already reached (MIB's
  ``apply_greedy``, EAP-IG graph.py lines 531-564), signed or absolute;
- ``bootstrap``: top-n of bootstrapped scores (Nikankin et al., BlackboxNLP 2025 MIB shared task: edges
  whose attribution is consistent across resamples of the prompts). The scorer runs once per chunk of
  the training prompts (the same total cost as one run); chunks are resampled with replacement and an
  edge is ranked by the bound of its resampled mean nearest to zero (the 10th percentile for a positive
  mean, the 90th for a negative one; an edge whose interval straddles zero ranks after every consistent
  edge);
- ``positive_ratio``: at least ``ratio`` x n of the circuit are the best positive edges, the rest the
  largest |score| among the others (the same paper's ratio-based selection, which favours edges that
  raise the metric).

``connected=True`` (the default, as MIB prunes) keeps only edges on a path embed -> logits.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float

from circuits.graph import CircuitGraph
from core.errors import MethodError

SELECTIONS = ("topk", "greedy", "bootstrap", "positive_ratio")


def bootstrapped_scores(chunks: Float[torch.Tensor, "chunk edge"], n_boot: int = 200, seed: int = 0,
                        q: float = 0.1) -> Float[torch.Tensor, " edge"]:
    """Per-edge bootstrapped score from chunk scores [chunk, edge] (chunk means of equal weight)."""
    if chunks.dim() != 2 or chunks.shape[0] < 2:
        raise MethodError("bootstrapped selection needs the scores of at least two chunks of prompts")
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, chunks.shape[0], (n_boot, chunks.shape[0]), generator=gen)
    means = chunks.double()[idx].mean(1)  # [boot, edge]
    lo, hi = torch.quantile(means, q, dim=0), torch.quantile(means, 1 - q, dim=0)
    mean = chunks.double().mean(0)
    consistent = torch.where(lo > 0, lo, torch.where(hi < 0, hi, torch.zeros_like(lo)))
    # straddling edges: ranked after every consistent edge, among themselves by their mean
    scale = float(consistent.abs().min()) if bool((consistent != 0).any()) else 1.0
    tiny = mean / (mean.abs().max() + 1e-30) * scale * 1e-3
    return torch.where(consistent != 0, consistent, tiny).float()


def greedy(graph: CircuitGraph, scores: Float[torch.Tensor, " edge"], n: int,
           absolute: bool) -> Bool[torch.Tensor, " edge"]:
    """MIB's greedy: from the logits, repeatedly the best edge into a node already in the circuit."""
    return graph.grow(scores, n, absolute=absolute)


def select_edges(graph: CircuitGraph, scores: Float[torch.Tensor, " edge"], n: int, selection: str = "topk",
                 absolute: bool = False, connected: bool = True, ratio: float = 0.9,
                 chunks: Float[torch.Tensor, "chunk edge"] | None = None) -> Bool[torch.Tensor, " edge"]:
    """Edge mask of the circuit with (at most) n edges under a selection option."""
    if selection not in SELECTIONS:
        raise MethodError(f"unknown selection {selection!r}; choose one of {', '.join(SELECTIONS)}")
    n = max(0, min(int(n), graph.n_edges))
    mask = torch.zeros(graph.n_edges, dtype=torch.bool)
    if n == 0:
        return mask
    if selection == "greedy":
        mask = greedy(graph, scores, n, absolute)
    else:
        if selection == "bootstrap":
            if chunks is None:
                raise MethodError("bootstrap selection needs the per-chunk scores of the method")
            scores = bootstrapped_scores(chunks)
        if selection == "positive_ratio":
            if not 0 <= ratio <= 1:
                raise MethodError(f"positive_ratio needs a ratio in [0, 1] (got {ratio})")
            order_pos = torch.argsort(scores.double(), descending=True, stable=True)
            positive = order_pos[scores[order_pos] > 0][: int(ratio * n)]
            mask[positive] = True
            rest = torch.argsort(scores.double().abs(), descending=True, stable=True)
            rest = rest[~mask[rest]][: n - len(positive)]
            mask[rest] = True
        else:
            key = scores.double().abs() if absolute else scores.double()
            mask[torch.argsort(key, descending=True, stable=True)[:n]] = True
    return graph.prune_connected(mask) if connected else mask


def is_connected(graph: CircuitGraph, mask: Bool[torch.Tensor, " edge"]) -> bool:
    """Every kept edge lies on a path embed -> logits."""
    return bool(torch.equal(graph.prune_connected(mask), mask))
