"""The app's one graph component: circuits and feature graphs are drawn, clicked and inspected through it.

``show_subgraph(sub, key)`` draws a ``circuits.subgraph.Subgraph`` (every graph the app shows is one) and returns
the name of the node the user clicked, read from the node trace's customdata; ``inspect_node`` is the one node
inspector (the node's numbers, the page's own view of it, its edges in each graph drawn). Streamlit keeps a chart's
selection across reruns, so a page that also offers a selectbox for the node uses ``follow_click`` to move that box
only when a *new* click arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import streamlit as st

from app.common import esc

if TYPE_CHECKING:
    from circuits.subgraph import GraphNode, Subgraph

LEGEND_HELP = (
    "Edge colour: blue supports the target (minus foil), red opposes it; width follows |score|. "
    "Edges into a head are dashed into its query, dotted into its key and solid into its value. "
    "A head is labelled H5 in its layer's row. Click a node to inspect it."
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


def show_subgraph(sub: Subgraph, key: str, title: str = "", selected: str | None = None,
                  height: int | None = None, figure: Any = None) -> str | None:
    """Draw a Subgraph as a layered graph (input at the bottom, output on top) and return the clicked node's id.
    ``figure``: the page's own drawing of it (the feature graph's token columns), shown with the same click
    handling."""
    if figure is None and sub.provenance.source == "flow":  # information flow by token: by position and layer
        figure = sub.plot(title=title or None, selected=selected)
    if figure is None:
        from circuits.plot import graph_figure

        # circuits.plot lays it out (evenly spaced rows, head columns, bowed edges, labels kept apart): the
        # notebook's and the paper figures' layout; the app only adds the click handling
        nodes, edges = sub.drawable()
        figure = graph_figure(nodes, edges, title=title, selected=selected, height=height)
        figure.update_layout(width=None)
    figure.update_layout(clickmode="event+select", dragmode=False)
    labels_inside(figure)
    if fit_height(figure, key):
        figure.update_layout(dragmode="zoom")  # a fitted tall graph: drag a box to zoom in, double-click back
    st.plotly_chart(figure, key=key, on_select="rerun", selection_mode="points")
    return clicked(key)


MIN_WIDTH = 640  # px: the narrowest a graph is drawn in the app (a wide page's column beside a dashboard)
TALL = 1400  # px: a graph taller than this (about two windows) is offered fitted to the window
FIT = 1000  # px: the height a fitted graph is drawn at


def labels_inside(fig: Any, min_width: int = MIN_WIDTH) -> Any:
    """Keep every node label inside the figure: labels may spill out of the plotting area into the margins
    (``cliponaxis`` off: the rightmost output token was cut at the axis), and a label centred on a node so near the
    left or right edge that it would pass the figure's edge is set to that node's inner side instead. Widths are
    estimated as circuits.plot estimates them, at the narrower of the figure's own width and ``min_width``."""
    from circuits.plot import text_width

    lay = fig.layout
    xr = lay.xaxis.range
    if xr is None or xr[1] == xr[0]:
        return fig
    m = lay.margin
    left, right = float(m.l if m.l is not None else 80), float(m.r if m.r is not None else 80)
    width = min(float(lay.width or min_width), float(min_width))
    px = (width - left - right) / (float(xr[1]) - float(xr[0]))
    for trace in fig.data:
        if trace.type != "scatter" or trace.text is None or trace.x is None or "text" not in (trace.mode or ""):
            continue
        trace.cliponaxis = False
        texts = list(trace.text) if isinstance(trace.text, list | tuple) else [trace.text] * len(trace.x)
        pos = trace.textposition
        pos = list(pos) if isinstance(pos, list | tuple) else [pos or "middle center"] * len(trace.x)
        size = trace.textfont.size if isinstance(trace.textfont.size, int | float) else 12
        for i, (x, text) in enumerate(zip(trace.x, texts, strict=False)):
            if x is None or not text:
                continue
            lines = str(text).split("<br>")
            half = max(text_width(line, size) for line in lines) / 2
            at = (float(x) - float(xr[0])) * px  # px from the plotting area's left edge
            vertical = pos[i].split(" ")[0]
            if pos[i].endswith("center") and at + half > width - left - 2:
                pos[i] = f"{vertical} left"
            elif pos[i].endswith("center") and at - half < -left + 2:
                pos[i] = f"{vertical} right"
        trace.textposition = pos
    return fig


def fit_height(fig: Any, key: str, tall: int = TALL, fit: int = FIT) -> bool:
    """A graph taller than ``tall`` px (an imported graph of 59 nodes was 3,000 px) is drawn ``fit`` px tall unless
    the user turns "Fit to the window" off; True when it was fitted. Plotly's zoom then reads its parts."""
    height = fig.layout.height
    if not height or height <= tall:
        return False
    if not st.toggle("Fit to the window", value=True, key=f"{key}_fit",
                     help=f"The graph is {int(height)} px tall. On: drawn {fit} px tall (drag a box to zoom in, "
                          "double-click to fit again). Off: at full height, scroll to read it."):
        return False
    fig.update_layout(height=fit)
    return True


NUMBERS = {"influence": "influence", "score": "DPA score", "activation": "activation"}  # metadata shown first
NUMBERS_HELP = ("Influence: its share of the logits' attribution, propagated down the graph (circuit-tracer's "
                "influence). DPA score: its direct effect on the target logit.")


def graph_name(name: str, sub: Any) -> str:
    """What a graph's edges are, truthfully: an imported graph's are the file's (its format), not the page's
    method (an imported circuit-tracer graph's provenance still reads "dpa")."""
    imported = (getattr(getattr(sub, "provenance", None), "params", None) or {}).get("imported")
    if isinstance(imported, dict):
        return f"imported {imported.get('format') or 'graph'}"
    return name


def node_edges(graphs: dict[str, Subgraph], node: str):
    """A node's incoming and outgoing edges in each graph (``method``: the graph's name), strongest first."""
    import pandas as pd

    rows = [{"method": graph_name(name, sub), "direction": r["direction"], "src": r["source"],
             "dst": f"{r['target']}.{r['role']}" if r["role"] else r["target"], "score": r["score"]}
            for name, sub in graphs.items() for r in sub.edges_of(node)]
    return pd.DataFrame(rows, columns=["method", "direction", "src", "dst", "score"])


def inspect_node(graphs: dict[str, Subgraph], node: str, key: str,
                 extra: Callable[[GraphNode], None] | None = None) -> None:
    """The one node inspector: the node's numbers (its metadata's influence, DPA score, activation), the
    page's own view of it (``extra``: a head's direct logit effect, a feature's dashboard), then its edges
    in every graph drawn (table keyed ``{key}_edges``)."""
    found = [sub.node(node) for sub in graphs.values() if any(n.id == node for n in sub.nodes)]
    if not found:
        st.caption(f"{esc(node)} is not in the graph drawn.")
        return
    meta = found[0].metadata
    numbers = [f"{label} **{meta[k]:+.3f}**" for k, label in NUMBERS.items()
               if isinstance(meta.get(k), int | float) and not isinstance(meta.get(k), bool)]
    if numbers:
        st.markdown(" · ".join(numbers), help=NUMBERS_HELP)
    if extra is not None:
        extra(found[0])
    edges = node_edges(graphs, node)
    st.caption(f"{esc(node)}: {int((edges['direction'] == 'in').sum())} incoming and "
               f"{int((edges['direction'] == 'out').sum())} outgoing edges")
    st.dataframe(edges, hide_index=True, key=f"{key}_edges")


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


def inspect_clicked(sub: Any, clicked: str | None, prefix: str) -> None:
    """The node inspector (inspect_node) for the node clicked in a stored graph (none when nothing is clicked)."""
    if clicked is not None and any(n.id == clicked for n in sub.nodes):
        st.markdown(f"**{esc(clicked)}** (the clicked node)")
        inspect_node({graph_name(sub.provenance.method or "graph", sub): sub}, clicked, f"{prefix}_node")
