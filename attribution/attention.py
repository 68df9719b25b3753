"""Attention patterns of one prompt (CircuitsVis' ``attention_heads`` as a typed result): every head's weights
on named axes (layer, head, query, key) that plot, table and save themselves.

``attention(model, prompt)`` reads ``blocks.{l}.attn.hook_pattern`` through the hooked-model interface (one
forward pass, only the pattern hooks cached), so it runs on every backend that exposes those hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import MethodError, RangeError, WorkbenchError
from core.figures import save_figure
from core.options import check_finite
from core.store import RunDraft, RunStore

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel

AXES = ("layer", "head", "query", "key")
GRID_COLUMNS = 4  # heads a row in the grid view; a 9-head layer is three rows


def token_labels(tokens: list[str]) -> list[str]:
    # plotly merges equal category labels, so the position keeps repeated tokens apart (as app/views.py)
    return [f"{i}:{t!r}"[:24] for i, t in enumerate(tokens)]


@dataclass
class AttentionResult:
    """Every head's attention on one prompt: ``pattern[layer_row, head, query, key]`` (rows of each query sum
    to 1 over keys 0..query). ``layers`` names the model layer of each row (all layers unless a subset was
    asked for); ``tokens`` are the prompt's token strings (BOS included when the model prepends one)."""

    model: str
    tokens: list[str]
    layers: list[int]
    pattern: Float[torch.Tensor, "layer head query key"]
    prompt: str | None = None
    seconds: float = 0.0
    axes: tuple[str, ...] = field(default=AXES)

    def __post_init__(self) -> None:
        shape = tuple(self.pattern.shape)
        n = len(self.tokens)
        if len(shape) != 4 or shape[0] != len(self.layers) or shape[2:] != (n, n):
            raise WorkbenchError(f"attention pattern of shape {list(shape)} does not match {len(self.layers)} "
                                 f"layers x heads x {n} x {n} tokens")

    @property
    def n_heads(self) -> int:
        return int(self.pattern.shape[1])

    def _row(self, layer: int) -> int:
        if isinstance(layer, bool) or not isinstance(layer, int) or layer not in self.layers:
            shown = ", ".join(map(str, self.layers[:8])) + (", ..." if len(self.layers) > 8 else "")
            raise RangeError(f"layer {layer!r} is not in this result (its layers: {shown})")
        return self.layers.index(layer)

    def _head(self, head: int) -> int:
        if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < self.n_heads:
            raise RangeError(f"head {head!r} out of range: layers here have {self.n_heads} heads "
                             f"(0..{self.n_heads - 1})")
        return head

    def head(self, layer: int, head: int) -> Float[torch.Tensor, "query key"]:
        """One head's pattern [query, key]."""
        return self.pattern[self._row(layer), self._head(head)]

    def select(self, layers: Any) -> AttentionResult:
        """The result of ``layers`` only (model layer indices; e.g. ``range(20, 30)``): a smaller figure."""
        rows = [self._row(int(lay)) for lay in layers]
        if not rows:
            raise RangeError("select() needs at least one layer")
        return AttentionResult(model=self.model, tokens=self.tokens, layers=[self.layers[r] for r in rows],
                               pattern=self.pattern[rows], prompt=self.prompt, seconds=self.seconds)

    def top_heads(self, query: int, key: int, k: int = 10) -> list[dict[str, Any]]:
        """The k heads that put the most weight from position ``query`` on position ``key`` (negative
        positions count from the end): [{"layer", "head", "weight"}], largest first."""
        n = len(self.tokens)
        for name, pos in (("query", query), ("key", key)):
            if isinstance(pos, bool) or not isinstance(pos, int) or not -n <= pos < n:
                raise RangeError(f"{name} position {pos!r} out of range: the prompt has {n} tokens "
                                 f"(valid {-n}..{n - 1})")
        w = self.pattern[:, :, query % n, key % n]
        best = w.flatten().topk(min(int(k), w.numel())).indices.tolist()
        return [{"layer": self.layers[i // self.n_heads], "head": i % self.n_heads,
                 "weight": float(w.flatten()[i])} for i in best]

    def table(self, layer: int | None = None, head: int | None = None):
        """Long-format pandas table (layer, head, query, key, their tokens, weight) over the causal cells
        (key <= query), of one layer and/or head when given."""
        import pandas as pd

        rows_ = [self._row(layer)] if layer is not None else range(len(self.layers))
        heads = [self._head(head)] if head is not None else range(self.n_heads)
        p = self.pattern.detach().float().cpu()
        n = len(self.tokens)
        rows = [{"layer": self.layers[r], "head": h, "query": q, "query_str": self.tokens[q], "key": k,
                 "key_str": self.tokens[k], "weight": float(p[r, h, q, k])}
                for r in rows_ for h in heads for q in range(n) for k in range(q + 1)]
        return pd.DataFrame(rows)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "prompt": self.prompt, "tokens": self.tokens, "layers": self.layers,
                "axes": list(self.axes), "pattern": self.pattern.detach().float().cpu().tolist(),
                "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: dict[str, Any], pattern: Any = None) -> AttentionResult:
        """The result from ``to_json``'s dict (a stored run's result.json, whose pattern lives in the tensors)."""
        import torch

        missing = [k for k in ("model", "tokens", "layers") if data.get(k) is None]
        if pattern is None and "pattern" not in data:
            missing.append("pattern")
        if missing:
            raise WorkbenchError(f"attention result without {', '.join(missing)}")
        return cls(model=data["model"], tokens=list(data["tokens"]), layers=[int(x) for x in data["layers"]],
                   pattern=torch.as_tensor(data["pattern"] if pattern is None else pattern, dtype=torch.float32),
                   prompt=data.get("prompt"), seconds=float(data.get("seconds") or 0.0))

    def _heatmap(self, z: Any, labels: list[str], name: str, skip_first: bool, show_scale: bool,
                 **where: Any):
        import plotly.graph_objects as go

        body = z[:, 1:] if skip_first and z.shape[1] > 1 else z
        zmax = max(float(body.max()), 1e-6)  # keys 1.. set the scale when skip_first: the sink column saturates
        # four decimals: the figure's JSON (a notebook's output, a saved run) stays a quarter of full floats
        return go.Heatmap(z=z.round(decimals=4).tolist(), x=labels, y=labels, colorscale="Blues", zmin=0,
                          zmax=zmax, name=name, showscale=show_scale, colorbar={"title": "weight"},
                          hovertemplate=f"{name}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.3f}}<extra></extra>",
                          **where)

    def plot(self, layer: int | None = None, head: int | None = None, skip_first: bool = False):
        """With ``layer`` and ``head``: that head's pattern, every token on both axes (query down, key across).
        Otherwise a grid of one layer's heads (``layer``, default the first) with a menu that picks the layer,
        as CircuitsVis' attention_heads; hover names query, key and weight. ``skip_first`` tops each colour
        scale at the largest weight on keys 1.. (position 0 is an attention sink)."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        p = self.pattern.detach().float().cpu()
        labels = token_labels(self.tokens)
        n = len(labels)
        where = f" on {self.model}"
        if layer is not None and head is not None:
            r, h = self._row(layer), self._head(head)
            fig = go.Figure(self._heatmap(p[r, h], labels, f"L{layer}H{h}", skip_first, True))
            ticks = {"tickmode": "array", "tickvals": labels, "ticktext": labels, "automargin": True}
            fig.update_layout(title=f"L{layer}H{h} attention{where}", height=max(420, 22 * n + 160),
                              width=max(520, 22 * n + 260), xaxis={"title": "key", "tickangle": -60, **ticks},
                              yaxis={"title": "query", "autorange": "reversed", **ticks})
            return fig
        start = self._row(layer) if layer is not None else 0
        if head is not None:
            self._head(head)
            raise WorkbenchError("plot(head=...) needs the head's layer too: plot(layer=L, head=H)")
        cols = min(GRID_COLUMNS, self.n_heads)
        rows = -(-self.n_heads // cols)
        fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"H{h}" for h in range(self.n_heads)],
                            horizontal_spacing=0.03, vertical_spacing=0.08 if rows > 1 else 0.1)
        for r, lay in enumerate(self.layers):
            for h in range(self.n_heads):
                trace = self._heatmap(p[r, h], labels, f"L{lay}H{h}", skip_first, False,
                                      visible=(r == start))
                fig.add_trace(trace, row=h // cols + 1, col=h % cols + 1)
        fig.update_yaxes(autorange="reversed", type="category", showticklabels=n <= 24, tickfont={"size": 8})
        fig.update_xaxes(type="category", showticklabels=n <= 24, tickfont={"size": 8}, tickangle=-60)
        for c in range(2, cols + 1):  # the query labels once, on the first column
            fig.update_yaxes(showticklabels=False, col=c)
        cell = 190 if n <= 16 else 240

        def title(lay: int) -> str:
            return f"attention of L{lay}'s heads{where} (query down, key across; pick a layer)"

        if len(self.layers) > 1:
            per = self.n_heads
            buttons = [{"label": f"L{lay}", "method": "update",
                        "args": [{"visible": [i // per == r for i in range(per * len(self.layers))]},
                                 {"title.text": title(lay)}]} for r, lay in enumerate(self.layers)]
            fig.update_layout(updatemenus=[{"buttons": buttons, "active": start, "x": 1.0, "xanchor": "right",
                                            "y": 1.12, "yanchor": "bottom", "direction": "down"}])
        fig.update_layout(title=title(self.layers[start]), height=rows * cell + 160, width=cols * cell + 160,
                          margin={"t": 110})
        return fig

    def save_figure(self, path: Any, layer: int | None = None, head: int | None = None) -> Any:
        """Save ``plot(layer, head)`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        return save_figure(self.plot(layer, head), path)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:  # noqa: ANN001
        # notebooks show the figure through plotly's own renderer (as the other results; offline-safe)
        return self.plot()._repr_mimebundle_(include, exclude)

    def save(self, store=None):
        """Store as a run (kind "attention"; the pattern as a tensor); returns the Run."""
        store = store or RunStore()
        return store.save(RunDraft(
            kind="attention", model=self.model, method="pattern",
            args={"prompt": self.prompt, "layers": self.layers},
            timings={"attention_seconds": self.seconds},
            result={k: v for k, v in self.to_json().items() if k != "pattern"},
            tensors={"pattern": self.pattern.detach().float()},
            figures={"attention": self.plot()},
        ))


def attention(model: HookedModel, prompt: str | list[int], layers: list[int] | None = None) -> AttentionResult:
    """Every head's attention pattern on ``prompt`` (of ``layers``, default all), from one forward pass."""
    import time

    import torch

    started = time.perf_counter()
    name = getattr(model, "name", type(model).__name__)
    if getattr(model, "kind", None) == "vit" or not hasattr(model, "encode"):
        raise MethodError(f"{name} is not a language model: wb.attention reads a text prompt's attention")
    n_layers = int(model.arch.n_layers)
    if layers is None:
        layers = list(range(n_layers))
    layers = [int(x) for x in layers]
    if not layers:
        raise RangeError("layers is empty: give at least one layer (or None for all)")
    for lay in layers:
        if not 0 <= lay < n_layers:
            raise RangeError(f"layer {lay} out of range: {name} has {n_layers} layers (0..{n_layers - 1})")
    layers = sorted(set(layers))
    names = [f"blocks.{lay}.attn.hook_pattern" for lay in layers]
    for hook in names:
        model.check_hook(hook)
    enc = model.encode(prompt)
    with torch.no_grad():
        _, cache = model.run_with_cache(enc.tokens, names_filter=names, return_type=None)
    pattern = torch.stack([cache[hook][0].detach().float().cpu() for hook in names])  # [layer, head, q, k]
    check_finite("attention weights", pattern)
    return AttentionResult(model=name, tokens=list(enc.str_tokens), layers=layers, pattern=pattern,
                           prompt=prompt if isinstance(prompt, str) else None,
                           seconds=time.perf_counter() - started)
