"""Figures of circuits: the layered graph (every edge method and feature graphs draw through it) and
the faithfulness curve.

``graph_figure(nodes, edges)`` takes plain data, so any graph can use it: nodes are dicts with ``name``,
``layer`` (the row, bottom to top) and optional ``label``/``kind``/``x`` (a column; else spread evenly);
edges are dicts with ``src``, ``dst``
(a node name, or a receiver input ``L3.H5.q`` drawn into its node with the role's dash) and ``score``.
Edge width follows |score|, colour its sign (blue supports the target, red opposes it); the node trace
carries each node's name as customdata, so a click on it can be read back (Streamlit's on_select).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

POSITIVE, NEGATIVE = "#2166ac", "#b2182b"
ROLE_DASH = {"q": "dash", "k": "dot", "v": "solid", None: "solid"}
KIND_COLOUR = {"embed": "#4d4d4d", "head": "#f4a582", "mlp": "#92c5de", "logits": "#1a1a1a",
               "feature": "#a6dba0", "error": "#bababa", "token": "#4d4d4d"}


def _split(dst: str, names: set[str]) -> tuple[str, str | None]:
    """'L3.H5.q' -> ('L3.H5', 'q') when 'L3.H5' is a node; other names are nodes themselves."""
    if dst not in names and "." in dst:
        node, role = dst.rsplit(".", 1)
        if node in names and role in ("q", "k", "v"):
            return node, role
    return dst, None


def layout(nodes: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """x spreads each row's nodes evenly over [0, 1] (in the given order), y is the row (layer); nodes that all
    carry an ``x`` (a feature graph's token position) are drawn at (x, layer)."""
    if nodes and all("x" in n for n in nodes):
        return {n["name"]: (float(n["x"]), float(n["layer"])) for n in nodes}
    rows: dict[float, list[str]] = {}
    for n in nodes:
        rows.setdefault(float(n["layer"]), []).append(n["name"])
    pos = {}
    for y, names in rows.items():
        for i, name in enumerate(names):
            pos[name] = ((i + 1) / (len(names) + 1), y)
    return pos


def graph_figure(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], title: str = "",
                 selected: str | None = None, height: int | None = None) -> go.Figure:
    """A layered drawing of a graph: inputs at the bottom, the output at the top."""
    names = {n["name"] for n in nodes}
    pos = layout(nodes)
    top = max((abs(float(e["score"])) for e in edges), default=1.0) or 1.0
    fig = go.Figure()
    groups: dict[tuple[str, str | None, int], list[tuple[str, str, float]]] = {}
    for e in edges:
        dst, role = _split(e["dst"], names)
        if e["src"] not in pos or dst not in pos:
            continue
        size = abs(float(e["score"])) / top
        width_bin = min(4, int(size * 5))  # five widths: one trace per (sign, role, width) keeps it fast
        sign = "+" if float(e["score"]) >= 0 else "-"
        groups.setdefault((sign, role, width_bin), []).append((e["src"], dst, float(e["score"])))
    shown: set[tuple[str, str | None]] = set()
    for (sign, role, width_bin), segs in sorted(groups.items(), key=lambda kv: kv[0][2]):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for src, dst, _ in segs:
            (x0, y0), (x1, y1) = pos[src], pos[dst]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
        key = (sign, role)
        label = f"{'supports' if sign == '+' else 'opposes'} target" + (f", into {role}" if role else "")
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", hoverinfo="skip", name=label, legendgroup=label,
            showlegend=key not in shown, opacity=0.35 + 0.13 * width_bin,
            line={"color": POSITIVE if sign == "+" else NEGATIVE, "width": 0.8 + 1.8 * width_bin,
                  "dash": ROLE_DASH.get(role, "solid")}))
        shown.add(key)
    strength: dict[str, float] = {}
    for e in edges:
        dst, _ = _split(e["dst"], names)
        for n in (e["src"], dst):
            strength[n] = strength.get(n, 0.0) + abs(float(e["score"]))
    fig.add_trace(go.Scatter(
        x=[pos[n["name"]][0] for n in nodes], y=[pos[n["name"]][1] for n in nodes],
        mode="markers+text", text=[n.get("label", n["name"]) for n in nodes], textposition="top center",
        customdata=[n["name"] for n in nodes], name="nodes (click to inspect)",
        hovertext=[f"{n['name']}<br>sum |edge score| {strength.get(n['name'], 0.0):.3g}" for n in nodes],
        hoverinfo="text",
        marker={"size": [16 if n["name"] == selected else 11 for n in nodes],
                "color": [KIND_COLOUR.get(n.get("kind", "head"), "#f4a582") for n in nodes],
                "line": {"width": [3 if n["name"] == selected else 1 for n in nodes], "color": "#000"}}))
    rows: dict[float, set[str]] = {}
    for n in nodes:
        rows.setdefault(float(n["layer"]), set()).add(n.get("kind", "head"))
    layers = sorted(rows)
    fig.update_layout(
        title=title, height=height or max(420, 60 * len(layers) + 120), hovermode="closest",
        legend={"orientation": "h", "y": -0.05}, margin={"l": 60, "r": 20, "t": 50, "b": 40},
        xaxis={"visible": False, "range": [-0.02, 1.02]},
        yaxis={"title": "layer", "tickmode": "array", "tickvals": layers,
               "ticktext": [row_label(y, rows[y]) for y in layers], "zeroline": False})
    return fig


def row_label(y: float, kinds: set[str]) -> str:
    """The axis label of a drawing row holding nodes of ``kinds``: "input", "output" or its layer ("L3", "2.5")."""
    if kinds <= {"embed", "token"}:
        return "input"
    if kinds == {"logits"}:
        return "output"
    return f"L{int(y)}" if float(y).is_integer() else f"{y:g}"


def log_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Axis settings for a log axis of counts from ``lo`` to ``hi``: ticks at 1-2-5 steps (powers of ten only
    past three decades) written as whole numbers ("10", "200", "1,000"), never plotly's bare minor digits
    ("8 9 10 2 3") or SI fractions ("12.2223k")."""
    import math

    lo, hi = max(float(lo), 1.0), max(float(hi), 1.0)
    steps = (1,) if math.log10(hi / lo) > 3 else (1, 2, 5)
    vals = [m * 10**e for e in range(int(math.floor(math.log10(lo))), int(math.ceil(math.log10(hi))) + 1)
            for m in steps if lo / 1.5 <= m * 10**e <= hi * 1.5]
    if not vals:
        vals = [lo]
    return {"type": "log", "tickmode": "array", "tickvals": vals, "ticktext": [f"{v:,.0f}" for v in vals]}


def faithfulness_figure(curves: dict[str, Any], title: str = "Faithfulness of the top-k edges") -> go.Figure:
    """curves: method -> Faithfulness (or a dict with k and normalized)."""
    fig = go.Figure()
    for name, f in curves.items():
        d = f if isinstance(f, dict) else f.to_json()
        fig.add_trace(go.Scatter(x=d["k"], y=d["normalized"], mode="lines+markers",
                                 name=f"{name} (AUC {d.get('auc', float('nan')):.3f})"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888")
    ks = [float(k) for f in curves.values() for k in (f if isinstance(f, dict) else f.to_json())["k"] if k > 0]
    fig.update_layout(title=title, xaxis={**log_ticks(min(ks, default=1), max(ks, default=10)),
                                          "title": "edges kept (k)"},
                      yaxis={"title": "normalized faithfulness"}, height=380)
    return fig
