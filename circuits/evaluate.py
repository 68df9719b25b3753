"""Faithfulness of circuits: run the model with every edge outside the circuit ablated.

normalized(C) = (m(C) - m(empty)) / (m(full) - m(empty)), with m the metric averaged over the prompt set,
m(full) the intact model and m(empty) every edge ablated (the reference run). 1 means the circuit alone
does what the model does; 0 what the reference does. The curve is taken over a grid of circuit sizes k
(top-k edges by |score|, or the greedy connected variant); its area (AUC) is the trapezoid area under
normalized faithfulness against log10(k), divided by the log range, so a curve at 1 everywhere has AUC 1.
Completeness ablates only the circuit (every other edge kept): a complete circuit leaves near 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float

from circuits.counterfactual import PromptSet
from circuits.graph import CircuitGraph, check_k
from circuits.intervene import References, run_masked
from core.checks import Fields
from core.errors import MethodError, RangeError

DEFAULT_GRID = (10, 20, 50, 100, 200, 500, 1000, 2000)
SELECTIONS = ("topk", "greedy")


@dataclass
class Faithfulness:
    k: list[int]
    normalized: list[float]  # keep only the circuit
    complement: list[float]  # ablate only the circuit (completeness)
    metric_full: float
    metric_empty: float
    auc: float
    selection: str = "topk"
    n_edges_kept: list[int] | None = None  # edges left after pruning (greedy)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, what: str = "faithfulness", error: type[Exception] | None = None) -> Faithfulness:
        """A curve read back from a file: every field checked (lists of equal length, finite numbers, sizes
        >= 1, no unknown key); ``error`` (default RangeError) names what is wrong."""
        f = Fields(data, what, error or RangeError).only(cls.__dataclass_fields__)
        ks = f.items("k", int)
        if not ks or any(not isinstance(k, int) or k < 1 for k in ks):
            raise f.error(f"{what} is damaged: field 'k' must list circuit sizes >= 1")
        out = cls(k=ks, normalized=f.items("normalized", float), complement=f.items("complement", float),
                  metric_full=f.number("metric_full"), metric_empty=f.number("metric_empty"), auc=f.number("auc"),
                  selection=f.text("selection", "topk", SELECTIONS), n_edges_kept=f.items("n_edges_kept", int, None))
        lengths = {len(out.normalized), len(out.complement)} | ({len(out.n_edges_kept)} if out.n_edges_kept else set())
        if lengths != {len(ks)}:
            raise f.error(f"{what} is damaged: its lists do not have one value per circuit size ({len(ks)})")
        return out


def check_grid(grid: Any, n_edges: int) -> list[int]:
    """Sizes capped by the graph, de-duplicated, in increasing order; k <= 0 is an error."""
    ks = sorted({check_k(int(k), n_edges) for k in grid})
    if not ks:
        raise MethodError("the grid of circuit sizes is empty")
    return ks


def auc(ks: list[int], values: list[float]) -> float:
    if len(ks) == 1:
        return float(values[0])
    x = [math.log10(k) for k in ks]
    area = sum((x[i + 1] - x[i]) * (values[i] + values[i + 1]) / 2 for i in range(len(ks) - 1))
    return float(area / (x[-1] - x[0]))


def select(graph: CircuitGraph, scores: Float[torch.Tensor, " edge"], k: int,
           selection: str) -> Bool[torch.Tensor, " edge"]:
    if selection == "topk":
        return graph.top_k(scores, k)
    if selection == "greedy":
        return graph.greedy(scores, k)
    raise MethodError(f"unknown selection {selection!r}; choose one of {', '.join(SELECTIONS)}")


def metrics(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
            masks: Bool[torch.Tensor, "copy edge"], copies: int = 4,
            on_step: Callable[[int], None] | None = None) -> Float[torch.Tensor, " copy"]:
    """The mean metric over the prompt set with only each mask's edges intact."""
    total = torch.zeros(masks.shape[0], dtype=torch.float64)
    for batch in prompts.batches:
        ref = refs.of(batch)
        for start in range(0, masks.shape[0], copies):
            chunk = masks[start:start + copies]
            total[start:start + len(chunk)] += run_masked(model, graph, batch, ref, chunk,
                                                          prompts.metric).sum(1).double().cpu()
        if on_step:
            on_step(batch.size)
    return total / prompts.n_prompts


def check_span(full: float, empty: float) -> float:
    """full - empty, the span faithfulness is normalised by; MethodError when it is (nearly) zero or not
    finite: then no circuit has a faithfulness (e.g. prompts equal to their counterfactuals)."""
    span = full - empty
    if not math.isfinite(span) or abs(span) < 1e-6 * max(1.0, abs(full)):
        raise MethodError(f"faithfulness is undefined: the metric is {full:.4g} intact and {empty:.4g} with "
                          "every edge ablated (no difference to explain); use another counterfactual or ablation")
    return span


def faithfulness(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
                 scores: Float[torch.Tensor, " edge"], grid: Any = DEFAULT_GRID, selection: str = "topk",
                 on_step: Callable[[int], None] | None = None) -> Faithfulness:
    """The faithfulness curve of a score vector over circuit sizes (one masked forward per mask)."""
    ks = check_grid(grid, graph.n_edges)
    circuits = [select(graph, scores, k, selection) for k in ks]
    everything = torch.ones(graph.n_edges, dtype=torch.bool)
    masks = torch.stack([everything, ~everything] + circuits + [~c for c in circuits])
    values = metrics(model, graph, prompts, refs, masks, on_step=on_step).tolist()
    full, empty = values[0], values[1]
    span = check_span(full, empty)
    n = len(ks)
    normalized = [(v - empty) / span for v in values[2:2 + n]]
    complement = [(v - empty) / span for v in values[2 + n:]]
    return Faithfulness(k=ks, normalized=normalized, complement=complement, metric_full=full, metric_empty=empty,
                        auc=auc(ks, normalized), selection=selection,
                        n_edges_kept=[int(c.sum()) for c in circuits])


def mask_faithfulness(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
                      mask: Bool[torch.Tensor, " edge"]) -> float:
    """Normalized faithfulness of one given circuit."""
    everything = torch.ones(graph.n_edges, dtype=torch.bool)
    full, empty, kept = metrics(model, graph, prompts, refs, torch.stack([everything, ~everything, mask])).tolist()
    return (kept - empty) / (full - empty)
