"""Edge-level activation patching on a sample: the ground truth the estimates are checked against.

Patching every edge costs one forward per edge (123,211 on smollm2), so the benchmark patches a seeded random
sample of ``patch_sample`` edges on the train prompts the methods scored (``circuits.edges.patching``: m(all
edges) - m(all but e), the same quantity every method estimates) and reports, per method, how its edge scores
on those edges agree with the exact effects: Spearman's rank correlation (the ordering, which is what circuit
selection uses) and Pearson's (dominated by the few edges that matter). A uniform sample is mostly edges with
tiny effects, so Spearman there measures the ordering of the bulk; Pearson, of the heavy edges it caught.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from jaxtyping import Float

from circuits.bench.metrics import finite
from circuits.edges.patching import chosen_edges, score
from circuits.graph import CircuitGraph
from circuits.intervene import References


def sample_patching(model: Any, graph: CircuitGraph, prompts: Any, refs: References, n_edges: int,
                    seed: int, copies: int = 8) -> dict[str, Any]:
    """Exact single-edge patching effects of a seeded sample of ``n_edges`` edges (mean over ``prompts``)."""
    edges = chosen_edges(graph, n_edges, seed)
    exact = score(model, graph, prompts, refs, edges=edges, copies=copies)[edges]
    return {"edges": edges.tolist(), "exact": [finite(float(v), "an edge's patching effect") for v in exact],
            "n_prompts": prompts.n_prompts}


def _corr(kind: str, a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Spearman or Pearson correlation; None where either side is constant (undefined)."""
    from scipy.stats import pearsonr, spearmanr

    if float(a.std()) == 0 or float(b.std()) == 0:
        return None
    value = float((spearmanr if kind == "spearman" else pearsonr)(a.numpy(), b.numpy())[0])
    return value if math.isfinite(value) else None


def agreement(sample: dict[str, Any], scores: dict[str, Float[torch.Tensor, " edge"]]) -> dict[str, Any]:
    """Each method's agreement with the sampled exact effects: {n_edges, n_prompts, methods: {m: {spearman,
    pearson}}}; ``scores``: each method's edge scores [n_edges of the graph]."""
    idx = torch.tensor(sample["edges"], dtype=torch.long)
    exact = torch.tensor(sample["exact"], dtype=torch.float64)
    out = {m: {"spearman": _corr("spearman", s.double()[idx], exact),
               "pearson": _corr("pearson", s.double()[idx], exact)} for m, s in scores.items()}
    return {"n_edges": len(idx), "n_prompts": sample["n_prompts"], "methods": out}


def attach(task: dict[str, Any], scores: dict[str, Float[torch.Tensor, " edge"]]) -> None:
    """Set ``task["patching_agreement"]`` when one of its methods carries a patching sample (activation_patching
    at edge level); ``scores``: the other methods' edge scores."""
    sample = next((r["sample"] for r in task["methods"].values() if "sample" in r), None)
    if sample is not None and scores:
        task["patching_agreement"] = agreement(sample, scores)
