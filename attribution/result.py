"""AttributionResult: scores on named axes that display, table and save themselves."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from attribution.methods import prompt_level
from core.errors import WorkbenchError
from core.figures import save_figure

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

CONVERGED_REL_TOL = 0.1  # a path method converged when |gap| <= 10% of |f(input) - f(baseline)|
TOKEN_AXES = ("token", "position", "query", "key")  # axes that run over the prompt's tokens


def top_items(scores: Any, axes: tuple[str, ...], tokens: list[str], k: int = 10) -> list[dict[str, Any]]:
    """The k items with the largest |score|, largest first, as {axis: index, "<axis>_str": token, "score"},
    without expanding a big score tensor (edges) into a table of every item."""
    import torch

    s = scores.detach().float().cpu() if isinstance(scores, torch.Tensor) else torch.as_tensor(scores).float()
    flat = s.flatten()
    best = flat.abs().topk(min(k, flat.numel())).indices
    coords = torch.stack(torch.unravel_index(best, s.shape), dim=1).tolist()
    rows = []
    for i, at in zip(best.tolist(), coords, strict=True):
        row: dict[str, Any] = dict(zip(axes, at, strict=True))
        for ax in ("token", "position", "query", "key"):
            if ax in row and row[ax] < len(tokens):
                row[f"{ax}_str"] = tokens[row[ax]]
        row["score"] = float(flat[i])
        rows.append(row)
    return rows


@dataclass
class AttributionResult:
    """One method's scores on one prompt, laid out on ``axes`` (LEVEL_AXES[level]); every axis over the
    prompt (token, position, query, key) has one entry per token.

    Path methods (integrated gradients) also carry baseline_logit, the metric at the path's start, and
    convergence_delta, their completeness gap sum(scores) - (target_logit - baseline_logit).
    """

    model: str
    method: str
    level: str
    axes: tuple[str, ...]
    scores: Float[torch.Tensor, "*axes"]
    tokens: list[str]
    target: str | None = None
    foil: str | None = None
    target_logit: float | None = None  # logit(target), or logit(target) - logit(foil)
    seconds: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    prompt: str | None = None
    baseline_logit: float | None = None
    convergence_delta: float | None = None
    position: int | None = None  # the explained position (index from the start); None: the last

    def __post_init__(self) -> None:
        self.axes = tuple(self.axes)
        self.check()

    def check(self) -> None:
        """The scores lie on the axes: one dimension per axis, one entry per token on token axes."""
        shape = tuple(self.scores.shape)
        if len(shape) != len(self.axes):
            raise WorkbenchError(f"{self.method} {self.level} scores have shape {list(shape)}, which does not "
                                 f"match the axes {list(self.axes)}")
        for ax, n in zip(self.axes, shape, strict=True):
            if ax in TOKEN_AXES and n != len(self.tokens):
                raise WorkbenchError(f"{self.method} {self.level} scores have {n} entries on axis {ax!r} "
                                     f"for {len(self.tokens)} tokens")

    @property
    def converged(self) -> bool | None:
        """Whether a path method's scores add up (|gap| within 10% of the explained difference); None for
        methods without a convergence gap."""
        if self.convergence_delta is None:
            return None
        scale = abs((self.target_logit or 0.0) - (self.baseline_logit or 0.0))
        return abs(self.convergence_delta) <= CONVERGED_REL_TOL * scale

    def to_json(self) -> dict[str, Any]:
        out = {
            "model": self.model, "method": self.method, "level": self.level, "tokens": self.tokens,
            "axes": list(self.axes), "scores": self.scores.detach().float().cpu().tolist(),
            "target": self.target, "foil": self.foil, "target_logit": self.target_logit,
            "seconds": self.seconds, "params": self.params, "prompt": self.prompt,
            "position": self.position,
        }
        if self.convergence_delta is not None:
            out.update(baseline_logit=self.baseline_logit, convergence_delta=self.convergence_delta,
                       converged=self.converged)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], scores: Any = None) -> AttributionResult:
        """The result from ``to_json``'s dict (a stored run's result.json); ``scores`` (a tensor) replaces
        the dict's own when given. Unknown keys are dropped; the scores must match the axes."""
        import torch

        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        missing = [k for k in ("model", "method", "level", "axes", "tokens") if kwargs.get(k) is None]
        if scores is None and "scores" not in data:
            missing.append("scores")
        if missing:
            raise WorkbenchError(f"attribution result without {', '.join(missing)}")
        kwargs["scores"] = torch.as_tensor(data["scores"] if scores is None else scores, dtype=torch.float32)
        kwargs["axes"] = tuple(kwargs["axes"])
        kwargs["level"] = prompt_level(kwargs["level"])  # a run stored before "edge" became "qk" opens as qk
        return cls(**kwargs)

    def top(self, k: int = 10) -> list[dict[str, Any]]:
        """The k items with the largest |score| (see top_items)."""
        return top_items(self.scores, self.axes, self.tokens, k)

    def table(self):
        """Long-format pandas table: one row per scored item, sorted by score."""
        import itertools

        import pandas as pd

        s = self.scores.detach().float().cpu()
        rows = []
        for idx in itertools.product(*[range(n) for n in s.shape]):
            row = dict(zip(self.axes, idx, strict=False))
            for ax in ("token", "query", "key", "position"):
                if ax in row and row[ax] < len(self.tokens):
                    row[f"{ax}_str"] = self.tokens[row[ax]]
            row["score"] = float(s[idx])
            rows.append(row)
        return pd.DataFrame(rows).sort_values("score", ascending=False, ignore_index=True)

    def plot(self):
        """A plotly figure suited to the level; every sum over an axis is named in the colour bar's title.
        Signed scores are drawn on a diverging scale centred at 0 (blue raises the target minus the foil, red
        lowers it, as in the circuit figures)."""
        import plotly.graph_objects as go

        s = self.scores.detach().float().cpu()
        what = f"logit({self.target!r})" + (f" − logit({self.foil!r})" if self.foil else "")
        at = "" if self.position is None else f" at {self.position}:{self.tokens[self.position]!r}"
        title = f"{self.method} {self.level} attribution of {what}{at} on {self.model}"
        labels = [f"{i}:{t!r}" for i, t in enumerate(self.tokens)]
        diverging = {"colorscale": "RdBu", "zmid": 0}

        def bar(text: str) -> dict[str, Any]:
            return {"colorbar": {"title": {"text": text, "side": "right"}}}

        if self.level == "token":
            fig = go.Figure(go.Bar(x=labels, y=s.tolist(), marker_color=["#2166ac" if v >= 0 else "#b2182b"
                                                                          for v in s.tolist()]))
            fig.update_layout(xaxis_title="token", yaxis_title="score")
            fig.update_xaxes(type="category")
        elif self.level == "head":
            n_layers, n_heads = s.shape[0], s.shape[1]
            fig = go.Figure(go.Heatmap(z=s.sum(-1).tolist(), x=[f"H{h}" for h in range(n_heads)],
                                       y=[f"L{l}" for l in range(n_layers)], **diverging,
                                       **bar("score summed over query positions"),
                                       hovertemplate="%{y}.%{x}: %{z:.4g} (summed over query positions)"
                                                     "<extra></extra>"))
            fig.update_layout(xaxis_title="head", yaxis_title="layer")
        elif self.level == "qk":
            fig = go.Figure(go.Heatmap(z=s.sum((0, 1)).tolist(), x=labels, y=labels, **diverging,
                                       **bar("score summed over layers and heads"),
                                       hovertemplate="query %{y}, key %{x}: %{z:.4g} (summed over layers and "
                                                     "heads)<extra></extra>"))
            fig.update_layout(xaxis_title="key", yaxis_title="query")
        else:  # neuron: (layer, position, neuron)
            top = s.abs().argmax(-1)
            best = s.gather(-1, top.unsqueeze(-1)).squeeze(-1)
            hover = [[f"L{l} · {labels[p]}<br>sum over neurons {float(s[l, p].sum()):.4g}<br>strongest neuron "
                      f"N{int(top[l, p])}: {float(best[l, p]):.4g}" for p in range(s.shape[1])]
                     for l in range(s.shape[0])]
            fig = go.Figure(go.Heatmap(z=s.sum(-1).tolist(), x=labels, y=[f"L{l}" for l in range(s.shape[0])],
                                       **diverging, **bar("score summed over neurons"), customdata=hover,
                                       hovertemplate="%{customdata}<extra></extra>"))
            fig.update_layout(xaxis_title="position", yaxis_title="layer")
        if self.level != "token":
            fig.update_xaxes(type="category")
            fig.update_yaxes(type="category")
        fig.update_layout(title=title, width=900, height=max(420, 18 * (s.shape[0] if s.dim() > 1 else 0) + 220))
        return fig

    def colored_tokens(self, skip_first: bool = False) -> Any:
        """A token-level result as coloured text (CircuitsVis' colored_tokens): a ColoredTokens that shows
        itself as HTML in a notebook; ``.html`` the fragment, ``.figure()`` a plotly version. Blue raises the
        target (minus the foil), red lowers it; ``skip_first`` leaves position 0 out of the colour scale."""
        from attribution.colored_tokens import ColoredTokens  # lazy: --help imports this module

        if self.axes != ("token",):
            raise WorkbenchError(f"coloured tokens need token-level scores; this {self.method} result is at level "
                                 f"{self.level!r} (axes {list(self.axes)}): use .plot()")
        what = f"{self.target!r}" + (f" − {self.foil!r}" if self.foil else "")
        return ColoredTokens(self.tokens, self.scores.detach().float().cpu().tolist(),
                             f"{self.method} attribution of {what} on {self.model}", skip_first)

    def html(self, skip_first: bool = False) -> str:
        """The coloured-token HTML fragment of a token-level result (see colored_tokens)."""
        return self.colored_tokens(skip_first).html

    def plot_tokens(self, skip_first: bool = False, per_line: int = 12):
        """The coloured tokens as a plotly figure (see colored_tokens), ``per_line`` tokens a row."""
        return self.colored_tokens(skip_first).figure(per_line)

    def save_figure(self, path: Any) -> Any:
        """Save ``plot()`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        return save_figure(self.plot(), path)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:  # noqa: ANN001
        # notebooks show the figure through plotly's own renderer (its plotly.js ships with Jupyter's extension;
        # an HTML page that loads plotly.js from a CDN is blank offline)
        return self.plot()._repr_mimebundle_(include, exclude)

    def save(self, store=None):
        """Store as a run (kind "attribute"); returns the Run."""
        from core.store import RunDraft, RunStore  # lazy: --help imports this module, not the run store

        store = store or RunStore()
        return store.save(RunDraft(
            kind="attribute", model=self.model, method=self.method,
            args={"level": self.level, "prompt": self.prompt, "target": self.target, "foil": self.foil,
                  **({} if self.position is None else {"position": self.position}), **self.params},
            timings={"attribution_seconds": self.seconds},
            result={k: v for k, v in self.to_json().items() if k != "scores"},
            tensors={"scores": self.scores.detach().float()},
            figures={"scores": self.plot()},
        ))
