"""Plotly figures for what the engines return. Layout only: no model is run here."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

RDBU = "RdBu"


def _np(t: Any):
    import numpy as np

    if hasattr(t, "detach"):
        return t.detach().float().cpu().numpy()
    return np.asarray(t, dtype=float)


def token_labels(tokens: list[str]) -> list[str]:
    # Plotly merges equal category labels, so positions keep repeated tokens apart.
    return [f"{i}:{t!r}"[:24] for i, t in enumerate(tokens)]


def token_heatmap(rows: dict[str, Any], tokens: list[str], title: str = "") -> go.Figure:
    """Methods side by side: a row per method, a column per prompt token, each row scaled to max |score|."""
    import numpy as np

    names = list(rows)
    raw = np.stack([_np(rows[n]).reshape(-1) for n in names])
    scale = np.abs(raw).max(axis=1, keepdims=True)
    scale[scale == 0] = 1.0
    fig = go.Figure(
        go.Heatmap(
            z=raw / scale,
            x=token_labels(tokens),
            y=names,
            customdata=raw,
            colorscale=RDBU,
            zmid=0,
            zmin=-1,
            zmax=1,
            hovertemplate="%{y} · %{x}<br>score %{customdata:.4g}<br>scaled %{z:.2f}<extra></extra>",
            colorbar={"title": "score / max|score|"},
        )
    )
    fig.update_layout(
        title=title or "Token attribution (each method scaled to its own max |score|)",
        height=140 + 40 * len(names),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        yaxis={"autorange": "reversed"},
    )
    return fig


def head_grid(scores: Any, title: str = "", selected: tuple[int, int] | None = None) -> go.Figure:
    """Layer x head as a scatter of squares (heatmaps emit no selections); click a square to inspect it."""
    import numpy as np

    s = _np(scores)
    if s.ndim == 3:  # [layer, head, query] -> summed over query positions
        s = s.sum(-1)
    n_layers, n_heads = s.shape
    ly, hx = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    lim = float(np.abs(s).max()) or 1.0
    size = max(6, min(28, int(520 / max(n_layers, n_heads))))
    fig = go.Figure(
        go.Scatter(
            x=hx.ravel(),
            y=ly.ravel(),
            mode="markers",
            customdata=np.stack([ly.ravel(), hx.ravel(), s.ravel()], -1),
            marker={
                "symbol": "square",
                "size": size,
                "color": s.ravel(),
                "colorscale": RDBU,
                "cmin": -lim,
                "cmax": lim,
                "colorbar": {"title": "score"},
                "line": {"width": 0},
            },
            hovertemplate="L%{customdata[0]:.0f} H%{customdata[1]:.0f}<br>score %{customdata[2]:.4g}"
            "<extra></extra>",
        )
    )
    if selected is not None:
        fig.add_trace(
            go.Scatter(
                x=[selected[1]],
                y=[selected[0]],
                mode="markers",
                hoverinfo="skip",
                marker={"symbol": "square-open", "size": size + 6, "color": "black", "line": {"width": 2}},
                showlegend=False,
            )
        )
    fig.update_layout(
        title=title or "Heads (click a square)",
        xaxis_title="head",
        yaxis_title="layer",
        height=max(320, 18 * n_layers + 120),
        showlegend=False,
        clickmode="event+select",
        xaxis={"dtick": 1},
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def pattern_heatmap(pattern: Any, tokens: list[str], title: str) -> go.Figure:
    labels = token_labels(tokens)
    fig = go.Figure(
        go.Heatmap(
            z=_np(pattern),
            x=labels,
            y=labels,
            colorscale="Blues",
            zmin=0,
            hovertemplate="query %{y}<br>key %{x}<br>%{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="key",
        yaxis_title="query",
        yaxis={"autorange": "reversed"},
        height=420,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def bar(labels: list[str], values: list[float], title: str, horizontal: bool = False) -> go.Figure:
    if horizontal:
        fig = go.Figure(go.Bar(y=labels, x=values, orientation="h"))
        fig.update_layout(yaxis={"autorange": "reversed"})
    else:
        fig = go.Figure(go.Bar(x=labels, y=values))
    fig.update_layout(title=title, height=360, margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def top_items(scores: Any, axes: tuple[str, ...], tokens: list[str], k: int = 20):
    """The k largest |score| items of a score tensor as a table (attribution.result.top_items)."""
    import pandas as pd

    from attribution.result import top_items as rows

    return pd.DataFrame(rows(scores, axes, tokens, k))


def tensor_figure(name: str, t: Any) -> go.Figure | None:
    """A quick look at a stored tensor: bar for 1-D, heatmap for 2-D, first slice for more."""
    s = _np(t)
    if s.ndim == 0:
        return None
    while s.ndim > 2:
        s = s.sum(-1) if s.shape[-1] <= 4096 else s[..., 0]
    if s.ndim == 1:
        fig = go.Figure(go.Bar(y=s.tolist()))
    else:
        fig = go.Figure(go.Heatmap(z=s, colorscale=RDBU, zmid=0))
    fig.update_layout(
        title=f"{name} {tuple(_np(t).shape)}", height=360, margin={"l": 10, "r": 10, "t": 50, "b": 10}
    )
    return fig


def curves(xs: dict[str, Any], ys: dict[str, Any], title: str, xaxis: str, yaxis: str) -> go.Figure:
    fig = go.Figure()
    for name in ys:
        fig.add_trace(
            go.Scatter(
                x=list(_np(xs[name]).ravel()), y=list(_np(ys[name]).ravel()), mode="lines+markers", name=name
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title=xaxis,
        yaxis_title=yaxis,
        height=380,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig
