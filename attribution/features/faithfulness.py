"""The feature-level faithfulness curve: ablate a dictionary's top-k features, measure the logit drop.

For each prompt, the active (position, feature) pairs of one dictionary are ranked by feature-level DPA,
by gradient x activation (act x decoder direction . d metric / d hook_out) and at random. Ablating the
top k replaces the hook_out activation by itself minus those features' contributions (the
reconstruction minus them plus the error term: the error is kept), and the target-minus-foil logit
drop is measured. A faithful ranking drops the logit fastest. All ablations of one prompt run as one
batched forward that starts at the dictionary's layer from the cached residual stream.

Cost per prompt is timed separately: DPA = the cached forward and the top-down pass down to the
dictionary's hook; gradient = a forward and a backward; both then score the same active features.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from attribution.baselines.common import grads, last_logits, metric, prompt_seed
from attribution.dpa.params import DPAParams
from attribution.dpa.pullback import dpa_cache, logit_target, targets_at
from attribution.features.placement import Sources, placement, sources
from attribution.features.scores import hooks_of
from attribution.methods import FEATURE, view
from core.errors import DatasetError

if TYPE_CHECKING:
    from jaxtyping import Float

    from attribution.sae.dictionary import Dictionary
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

GRID = (1, 2, 5, 10, 20, 50)
METHODS: tuple[str, ...] = (*view(FEATURE), "random")  # the table's feature level, then a random order


@dataclass
class FeatureCurve:
    """One dictionary over a prompt set: per method, the logit drop at each k (mean over prompts)."""

    dictionary: str
    grid: list[int]
    n_prompts: int
    clean: float  # mean clean target-minus-foil logit
    drop: dict[str, list[float]]  # method -> mean logit drop per k
    drop_sem: dict[str, list[float]]  # its standard error
    seconds: dict[str, float]  # method -> mean seconds per prompt (scoring only)
    n_active: float  # mean active (position, feature) pairs per prompt
    per_prompt: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def normalized(self, method: str) -> list[float]:
        """Mean drop / mean clean logit difference."""
        return [v / self.clean if self.clean else float("nan") for v in self.drop[method]]

    def auc(self, method: str) -> float:
        """Mean normalized drop over the grid (each k weighted equally)."""
        vals = self.normalized(method)
        return sum(vals) / len(vals)

    def to_json(self) -> dict[str, Any]:
        return {"dictionary": self.dictionary, "grid": self.grid, "n_prompts": self.n_prompts, "clean": self.clean,
                "drop": self.drop, "drop_sem": self.drop_sem, "seconds": self.seconds, "n_active": self.n_active,
                "auc": {m: self.auc(m) for m in self.drop}}


def _start_layer(d: Dictionary) -> int:
    """The block whose forward first reads the dictionary's hook_out: ablations rerun from there."""
    place = placement(d)
    return place.mlp if place.mlp is not None else max(place.write[0], 0)


def _ablated_metric(model: HookedModel, enc: Encoding, d: Dictionary, cache: dict[str, torch.Tensor],
                    deltas: torch.Tensor) -> torch.Tensor:
    """Target-minus-foil logit with hook_out reduced by each row of deltas [n, pos, d_model] -> [n]."""
    start = _start_layer(d)
    resid = cache[f"blocks.{start}.hook_resid_pre"].expand(len(deltas), -1, -1)

    def ablate(x: Float[torch.Tensor, "n pos d_model"], hook: Any,  # noqa: ARG001
               ) -> Float[torch.Tensor, "n pos d_model"]:
        return x - deltas.to(x.dtype)

    with torch.no_grad():
        logits = last_logits(model, enc.tokens.expand(len(deltas), -1), [(d.hook_out, ablate)],
                             start_layer=start, resid=resid)
    return metric(logits, enc).double()


def _deltas(src: Sources, orders: list[torch.Tensor], grid: list[int], seq: int) -> torch.Tensor:
    """Row per (order, k): the summed contribution of the first k pairs of that order [n, pos, d_model]."""
    rows = []
    for order in orders:
        for k in grid:
            idx = order[:k]
            delta = src.contrib.new_zeros(seq, src.contrib.shape[-1])
            delta.index_add_(0, src.positions[idx], src.contrib[idx])
            rows.append(delta)
    return torch.stack(rows)


def prompt_curve(model: HookedModel, enc: Encoding, d: Dictionary, grid: list[int], keep_first: bool = False,
                 p: DPAParams | None = None, seed: int = 0) -> dict[str, Any]:
    """One prompt: clean metric, drops per method and k, scoring seconds per method, active pairs."""
    p = p or DPAParams()
    place = placement(d)
    extra = hooks_of([d]) + [f"blocks.{_start_layer(d)}.hook_resid_pre"]
    started = time.perf_counter()
    cache = dpa_cache(model, enc.tokens, p, extra)
    t, _ = logit_target(model, enc, cache)
    top = (model.arch.n_layers - 1, "post")
    t_at = targets_at(model, cache, t, top, [place.write], p)[place.write]
    dpa_s = time.perf_counter() - started
    started = time.perf_counter()
    src = sources(d, cache, keep_first)
    dpa_scores = src.feature_scores(t_at)[0]
    score_s = time.perf_counter() - started
    started = time.perf_counter()
    _, g, _ = grads(model, enc, [d.hook_out])
    grad_scores = src.feature_scores(g[d.hook_out].float())[0]
    grad_s = time.perf_counter() - started + score_s
    gen = torch.Generator().manual_seed(prompt_seed(enc, seed))
    n = len(src.acts)
    orders = {"dpa": torch.argsort(dpa_scores, descending=True),
              "gradient": torch.argsort(grad_scores, descending=True), "random": torch.randperm(n, generator=gen)}
    seq = enc.seq_len
    deltas = torch.cat([torch.zeros(1, seq, src.contrib.shape[-1]), _deltas(src, list(orders.values()), grid, seq)])
    values = _ablated_metric(model, enc, d, cache, deltas)
    clean = float(values[0])
    drops = (clean - values[1:]).view(len(orders), len(grid))
    return {"clean": clean, "drop": {m: drops[i].tolist() for i, m in enumerate(orders)}, "n_active": n,
            "seconds": {"dpa": dpa_s + score_s, "gradient": grad_s}}


def feature_curve(model: HookedModel, rows: list[dict[str, Any]], d: Dictionary, grid: tuple[int, ...] = GRID,
                  keep_first: bool = False, use_foil: bool = True, seed: int = 0,
                  on_step: Callable[[int], None] | None = None, **params: Any) -> FeatureCurve:
    """The curve of one dictionary over prompt rows {"prompt", "target", "foil"?}."""
    if not rows:
        raise DatasetError("no prompts to evaluate")
    p = DPAParams.from_kwargs(**params)
    d.check_model(model)
    placement(d)
    per = []
    for row in rows:
        enc = model.encode(row["prompt"], row.get("target"), row.get("foil") if use_foil else None)
        per.append(prompt_curve(model, enc, d, list(grid), keep_first, p, seed))
        if on_step:
            on_step(1)
    n = len(per)
    drop, sem = {}, {}
    for m in METHODS:
        mat = torch.tensor([r["drop"][m] for r in per], dtype=torch.float64)
        drop[m] = mat.mean(0).tolist()
        sem[m] = (mat.std(0) / n**0.5).tolist() if n > 1 else [0.0] * len(grid)
    return FeatureCurve(dictionary=d.name, grid=list(grid), n_prompts=n, clean=sum(r["clean"] for r in per) / n,
                        drop=drop, drop_sem=sem,
                        seconds={m: sum(r["seconds"][m] for r in per) / n for m in ("dpa", "gradient")},
                        n_active=sum(r["n_active"] for r in per) / n, per_prompt=per)


def curve_figure(curves: list[FeatureCurve], title: str = "Feature-level faithfulness"):
    """Normalized logit drop vs k, one panel per dictionary, one line per method."""
    from plotly.subplots import make_subplots

    cols = min(4, len(curves))
    rows = -(-len(curves) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[c.dictionary[-40:] for c in curves])
    colours = {"dpa": "#2166ac", "gradient": "#d6604d", "random": "#999999"}
    for i, c in enumerate(curves):
        r, col = i // cols + 1, i % cols + 1
        for m in METHODS:
            fig.add_scatter(x=c.grid, y=c.normalized(m), name=m, legendgroup=m, showlegend=i == 0,
                            line={"color": colours[m]}, row=r, col=col)
        fig.update_xaxes(type="log", title_text="features ablated (k)" if r == rows else None, row=r, col=col)
    fig.update_yaxes(title_text="logit drop / clean diff", col=1)
    fig.update_layout(title=title, height=300 * rows + 80)
    return fig
