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
    from circuits.plot import graph_figure

    fig = graph_figure(nodes, edges, title=title, selected=selected, height=height)
    fig.update_layout(clickmode="event+select", dragmode=False)
    event = st.plotly_chart(fig, key=key, on_select="rerun", selection_mode="points")
    name = clicked(key)
    if name is None and event is not None:
        points = getattr(getattr(event, "selection", None), "points", None) or []
        name = next((p.get("customdata") for p in points if isinstance(p.get("customdata"), str)), None)
    return name


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
