"""The app's one graph component: circuits and feature graphs are drawn and clicked through it.

``show_graph(nodes, edges, key)`` draws ``circuits.plot.graph_figure`` (plain node and edge dicts: any
graph can use it) and returns the name of the node the user clicked, read from the node trace's
customdata. Streamlit keeps a chart's selection across reruns, so a page that also offers a selectbox
for the node uses ``follow_click`` to move that box only when a *new* click arrives.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

LEGEND_HELP = (
    "Edge colour: blue supports the target (minus foil), red opposes it; width follows |score|. "
    "Edges into a head are dashed into its query, dotted into its key and solid into its value. "
    "Click a node to inspect it."
)


def clicked(key: str) -> str | None:
    """The node name of the current click on the chart drawn with ``key`` (None when no node is selected)."""
    state = st.session_state.get(key)
    try:
        points = state["selection"]["points"] if state else []
    except (KeyError, TypeError):
        return None
    for point in points:
        name = point.get("customdata") if isinstance(point, dict) else None
        if isinstance(name, list):  # plotly sends a list when customdata has columns
            name = name[0] if name else None
        if isinstance(name, str) and name:
            return name
    return None


def show_graph(
    nodes: list[dict[str, Any]],
    edges: list[dict[str, Any]],
    key: str,
    title: str = "",
    selected: str | None = None,
    height: int | None = None,
) -> str | None:
    """Draw a layered graph (input at the bottom, output on top) and return the clicked node's name.

    nodes: {"name", "layer", "kind"?, "label"?}; edges: {"src", "dst", "score"} with ``dst`` a node or a
    receiver input (``L3.H5.q``), as ``circuits.plot.graph_figure`` documents.
    """
    from circuits.plot import _row_label, graph_figure

    rows = sorted({float(n["layer"]) for n in nodes})
    rank = {y: i for i, y in enumerate(rows)}  # one evenly spaced row per drawn layer: no empty bands
    compact = [dict(n, layer=rank[float(n["layer"])]) for n in nodes]
    fig = graph_figure(compact, edges, title=title, selected=selected, height=height)
    kinds = {y: {n.get("kind", "head") for n in nodes if float(n["layer"]) == y} for y in rows}
    bend_edges(fig)
    fig.update_layout(clickmode="event+select", dragmode=False)
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(rows))),
                     ticktext=[_row_label(y, kinds[y]) for y in rows])
    st.plotly_chart(fig, key=key, on_select="rerun", selection_mode="points")
    return clicked(key)


ROLE_BEND = {"dash": 0.035, "dot": 0.07}  # q and k edges bow further out than v, so roles never overlap


def bend_edges(fig: Any, steps: int = 12) -> None:
    """Bow each edge sideways by the rows it skips (and its q/k role), so an edge that passes a node's
    row, or runs beside another edge between the same nodes, stays visible (one column of nodes in a
    one-head model would otherwise draw every edge on one vertical line)."""
    for trace in fig.data:
        if trace.mode != "lines" or not trace.x:
            continue
        shift = ROLE_BEND.get(trace.line.dash or "solid", 0.0)
        xs: list[float | None] = []
        ys: list[float | None] = []
        pts = list(zip(trace.x, trace.y, strict=True))
        for (x0, y0), (x1, y1) in zip(pts[0::3], pts[1::3], strict=True):
            bend = min(0.25, 0.06 * max(0.0, abs(y1 - y0) - 1) + shift)
            bend = -bend if (x0 + x1) / 2 > 0.5 else bend  # bow towards the middle
            cx, cy = (x0 + x1) / 2 + 2 * bend, (y0 + y1) / 2
            for i in range(steps + 1):
                t = i / steps
                xs.append((1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t**2 * x1)
                ys.append((1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t**2 * y1)
            xs.append(None)
            ys.append(None)
        trace.x, trace.y = xs, ys


def follow_click(graph_keys: list[str], select_key: str, options: list[str]) -> None:
    """Move the selectbox ``select_key`` to a node newly clicked in any of the charts ``graph_keys``.

    Call it before drawing the selectbox; a click stays in the chart's state over reruns, so only a
    click that differs from the one seen last (per chart) moves the box.
    """
    for key in graph_keys:
        name = clicked(key)
        seen = f"_seen_{key}"
        if name != st.session_state.get(seen):
            st.session_state[seen] = name
            if name is not None and name in options:
                st.session_state[select_key] = name
    if st.session_state.get(select_key) not in options:
        st.session_state[select_key] = options[0]
