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


SINK_HELP = (
    "Position 0 is an attention sink: most heads park their attention there and its residual stream has a "
    "massive norm, so its scores dwarf every other position's. On, the colour scale (and rankings by "
    "position) ignore it so the rest stays readable; the scores themselves are unchanged (hover shows them)."
)


def first_token_toggle(key: str, container: Any = None) -> bool:
    """The "exclude the first token" toggle of one per-position view (on by default; see SINK_HELP)."""
    import streamlit as st

    return (container or st).toggle("Exclude the first token from the colour scale", value=True, key=key,
                                    help=SINK_HELP)


def scale_limit(values: Any, skip_first: bool, axis: int = -1) -> float:
    """max |value| for a colour scale, over positions 1.. along ``axis`` when ``skip_first`` (1.0 if zero)."""
    import numpy as np

    v = np.abs(_np(values))
    if skip_first and v.shape[axis] > 1:
        v = np.take(v, range(1, v.shape[axis]), axis=axis)
    lim = float(np.nanmax(v)) if v.size else 0.0
    return lim if lim > 0 and np.isfinite(lim) else 1.0


def all_ticks(labels: list[str]) -> dict[str, Any]:
    """Axis settings that label every category (plotly otherwise drops every other label when crowded)."""
    return {"tickmode": "array", "tickvals": labels, "ticktext": labels, "automargin": True}


def clickable_cells(fig: go.Figure, xs: list[Any], ys: list[Any], hover: list[list[str]] | None = None) -> go.Figure:
    """Make every cell of ``fig``'s heatmap clickable in Streamlit (``on_select="rerun"``).

    Plotly heatmaps emit no selection on a click, so an invisible square marker sits on each cell's centre;
    a click anywhere selects the nearest one (``hoverdistance=-1``) and Streamlit returns its ``x`` and ``y``
    (the cell's category labels). ``hover[row][col]`` replaces the heatmap's hover text (which is switched
    off: the markers take the hover)."""
    cx = [x for _ in ys for x in xs]
    cy = [y for y in ys for _ in xs]
    for trace in fig.data:
        if trace.type == "heatmap":
            trace.hoverinfo = "skip"
            trace.hovertemplate = None
    fig.add_trace(go.Scatter(
        x=cx, y=cy, mode="markers", showlegend=False, name="cells",
        marker={"symbol": "square", "size": 8, "color": "rgba(0,0,0,0)"},
        selected={"marker": {"opacity": 1}}, unselected={"marker": {"opacity": 1}},
        hovertext=[h for row in hover for h in row] if hover else None,
        hovertemplate="%{hovertext}<extra></extra>" if hover else "%{y} · %{x}<extra></extra>"))
    fig.update_layout(clickmode="event+select", hovermode="closest", hoverdistance=-1, dragmode=False)
    return fig


def token_heatmap(rows: dict[str, Any], tokens: list[str], title: str = "", skip_first: bool = False) -> go.Figure:
    """Methods side by side: a row per method, a column per prompt token, each row scaled to max |score|
    (over positions 1.. when ``skip_first``: position 0 then saturates; hover gives every raw score)."""
    import numpy as np

    names = list(rows)
    raw = np.stack([_np(rows[n]).reshape(-1) for n in names])
    scale = np.array([[scale_limit(r, skip_first)] for r in raw])
    labels = token_labels(tokens)
    fig = go.Figure(
        go.Heatmap(
            z=np.clip(raw / scale, -1, 1),
            x=labels,
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
        title=title or "Token attribution (each method scaled to its own max |score|"
        + (", first token left out)" if skip_first else ")"),
        height=160 + 40 * len(names),
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        yaxis={"autorange": "reversed"},
        xaxis=all_ticks(labels),
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
        # whole layers and heads only, and only the model's own (a 2-layer model got ticks at -0.5, 0.5, 1.5;
        # a 30-layer one an axis from -2 to 31)
        xaxis={"tick0": 0, "dtick": 1, "range": [-0.5, n_heads - 0.5], "zeroline": False},
        yaxis={"tick0": 0, "dtick": 1 if n_layers <= 32 else 2, "range": [-0.5, n_layers - 0.5], "zeroline": False},
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def pattern_heatmap(pattern: Any, tokens: list[str], title: str, skip_first: bool = False) -> go.Figure:
    """One head's attention [query, key], every token labelled on both axes; hovering a cell names the
    query token, the key token and the weight (circuitsvis-style). With ``skip_first`` the colour scale
    tops out at the largest weight on keys 1.. (the sink column saturates)."""
    import numpy as np

    z = _np(pattern)
    labels = token_labels(tokens)
    n = len(labels)
    hover = np.array([[f"query {labels[q]}<br>key {labels[k]}<br>weight {z[q, k]:.3f}" for k in range(n)]
                      for q in range(n)])
    zmax = scale_limit(z, skip_first) if skip_first else max(float(z.max()), 1e-9)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=labels,
            colorscale="Blues",
            zmin=0,
            zmax=zmax,
            text=hover,
            hoverinfo="text",
            hovertemplate="%{text}<extra></extra>",
            colorbar={"title": "weight"},
        )
    )
    fig.update_layout(
        title=title,
        xaxis={"title": "key", "tickangle": -60, **all_ticks(labels)},
        yaxis={"title": "query", "autorange": "reversed", **all_ticks(labels)},
        height=max(420, 24 * n + 160),
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


def top_items(scores: Any, axes: tuple[str, ...], tokens: list[str], k: int = 20, skip_first: bool = False):
    """The k largest |score| items of a score tensor as a table (attribution.result.top_items); with
    ``skip_first`` items at position 0 are left out of the ranking (their scores are unchanged)."""
    import pandas as pd

    from attribution.result import top_items as rows

    if not skip_first or "position" not in axes:
        return pd.DataFrame(rows(scores, axes, tokens, k))
    import torch

    ranked = torch.as_tensor(_np(scores)).clone()
    ranked.select(axes.index("position"), 0).zero_()  # out of the ranking; other items keep their scores
    return pd.DataFrame([r for r in rows(ranked, axes, tokens, k) if r["score"] != 0.0 or r["position"] != 0])


def neuron_figure(table: Any, tokens: list[str], n_layers: int | None = None) -> go.Figure:
    """The top neurons of ``top_items``' table placed by layer (rows) and token position (columns): one marker
    each, its area by |score|, blue for the target and red against it, labelled with the neuron's index."""
    import math

    rows = table.to_dict("records") if hasattr(table, "to_dict") else list(table)
    top = max((abs(float(r["score"])) for r in rows), default=1.0) or 1.0
    fig = go.Figure()
    for sign, colour, name in ((1, "#2166ac", "supports the target"), (-1, "#b2182b", "opposes it")):
        pick = [r for r in rows if (float(r["score"]) >= 0) == (sign > 0)]
        if not pick:
            continue
        fig.add_trace(go.Scatter(
            x=[int(r["position"]) for r in pick], y=[int(r["layer"]) for r in pick], mode="markers+text",
            name=name, text=[f"n{int(r['neuron'])}" for r in pick], textposition="top center",
            textfont={"size": 10},
            marker={"size": [8 + 22 * math.sqrt(abs(float(r["score"])) / top) for r in pick], "color": colour,
                    "opacity": 0.75, "line": {"width": 1, "color": "#333"}},
            customdata=[[int(r["neuron"]), float(r["score"]), tokens[int(r["position"])]
                         if int(r["position"]) < len(tokens) else ""] for r in pick],
            hovertemplate="L%{y} neuron %{customdata[0]} at position %{x} (%{customdata[2]}): "
                          "%{customdata[1]:+.4f}<extra></extra>"))
    ticks = sorted({int(r["position"]) for r in rows})
    layers = [int(r["layer"]) for r in rows]
    fig.update_layout(
        title="Top neurons by layer and position", height=380, margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.25},
        xaxis={"title": "position (token)", "tickmode": "array", "tickvals": ticks,
               "ticktext": [f"{tokens[i]!r}"[1:-1][:10] + f" {i}" if i < len(tokens) else str(i) for i in ticks]},
        yaxis={"title": "layer", "dtick": 1,
               "range": [-0.5, (n_layers or (max(layers, default=0) + 1)) - 0.5]})
    return fig


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
