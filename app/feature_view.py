"""The Feature graph page's readable graph: layers by row, token positions by column, the embeddings and the
logits, a few labelled nodes per layer and position, and the clicked node's dashboard beside the graph
(circuit-tracer's and Neuronpedia's graph views are the model).

``readable`` (circuits.plot) re-prunes a graph built with a large node and edge budget so every dictionary's
layer keeps its strongest nodes (by influence on the logits; a plain top-k by influence kept only the highest
two layers); ``figure`` draws it through ``circuits.plot.feature_graph_figure``.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.common import esc, quoted

# The layout lives in circuits.plot (the notebook's Subgraph.plot and the paper figures draw the same)
from circuits.plot import feature_view, readable, row_name, short_label  # noqa: F401 - this module's names for the pages

BIG_NODES, BIG_EDGES = 80, 400  # a stored graph larger than this is drawn re-pruned (readable)


def scores_caption(graph: Any) -> str:
    """circuit-tracer's replacement and completeness scores of a feature graph, one line."""
    s = graph.graph_scores()
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    return (f"Replacement score {fmt(s.get('replacement'))} (share of the influence on the logits that comes from "
            f"the token embeddings rather than error nodes) · completeness score {fmt(s.get('completeness'))} "
            f"(share of the inputs to features and logits that comes from non-error nodes) · on the "
            f"{esc(s.get('computed_on', 'pruned'))} graph")


def figure(graph: Any, labels: dict[str, list[str]], selected: str | None = None):
    """The graph drawn by circuits.plot.feature_graph_figure, with the app's click handling and the page's
    width. A node's label is cut to its column; its hover holds the feature's whole explanation, wrapped (the
    stored dashboards' full text where they have it, else ``labels``)."""
    from circuits.plot import feature_graph_figure

    full = {name: names for name, names in all_labels(graph, full=True).items() if names}
    fig = feature_graph_figure(feature_view(graph), {**labels, **full}, selected=selected)
    nodes = fig.data[-1]
    if nodes.hovertext is not None:
        nodes.hovertext = [wrap_hover(h) for h in nodes.hovertext]
    fig.update_layout(clickmode="event+select", dragmode=False, hoverlabel={"namelength": -1})
    return fig


def wrap_hover(text: str, width: int = 70) -> str:
    """A hover label's long lines broken at spaces (plotly does not wrap hover labels: a long explanation ran off
    the screen)."""
    import textwrap

    return "<br>".join("<br>".join(textwrap.wrap(line, width, break_long_words=False) or [""])
                       for line in str(text).split("<br>"))


def wrapped_contexts(html: str) -> str:
    """Contexts as ``attribution.sae.render.contexts_html`` writes them (one line each, scrolled sideways), made to
    wrap inside the dashboard's column so each reads whole without scrolling."""
    return html.replace("white-space:pre;overflow-x:auto", "white-space:pre-wrap;overflow-wrap:anywhere")


@st.cache_resource(show_spinner=False, max_entries=16)
def dashboards(path: str, _stamp: float) -> Any | None:
    """The stored dashboards of a dictionary directory (None when it has none)."""
    from pathlib import Path

    from attribution.sae.dashboard import Dashboards

    if not (Path(path) / "dashboards.safetensors").exists():
        return None
    return Dashboards.load(path)


def all_labels(graph: Any, full: bool = False) -> dict[str, list[str]]:
    """Dictionary name -> its features' short explanations with their simulation scores (their automatic
    token labels where no explanations are built; from the stored dashboards, cached; empty without them).
    ``full``: each feature's whole explanation (the graph cuts it to the node's column, hover shows it all)."""
    from pathlib import Path

    from circuits.plot import feature_labels

    def load(path: str) -> Any | None:
        stored = Path(path) / "dashboards.safetensors"
        return dashboards(path, stored.stat().st_mtime if stored.exists() else 0.0)

    if not full:
        return feature_labels(graph.dictionaries, load)
    out = {}
    for d in graph.dictionaries:
        stored = Path(str(d.get("path") or "")) / "dashboards.safetensors"
        out[d["name"]] = list(_full(str(d["path"]), stored.stat().st_mtime)) if d.get("path") and stored.exists() \
            else []
    return out


@st.cache_resource(show_spinner=False, max_entries=16)
def _full(path: str, _stamp: float) -> tuple[str, ...]:
    """Every feature's whole explanation (``Dashboards.describe``) of a dictionary directory, cached."""
    db = dashboards(path, _stamp)
    return tuple(db.describe(f) for f in range(db.n_units)) if db is not None else ()


def explanations(graph: Any, labels: dict[str, list[str]]) -> dict[str, str]:
    """Node id -> its feature's explanation (an imported graph's own ``clerp`` where it has one)."""
    out = {}
    for n in graph.nodes:
        if n.kind != "feature":
            continue
        names = labels.get(n.metadata.get("dictionary") or "") or []
        f = n.feature
        text = names[f] if isinstance(f, int) and 0 <= f < len(names) else ""
        out[n.id] = text or str(n.metadata.get("clerp") or "")
    return out


def dashboard_card(graph: Any, node: Any) -> None:
    """A feature's dashboard (label, numbers, the logits it raises, its top contexts) beside the graph; ``node``:
    the graph's GraphNode."""
    from pathlib import Path

    from attribution.sae.render import contexts_html

    dictionary = node.metadata.get("dictionary")
    path = next((d["path"] for d in graph.dictionaries if d["name"] == dictionary), None)
    db = dashboards(path, (Path(path) / "dashboards.safetensors").stat().st_mtime) if path and (
        Path(path) / "dashboards.safetensors").exists() else None
    if db is None:
        st.caption(f"{esc(dictionary)} has no stored dashboards (`workbench sae dashboards` builds them).")
        return
    card = db.card(int(node.feature))
    st.markdown(f"**Feature {esc(node.feature)}** · {esc(card['explanation'] or card['label'])}")
    if card["score"] is not None:
        st.caption(f"simulation score {card['score']:.2f} (explanation vs. true activations on held-out text) · "
                   f"tokens: {esc(card['label'])}")
    c1, c2 = st.columns(2)
    c1.metric("density", f"{card['density']:.5f}")
    c2.metric("max activation", f"{card['max_activation']:.3f}")
    if any(v for _, v in card["top_logits"]):
        st.caption("Raises: " + " · ".join(f"{quoted(t)} {v:+.2f}" for t, v in card["top_logits"][:6]))
    top = [c for c in card["contexts"] if c["group"] == "top"][:5]
    if top:
        st.html(wrapped_contexts(contexts_html(top, card["max_activation"])))
