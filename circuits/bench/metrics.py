"""MIB's circuit-localization metrics: CPR and CMD over circuit sizes, at edge and node level.

Matched to the MIB circuit track (github.com/hannamw/MIB-circuit-track at b759df3; its graph code is
github.com/hannamw/EAP-IG at 795f560, ``src/eap/graph.py``); Mueller et al., "MIB: A Mechanistic
Interpretability Benchmark", ICML 2025:

- Grid: ``percentages = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)`` of the scored items (edges, or
  nodes at node level), each size ``int(pct * n_items)`` (MIB_circuit_track/evaluation.py lines 31-37).
- Circuit of a size: the top-n items by score (``apply_topn``, evaluation.py line 43; graph.py lines
  443-529), signed or by absolute value, then pruned to what is connected (``prune``, graph.py 567-600:
  a node without an incoming or an outgoing edge is dropped, repeatedly; here ``CircuitGraph.prune_connected``,
  the same fixed point). At node level the top-n nodes are chosen and all their outgoing edges kept before
  pruning (graph.py 489-510).
- Normalised faithfulness f(C) = (m(C) - m(empty)) / (m(full) - m(empty)), m the task metric averaged over
  prompts, m(empty) with every edge ablated (evaluation.py lines 17-20 and 55).
- CPR = sum of trapezoids of f over the percentages on a linear axis (area under the curve, higher is
  better); CMD = the same area of |1 - f| (area between the curve and 1, lower is better) (evaluation.py
  lines 58-73, ``log_scale=False`` by default). The axis runs from 0.001 to 1, so a curve at 1 has CPR 0.999.
- Which ordering each metric reads: the leaderboard takes CPR from the run with signed scores and CMD
  from the run with absolute scores (print_results.py lines 88-97: ``abs-False`` for cpr, ``abs-True`` for
  cmd); ``mib_scores`` does both.

Beyond MIB: percentile bootstrap intervals over prompts (the per-prompt metric of every circuit is kept, the
prompts resampled with replacement, CPR and CMD recomputed with m(full) and m(empty) of the same resample).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int

from circuits.graph import CircuitGraph
from core.errors import MethodError

GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
LEVELS = ("edge", "node")


def area_under(fractions: Sequence[float], faith: Sequence[float]) -> float:
    """CPR: trapezoids of the faithfulness curve over the fractions (linear axis)."""
    _check_curve(fractions, faith)
    return float(sum((fractions[i + 1] - fractions[i]) * (faith[i] + faith[i + 1]) / 2
                     for i in range(len(fractions) - 1)))


def area_from_1(fractions: Sequence[float], faith: Sequence[float]) -> float:
    """CMD: trapezoids of |1 - faithfulness| over the fractions (linear axis)."""
    _check_curve(fractions, faith)
    return float(sum((fractions[i + 1] - fractions[i]) * (abs(1 - faith[i]) + abs(1 - faith[i + 1])) / 2
                     for i in range(len(fractions) - 1)))


def _check_curve(fractions: Sequence[float], faith: Sequence[float]) -> None:
    if len(fractions) != len(faith) or len(fractions) < 2:
        raise MethodError("a faithfulness curve needs one value per size and at least two sizes")
    if any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)):
        raise MethodError("circuit sizes must increase")


def normalized(values: Float[torch.Tensor, "*batch size"], full: Float[torch.Tensor, "*batch"],
               empty: Float[torch.Tensor, "*batch"]) -> Float[torch.Tensor, "*batch size"]:
    """(m(C) - m(empty)) / (m(full) - m(empty)), elementwise (values [..., size], full/empty [...])."""
    return (values - empty[..., None]) / (full - empty)[..., None]


def sizes(grid: Sequence[float], n_items: int) -> list[int]:
    """MIB's item counts: int(pct * n_items) for each fraction of the grid."""
    return [int(p * n_items) for p in grid]


def check_grid(grid: Sequence[float]) -> list[float]:
    grid = [float(p) for p in grid]
    if len(grid) < 2 or any(not (0 < p <= 1) for p in grid) or sorted(set(grid)) != grid:
        raise MethodError("the grid must list at least two increasing fractions in (0, 1]")
    return grid


# -- circuits of a size ------------------------------------------------------------------------------
def top_edges(graph: CircuitGraph, scores: Float[torch.Tensor, " edge"], n: int,
              absolute: bool) -> Bool[torch.Tensor, " edge"]:
    """The n highest-scoring edges (by |score| when ``absolute``), ties by edge order, then pruned."""
    mask = torch.zeros(graph.n_edges, dtype=torch.bool)
    if n > 0:
        key = scores.double().abs() if absolute else scores.double()
        mask[torch.argsort(key, descending=True, stable=True)[:n]] = True
    return graph.prune_connected(mask)


def node_scores_of(graph: CircuitGraph, edge_scores: Float[torch.Tensor, " edge"]) -> Float[torch.Tensor, " sender"]:
    """A sender's node score from its edges: the sum of its outgoing edge scores (for EAP, EAP-IG and DPA
    this is exactly the node attribution: the gradient/target at a sender's output is the sum of those at
    the receivers it writes to)."""
    return graph.dense(edge_scores.double()).sum(1).float()


def top_nodes(graph: CircuitGraph, node_scores: Float[torch.Tensor, " sender"], n: int,
              absolute: bool) -> Bool[torch.Tensor, " edge"]:
    """Edge mask of the n highest-scoring nodes (senders): all their outgoing edges, then pruned."""
    mask = torch.zeros(graph.n_edges, dtype=torch.bool)
    if n > 0:
        key = node_scores.double().abs() if absolute else node_scores.double()
        chosen = torch.zeros(len(graph.senders), dtype=torch.bool)
        chosen[torch.argsort(key, descending=True, stable=True)[:n]] = True
        mask = chosen[graph.edges[:, 0]]
    return graph.prune_connected(mask)


# -- scores from per-prompt metrics ------------------------------------------------------------------
@dataclass
class Curve:
    """One MIB curve: the grid, the item counts, the edges kept after pruning, the faithfulness values."""

    fractions: list[float]
    counts: list[int]
    edges_kept: list[int]
    faithfulness: list[float]
    absolute: bool

    @property
    def cpr(self) -> float:
        return area_under(self.fractions, self.faithfulness)

    @property
    def cmd(self) -> float:
        return area_from_1(self.fractions, self.faithfulness)


def curve_values(per_prompt: Float[torch.Tensor, "mask prompt"], full: int, empty: int, points: list[int],
                 idx: Int[torch.Tensor, " sample"] | None = None) -> Float[torch.Tensor, " point"]:
    """Normalised faithfulness at each point from per-prompt metrics [mask, prompt] (optionally over a
    resample ``idx`` of the prompts)."""
    m = per_prompt if idx is None else per_prompt[:, idx]
    means = m.mean(-1)
    return normalized(means[points], means[full], means[empty])


def bootstrap(per_prompt: Float[torch.Tensor, "mask prompt"], full: int, empty: int, points_cpr: list[int],
              points_cmd: list[int],
              fractions: list[float], n_boot: int = 1000, seed: int = 0,
              level: float = 0.95) -> dict[str, list[float]]:
    """Percentile intervals of CPR and CMD over prompts resampled with replacement. A resample whose
    span m(full) - m(empty) is zero gives no value and is skipped."""
    n = per_prompt.shape[1]
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (n_boot, n), generator=gen)
    means = per_prompt[:, idx].mean(-1)  # [mask, boot]
    span = means[full] - means[empty]
    ok = span.abs() > 1e-12
    if int(ok.sum()) < 2:
        raise MethodError("the bootstrap found no resample with a nonzero span m(full) - m(empty)")

    def areas(points: list[int], fn) -> Float[torch.Tensor, " boot"]:  # the resamples with a span
        f = (means[points] - means[empty]) / span  # [point, boot]
        return torch.tensor([fn(fractions, f[:, b].tolist()) for b in range(n_boot) if ok[b]])

    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    out = {}
    for name, points, fn in (("cpr", points_cpr, area_under), ("cmd", points_cmd, area_from_1)):
        a = areas(points, fn).double()
        out[name] = [float(torch.quantile(a, lo)), float(torch.quantile(a, hi))]
    return out


def finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise MethodError(f"{what} is not finite ({value})")
    return float(value)
