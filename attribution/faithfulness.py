"""Faithfulness of attribution methods: disrupt / recover curves (../shared/specs/metrics.md).

For each example and method, items (tokens; heads, ranked by their score summed over query positions;
neurons, ranked by their score summed over positions) are ordered by score: by the signed score
(rank="signed": items that push the target up come first) or by its magnitude (rank="abs": items with
the largest influence either way come first, as unsigned methods such as gradient_norm already do).
For each fraction p of a grid that holds both 0 and 1:

- disrupt(p): ablate the top round(p n) items;      recover(p): ablate the bottom round((1 - p) n) items
  (everything but the top), so recover(p) ablates as many items as disrupt(1 - p) and a random ranking
  scores 0 in expectation on a symmetric grid;
- record 100 * p_target(ablated) / p_target(clean).

The ratio is undefined when p_target(clean) is 0 for the model's float32 arithmetic (below float32's
smallest normal number, about 1.2e-38: a target the model rules out entirely) or when any ratio is not
finite. Such an example is said so (``left_out``, with the reason), excluded from every method's means
(paired: all methods on the same examples) and counted (``n_left_out``); no result carries NaN or Infinity.
Ratios are computed from log-probabilities in float64, so a small but normal p_target(clean) (1e-33) gives
a large, finite ratio rather than an overflow.

AUC by the trapezoid rule over the grid; total = recover AUC - disrupt AUC (higher is better). Ablation
zeroes the item (token embedding, head output z, neuron activation) or, with ablation="mean", replaces it by
its mean over every position of the evaluated prompts. When activation patching is among the methods, its
per-item effects are the ground truth for every other method's Spearman correlation and top-10 recall
(top items by |score|). Attribution time is measured around the method call alone (evaluation excluded);
methods are called in an order that rotates from one example to the next (see _call_order).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Bool, Float, Int

from attribution import get_method
from attribution.baselines.common import last_logits
from attribution.baselines.patching import ablated_logits, clean_residuals, item_shape, mean_fill
from attribution.methods import METHODS, as_scored, canonical
from attribution.result import CONVERGED_REL_TOL
from core.errors import MethodError
from core.prompt_files import encode_rows
from core.store import RunDraft, RunStore

LEVELS = ("token", "head", "neuron")
RANKS = ("signed", "abs")
TOKEN_GRID = [round(i / 10, 1) for i in range(11)]
# Below float32's smallest normal number a probability is 0 (or precision-less) for the model's arithmetic.
P_CLEAN_MIN = float(torch.finfo(torch.float32).tiny)
TRUTH = "activation_patching"


def component_grid(n_items: int, points: int = 8) -> list[float]:
    """0, log-spaced fractions from one item up to 1/2, their mirror images 1 - p, and 1 (symmetric)."""
    lo = max(1.0 / n_items, 1e-6)
    low = [math.exp(math.log(lo) + i * (math.log(0.5) - math.log(lo)) / (points - 1)) for i in range(points)]
    high = [1 - p for p in reversed(low[:-1])]
    return [0.0] + low + high + [1.0]


def grid_for(model: Any, level: str) -> list[float]:
    a = model.arch
    if level == "token":
        return TOKEN_GRID
    return component_grid(a.n_layers * (a.n_heads if level == "head" else (a.d_mlp or 1)))


def check_grid(grid: list[float]) -> list[float]:
    """A grid given by the caller: at least two increasing fractions within [0, 1]."""
    grid = [float(p) for p in grid]
    steps = [b - a for a, b in zip(grid[:-1], grid[1:], strict=True)]
    if len(grid) < 2 or any(not 0.0 <= p <= 1.0 for p in grid) or any(d <= 0 for d in steps):
        raise MethodError(f"grid must be at least two increasing fractions in [0, 1] (got {grid})")
    return grid


def trapezoid(ys: list[float], xs: list[float]) -> float:
    return sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(len(xs) - 1))


def resolve_method(name: str, level: str) -> tuple[str, str, Callable]:
    """(canonical name, level the method is called at, function). Methods with query-key scores but no head
    level (the attention baselines) are ranked at head level from their qk scores; see item_scores."""
    name = canonical(name)
    if name not in METHODS:
        raise MethodError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    if level not in LEVELS:
        raise MethodError(f"faithfulness has no level {level!r}; levels: {', '.join(LEVELS)}")
    spec = METHODS[name]
    call_level = level
    if level == "head" and "head" not in spec.levels and "qk" in spec.levels:
        call_level = "qk"
    return name, call_level, get_method(name, call_level)[1]


def item_scores(scores: Float[torch.Tensor, "*axes"], level: str, call_level: str) -> Float[torch.Tensor, "*items"]:
    """One score per ablatable item: token [S], head [L, H] (sum over queries), neuron [L, N] (sum over
    positions). From query-key pairs (attention baselines): a head's mass off the first key (the attention sink,
    which every head's rows would otherwise tie on at 1), summed over queries."""
    s = scores.detach().float().cpu()
    if call_level == "qk":
        return s[..., 1:].sum((-1, -2))
    if level == "head":
        return s.sum(-1)
    if level == "neuron":
        return s.sum(1)
    return s


def ranking(scores: Float[torch.Tensor, "*items"], gen: torch.Generator) -> Int[torch.Tensor, " item"]:
    """Item indices from the highest score down, ties broken at random (not by index)."""
    flat = scores.flatten()
    flat = torch.where(torch.isfinite(flat), flat, torch.full_like(flat, -math.inf))
    perm = torch.randperm(flat.numel(), generator=gen)
    return perm[torch.argsort(flat[perm], descending=True, stable=True)]


def curve_masks(order: Int[torch.Tensor, " item"],
                grid: list[float]) -> tuple[Bool[torch.Tensor, "grid item"], Bool[torch.Tensor, "grid item"]]:
    """Boolean masks (True = ablate) [G, n] for disrupt and recover along the grid."""
    n = order.numel()
    k = [int(math.floor(p * n + 0.5)) for p in grid]
    disrupt = torch.zeros(len(grid), n, dtype=torch.bool)
    recover = torch.zeros(len(grid), n, dtype=torch.bool)
    for g, p in enumerate(grid):
        disrupt[g, order[:k[g]]] = True
        kr = int(math.floor((1 - p) * n + 0.5))
        recover[g, order[n - kr:]] = True
    return disrupt, recover


def spearman(a: Float[torch.Tensor, "*items"], b: Float[torch.Tensor, "*items"]) -> float | None:
    from scipy.stats import spearmanr

    a, b = a.flatten().numpy(), b.flatten().numpy()
    if a.std() == 0 or b.std() == 0:
        return None
    return float(spearmanr(a, b).statistic)


def recall_at_k(scores: Float[torch.Tensor, "*items"], truth: Float[torch.Tensor, "*items"], k: int = 10) -> float:
    k = min(k, truth.numel())
    top = set(scores.flatten().abs().topk(k).indices.tolist())
    ref = set(truth.flatten().abs().topk(k).indices.tolist())
    return len(top & ref) / k


@dataclass
class MethodFaithfulness:
    name: str
    disrupt_auc: float
    recover_auc: float
    total: float
    attribution_seconds: float  # mean per example, the method call alone
    total_std: float
    n_examples: int
    disrupt_curve: list[float]
    recover_curve: list[float]
    spearman: float | None = None
    recall_at_10: float | None = None
    ranked_from: str | None = None  # "qk" when head ranks come from query-key scores
    # path methods (integrated gradients): examples whose completeness gap exceeds 10% of
    # |f(input) - f(baseline)|, and the median of |gap| / |f(input) - f(baseline)|
    unconverged: int | None = None
    convergence_gap: float | None = None

    def summary(self) -> dict[str, Any]:
        out = {k: self.__dict__[k] for k in ("disrupt_auc", "recover_auc", "total", "attribution_seconds",
                                             "total_std")}
        if self.spearman is not None or self.recall_at_10 is not None:
            out.update(spearman=self.spearman, recall_at_10=self.recall_at_10)
        if self.unconverged is not None:
            out.update(unconverged=self.unconverged, convergence_gap=self.convergence_gap)
        if self.ranked_from:
            out["ranked_from"] = self.ranked_from
        return out


@dataclass
class FaithfulnessResult:
    model: str
    level: str
    ablation: str
    grid: list[float]
    n_examples: int
    methods: dict[str, MethodFaithfulness]
    use_foil: bool = True
    rank: str = "signed"
    per_example: list[dict[str, Any]] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    left_out: list[dict[str, Any]] = field(default_factory=list)  # {"example": i, "why": ...}

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "level": self.level, "ablation": self.ablation, "grid": self.grid,
                "n_examples": self.n_examples, "n_left_out": len(self.left_out), "left_out": self.left_out,
                "use_foil": self.use_foil, "rank": self.rank,
                "methods": {n: m.summary() for n, m in self.methods.items()},
                "curves": {n: {"disrupt": m.disrupt_curve, "recover": m.recover_curve}
                           for n, m in self.methods.items()}}

    def table(self):
        import pandas as pd

        rows = [{"method": n, **m.summary()} for n, m in self.methods.items()]
        return pd.DataFrame(rows).sort_values("total", ascending=False, ignore_index=True)

    def markdown(self) -> str:
        cols = ["method", "disrupt_auc", "recover_auc", "total", "total_std", "attribution_seconds"]
        has_truth = any(m.spearman is not None or m.recall_at_10 is not None for m in self.methods.values())
        if has_truth:
            cols += ["spearman", "recall_at_10"]
        if any(m.unconverged is not None for m in self.methods.values()):
            cols += ["unconverged", "convergence_gap"]  # path methods: examples whose scores do not add up
        lines = [f"Faithfulness on {self.model}, {self.level} level, {self.ablation} ablation, "
                 f"{self.n_examples} examples"
                 + (f" ({len(self.left_out)} left out: ratio undefined, see left_out)" if self.left_out else "")
                 + f", ranked by {self.rank} score (higher total is better)", "",
                 "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for row in self.table().to_dict("records"):
            cells = []
            for c in cols:
                v = row.get(c)
                cells.append("-" if v is None or (isinstance(v, float) and math.isnan(v)) else
                             (f"{v:.4f}" if c == "attribution_seconds" else
                              f"{v:.2f}" if isinstance(v, float) else str(v)))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def plot(self):
        import plotly.graph_objects as go

        fig = go.Figure()
        for n, m in self.methods.items():
            fig.add_trace(go.Scatter(x=self.grid, y=m.disrupt_curve, name=f"{n} disrupt",
                                     mode="lines+markers"))
            fig.add_trace(go.Scatter(x=self.grid, y=m.recover_curve, name=f"{n} recover",
                                     mode="lines+markers", line={"dash": "dash"}))
        fig.update_layout(title=f"Disrupt (solid) / recover (dashed) · {self.model} · {self.level}",
                          xaxis_title="fraction of items", yaxis_title="100 · p(target) / p_clean(target)")
        if self.level != "token":
            fig.update_xaxes(type="log", dtick=1)  # every decade, written in full
        return fig

    def save(self, store=None):
        import pandas as pd

        store = store or RunStore()
        return store.save(RunDraft(
            kind="faithfulness", model=self.model, method=",".join(self.methods), args=self.args,
            timings={f"{n}_attribution_seconds": m.attribution_seconds for n, m in self.methods.items()},
            result=self.to_json(),
            tables={"summary": self.table(), "per_example": pd.DataFrame(self.per_example)},
            figures={"curves": self.plot()}, files={"table.md": self.markdown() + "\n"},
        ))


@dataclass
class FaithfulnessPart:
    """What evaluate_part measured on some of the examples: per-method lists in example order. Parts of
    one evaluation, combined in order (combine), give exactly what evaluate gives on all examples; this is
    how a job shards examples across workers."""

    indices: list[int]
    grid: list[float]
    per_method: dict[str, dict[str, list]]
    per_example: list[dict[str, Any]]
    left_out: list[dict[str, Any]]


def _prepare(model: Any, examples: list[dict[str, Any]], methods: list[str], level: str, ablation: str,
             params: dict[str, dict[str, Any]] | None, rank: str, grid: list[float] | None):
    if ablation not in ("zero", "mean"):
        raise MethodError(f"unknown ablation {ablation!r}: zero or mean")
    if rank not in RANKS:
        raise MethodError(f"unknown rank {rank!r}: {' or '.join(RANKS)}")
    resolved = [resolve_method(m, level) for m in methods]
    names = [r[0] for r in resolved]
    if len(set(names)) != len(names):
        raise MethodError(f"a method is listed twice: {', '.join(methods)}")
    if not examples:
        raise MethodError("no examples to evaluate")
    params = {canonical(k): v for k, v in (params or {}).items()}
    grid = check_grid(grid) if grid is not None else grid_for(model, level)
    return resolved, params, grid


def evaluate(model: Any, examples: list[dict[str, Any]], methods: list[str], level: str = "token",
             ablation: str = "zero", use_foil: bool = True, params: dict[str, dict[str, Any]] | None = None,
             batch_size: int = 32, seed: int = 0, on_step: Callable[[], None] | None = None,
             rank: str = "signed", grid: list[float] | None = None) -> FaithfulnessResult:
    """Run the protocol on examples ({"prompt", "target", "foil"?}) for each method.

    grid: fractions p (default: the level's grid, which holds 0 and 1 so random scores 0). Another grid,
    such as the paper scripts' 0.1 ... 1.0, is for comparing with published figures only."""
    part = evaluate_part(model, examples, methods, None, level=level, ablation=ablation, use_foil=use_foil,
                         params=params, batch_size=batch_size, seed=seed, on_step=on_step, rank=rank, grid=grid)
    return combine(model.name, examples, methods, [part], level=level, ablation=ablation, use_foil=use_foil,
                   params=params, rank=rank)


def evaluate_part(model: Any, examples: list[dict[str, Any]], methods: list[str], indices: list[int] | None,
                  level: str = "token", ablation: str = "zero", use_foil: bool = True,
                  params: dict[str, dict[str, Any]] | None = None, batch_size: int = 32, seed: int = 0,
                  on_step: Callable[[], None] | None = None, rank: str = "signed",
                  grid: list[float] | None = None) -> FaithfulnessPart:
    """The protocol on the examples at ``indices`` (None: all). Every example is still encoded (a bad row
    fails here, whichever part holds it) and the mean fill is over all of them, so a part's numbers do not
    depend on how the examples were split."""
    resolved, params, grid = _prepare(model, examples, methods, level, ablation, params, rank, grid)
    names = [r[0] for r in resolved]
    encs = encode_rows(model, examples, use_foil)
    indices = list(range(len(encs))) if indices is None else list(indices)
    fill = mean_fill(model, [e.tokens for e in encs], level) if ablation == "mean" else None
    keys = ("d", "r", "sec", "rho", "rec", "gap")
    per_method: dict[str, dict[str, list]] = {n: {k: [] for k in keys} for n in names}
    per_example = []
    left_out: list[dict[str, Any]] = []
    order_names = sorted(resolved, key=lambda r: r[0] != TRUTH)  # ground truth first
    for ex_i in indices:
        enc = encs[ex_i]
        gen = torch.Generator().manual_seed(seed * 100003 + ex_i)
        resid = clean_residuals(model, enc.tokens) if level != "token" else None
        with torch.no_grad():
            clean_logits = last_logits(model, enc.tokens)
        logp_clean = torch.log_softmax(clean_logits.double(), -1)[0, enc.target_id]
        p_clean = float(logp_clean.exp())
        if not p_clean >= P_CLEAN_MIN:  # NaN too
            why = (f"clean target probability {p_clean:.3g} is 0 at float32 precision: "
                   "the ratio p(ablated) / p(clean) is undefined")
            left_out.append({"example": ex_i, "prompt": examples[ex_i].get("prompt"), "why": why})
            per_example.extend({"example": ex_i, "method": n, "left_out": why} for n in names)
            if on_step:
                on_step()
            continue
        shape = item_shape(model, enc.seq_len, level)
        truth = None
        masks, owners = [], []
        raw = {}
        for name, call_level, fn in _call_order(order_names, ex_i):
            kwargs = dict(params.get(name, {}))
            if name == TRUTH:
                kwargs.setdefault("ablation", ablation)
                if fill is not None:
                    kwargs.setdefault("fill", fill)
            started = time.perf_counter()
            raw[name] = as_scored(fn(model, enc, call_level, **kwargs))
            per_method[name]["sec"].append(time.perf_counter() - started)
        for name, call_level, _ in order_names:
            items = item_scores(raw[name].scores, level, call_level)
            if name == TRUTH:
                truth = items
            elif truth is not None:
                rho = spearman(items, truth)
                per_method[name]["rho"].append(rho)
                per_method[name]["rec"].append(recall_at_k(items, truth))
            d, r = curve_masks(ranking(items.abs() if rank == "abs" else items, gen), grid)
            masks.append(torch.cat([d, r]))
            owners.append(name)
        ratios = _ratios(model, enc, level, torch.cat(masks), shape, fill, resid, logp_clean, batch_size)
        g = len(grid)
        if not bool(torch.isfinite(ratios).all()):
            why = "a ratio p(ablated) / p(clean) is not finite"
            left_out.append({"example": ex_i, "prompt": examples[ex_i].get("prompt"), "why": why})
            per_example.extend({"example": ex_i, "method": n, "left_out": why} for n in owners)
            for name in names:  # paired: every method leaves this example out
                for k in ("sec", "rho", "rec"):
                    del per_method[name][k][len(per_method[name]["d"]):]
            if on_step:
                on_step()
            continue
        for j, name in enumerate(owners):
            rows = ratios[j * 2 * g:(j + 1) * 2 * g]
            dcur, rcur = rows[:g].tolist(), rows[g:].tolist()
            per_method[name]["d"].append(dcur)
            per_method[name]["r"].append(rcur)
            per_example.append({"example": ex_i, "method": name, "disrupt_auc": trapezoid(dcur, grid),
                                "recover_auc": trapezoid(rcur, grid),
                                "attribution_seconds": per_method[name]["sec"][-1], **_gap(raw[name])})
            if raw[name].convergence_delta is not None:
                per_method[name]["gap"].append(per_example[-1]["relative_gap"])
        if on_step:
            on_step()
    return FaithfulnessPart(indices=indices, grid=grid, per_method=per_method, per_example=per_example,
                            left_out=left_out)


def combine(model_name: str, examples: list[dict[str, Any]], methods: list[str], parts: list[FaithfulnessPart],
            level: str = "token", ablation: str = "zero", use_foil: bool = True,
            params: dict[str, dict[str, Any]] | None = None, rank: str = "signed") -> FaithfulnessResult:
    """The result of parts of one evaluation (evaluate_part, same arguments) that together cover every
    example once, in any order of parts."""
    resolved = [resolve_method(m, level) for m in methods]
    names = [r[0] for r in resolved]
    params = {canonical(k): v for k, v in (params or {}).items()}
    parts = sorted(parts, key=lambda p: p.indices[0] if p.indices else -1)
    covered = [i for p in parts for i in p.indices]
    if covered != list(range(len(examples))):
        raise MethodError(f"the parts cover examples {covered}, not 0..{len(examples) - 1} once each")
    per_method = {n: {k: [x for p in parts for x in p.per_method[n][k]] for k in parts[0].per_method[n]}
                  for n in names}
    per_example = [row for p in parts for row in p.per_example]
    left_out = [row for p in parts for row in p.left_out]
    n_examples, grid = len(examples), parts[0].grid
    if len(left_out) == n_examples:
        raise MethodError(f"no example has a defined faithfulness ratio ({n_examples} left out; first: "
                          f"{left_out[0]['why']})")
    out = {}
    for name, call_level, _ in resolved:
        pm = per_method[name]
        d_auc = [trapezoid(c, grid) for c in pm["d"]]
        r_auc = [trapezoid(c, grid) for c in pm["r"]]
        totals = [r - d for r, d in zip(r_auc, d_auc, strict=True)]
        rhos = [x for x in pm["rho"] if x is not None]
        out[name] = MethodFaithfulness(
            name=name, disrupt_auc=_mean(d_auc), recover_auc=_mean(r_auc), total=_mean(totals),
            attribution_seconds=_mean(pm["sec"]), total_std=_std(totals), n_examples=len(totals),
            disrupt_curve=[_mean(c) for c in zip(*pm["d"], strict=True)],
            recover_curve=[_mean(c) for c in zip(*pm["r"], strict=True)],
            spearman=_mean(rhos) if rhos else None, recall_at_10=_mean(pm["rec"]) if pm["rec"] else None,
            ranked_from="qk" if call_level == "qk" and level == "head" else None,
            unconverged=sum(g > CONVERGED_REL_TOL for g in pm["gap"]) if pm["gap"] else None,
            convergence_gap=statistics.median(pm["gap"]) if pm["gap"] else None)
    args = {"level": level, "ablation": ablation, "methods": names, "use_foil": use_foil, "params": params,
            "n_examples": n_examples, "rank": rank, "grid": grid}
    return FaithfulnessResult(model=model_name, level=level, ablation=ablation, grid=grid,
                              n_examples=n_examples, methods=out, use_foil=use_foil, rank=rank,
                              per_example=per_example, args=args, left_out=left_out)


def _gap(out: Any) -> dict[str, Any]:
    """A path method's completeness gap on one example (nothing for other methods)."""
    if out.convergence_delta is None:
        return {}
    scale = abs(out.target_logit - out.baseline_logit)
    rel = abs(out.convergence_delta) / scale if scale > 0 else (0.0 if out.convergence_delta == 0 else 1e9)
    return {"convergence_delta": out.convergence_delta, "relative_gap": rel}


def _call_order(methods: list[tuple], ex_i: int) -> list[tuple]:
    """The ground truth first, then the others rotated by one per example: the method called right after
    the expensive patching run pays for its cold caches, and no method should always be that one."""
    first = [m for m in methods if m[0] == TRUTH]
    rest = [m for m in methods if m[0] != TRUTH]
    k = ex_i % len(rest) if rest else 0
    return first + rest[k:] + rest[:k]


def _ratios(model, enc, level, masks, shape, fill, resid, logp_clean, batch_size) -> torch.Tensor:
    """100 * p_target(ablated) / p_target(clean) per mask row (float64, from log-probabilities); identical
    masks run once, empty ones (the clean run) are exactly 100."""
    keys = {}
    unique_rows = []
    index = torch.empty(masks.shape[0], dtype=torch.long)
    for i, row in enumerate(masks):
        key = row.numpy().tobytes()
        if key not in keys:
            keys[key] = len(unique_rows)
            unique_rows.append(row)
        index[i] = keys[key]
    uniq = torch.stack(unique_rows)
    ratios = torch.full((len(uniq),), 100.0, dtype=torch.float64)
    todo = uniq.any(-1).nonzero().flatten()  # ablating nothing is the clean run: exactly 100
    if len(todo):
        logits = ablated_logits(model, enc.tokens, level, uniq[todo].view(len(todo), *shape), fill, resid,
                                batch_size=batch_size)
        logp = torch.log_softmax(logits.double(), -1)[:, enc.target_id]
        ratios[todo] = 100.0 * torch.exp(logp - logp_clean)
    return ratios[index]


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else float("nan")


def _std(xs) -> float:
    xs = list(xs)
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return float((sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5)


__all__ = ["evaluate", "evaluate_part", "combine", "FaithfulnessPart", "FaithfulnessResult", "MethodFaithfulness",
           "component_grid", "grid_for"]
