"""The Feature graph page's readable graph: layers by row, token positions by column, the embeddings and the
logits, a few labelled nodes per layer and position, and the clicked node's dashboard beside the graph
(circuit-tracer's and Neuronpedia's graph views are the model).

``readable`` re-prunes a graph built with a large node and edge budget so every dictionary's layer keeps
its strongest nodes (by influence on the logits; a plain top-k by influence kept only the highest two
layers); ``figure`` draws it through ``circuits.plot.graph_figure`` with explicit node positions.
"""

from __future__ import annotations

import dataclasses
import html
import re
from typing import Any

import streamlit as st

BIG_NODES, BIG_EDGES = 80, 400  # a stored graph larger than this is drawn re-pruned (readable)
WIDTH_PX = 900  # about the graph's width beside the inspector on a laptop screen
PER_CELL = 3  # nodes drawn at one (layer, position): their labels stay apart
ROW_SPREAD = 0.5  # the nodes of one cell sit within +-ROW_SPREAD/2 of their row


def readable(graph: Any, per_row: int, max_edges: int, per_cell: int = PER_CELL) -> Any:
    """``graph`` with, in every row (embeddings, each dictionary), its ``per_row`` nodes of largest influence
    (at most ``per_cell`` at one position), the logits, the ``max_edges`` edges among them of largest edge
    influence (influence of the target x |score| / its total |incoming|), then only nodes on a kept path to
    the logits."""
    total: dict[str, float] = {}
    for e in graph.edges:
        total[e["dst"]] = total.get(e["dst"], 0.0) + abs(float(e["score"]))
    infl = {n["id"]: float(n["influence"]) for n in graph.nodes}
    roots = {n["id"] for n in graph.nodes if n["kind"] == "logits"} or {"logits"}  # an imported graph: several
    keep = set(roots)
    by_row: dict[float, list[dict[str, Any]]] = {}
    for n in graph.nodes:
        if n["kind"] != "logits":
            by_row.setdefault(float(n["row"]), []).append(n)
    for nodes in by_row.values():
        cells: dict[Any, int] = {}
        taken = 0
        for n in sorted(nodes, key=lambda n: -infl[n["id"]]):
            if taken >= per_row:
                break
            if cells.get(n["position"], 0) >= per_cell:
                continue
            cells[n["position"]] = cells.get(n["position"], 0) + 1
            keep.add(n["id"])
            taken += 1
    scored = sorted(((infl.get(e["dst"], 0.0) * abs(float(e["score"])) / (total[e["dst"]] or 1.0), e)
                     for e in graph.edges if e["src"] in keep and e["dst"] in keep and float(e["score"]) != 0.0),
                    key=lambda se: -se[0])
    edges = [e for _, e in scored[:max_edges]]
    reach, changed = set(roots), True
    while changed:
        changed = False
        for e in edges:
            if e["dst"] in reach and e["src"] not in reach:
                reach.add(e["src"])
                changed = True
    nodes = [n for n in graph.nodes if n["id"] in reach]
    edges = [e for e in edges if e["src"] in reach and e["dst"] in reach]
    return dataclasses.replace(graph, nodes=nodes, edges=edges,
                               params={**graph.params, "per_row": per_row, "max_edges": max_edges,
                                       "per_cell": per_cell})


def scores_caption(graph: Any) -> str:
    """circuit-tracer's replacement and completeness scores of a feature graph, one line."""
    s = graph.graph_scores()
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    return (f"Replacement score {fmt(s.get('replacement'))} (share of the influence on the logits that comes from "
            f"the token embeddings rather than error nodes) · completeness score {fmt(s.get('completeness'))} "
            f"(share of the inputs to features and logits that comes from non-error nodes) · on the "
            f"{s.get('computed_on', 'pruned')} graph")


def short_label(node: dict[str, Any], labels: dict[str, list[str]], chars: int) -> str:
    """What a node shows on the graph: a feature's id and the first token of its label, an error node
    "err", the logits "logits", an embedding nothing (its token labels the column); at most ``chars``
    characters."""
    if node["kind"] == "feature" and node.get("clerp"):  # an imported graph's own explanation (escaped: plotly
        out = f"{node['feature']} {html.escape(str(node['clerp']))}"  # reads tags in labels)
    elif node["kind"] == "feature":
        text = (labels.get(node["dictionary"]) or [])[node["feature"]:node["feature"] + 1]
        words = re.findall(r"'([^']*)'", text[0]) if text else []  # an automatic label: its first token
        word = words[0].strip() if words else (text[0].split(" · sim")[0] if text else "")
        out = f"{node['feature']} {word}".strip()
    elif node["kind"] == "error":
        out = "err"
    elif node["kind"] == "token":
        return ""  # the token stands under its column on the x axis
    else:
        out = str(node.get("label") or node["id"])
    return out if len(out) <= chars else out[: max(chars - 1, 1)] + "…"


def row_name(row: float, kinds: set[str], tags: dict[float, str]) -> str:
    if "token" in kinds:
        return "embeddings"
    if "logits" in kinds:
        return "logits"
    return tags.get(row, f"L{row:g}")


def figure(graph: Any, labels: dict[str, list[str]], selected: str | None = None):
    """Rows: embeddings at the bottom, each dictionary at its layer (a transcoder half a layer below), the
    logits on top; columns: token positions (the logits at the last one). Each node carries its short label
    to its right; hover gives the id, the full label and the numbers."""
    from circuits.plot import graph_figure

    rows = sorted({float(n["row"]) for n in graph.nodes})
    index = {r: i for i, r in enumerate(rows)}
    seq = len(graph.tokens)
    last = seq - 1
    cells: dict[tuple[float, int], list[dict[str, Any]]] = {}
    for n in graph.nodes:
        pos = last if n["position"] is None else int(n["position"])
        cells.setdefault((float(n["row"]), pos), []).append(n)
    chars = max(4, min(14, int(WIDTH_PX / (seq + 1) / 6.5) - 1))  # a label fits its column
    drawn, hover = [], {}
    for (row, pos), members in cells.items():
        members.sort(key=lambda n: -float(n["influence"]))
        m = len(members)
        for k, n in enumerate(members):
            y = index[row] + (ROW_SPREAD / 2 - ROW_SPREAD * k / (m - 1) if m > 1 else 0.0)
            drawn.append({"name": n["id"], "layer": y, "x": pos, "kind": n["kind"],
                          "label": short_label(n, labels, chars)})
            full = ((labels.get(n["dictionary"]) or [])[n["feature"]] if n["kind"] == "feature"
                    and n["feature"] < len(labels.get(n["dictionary"]) or []) else "")
            full = full or html.escape(str(n.get("clerp") or ""))
            hover[n["id"]] = "<br>".join(x for x in (
                f"<b>{n['id']}</b>", full, f"influence {float(n['influence']):.3f}",
                f"activation {n['activation']:.3f}" if n.get("activation") is not None else "",
                f"DPA score {n['score']:+.3f}" if n.get("score") is not None else "", "click: its dashboard") if x)
    fig = graph_figure(drawn, [{"src": e["src"], "dst": e["dst"], "score": e["score"]} for e in graph.edges],
                       title="Feature graph", selected=selected, height=max(520, 120 * len(rows) + 140))
    nodes = fig.data[-1]
    nodes.textposition = "middle right"
    nodes.textfont = {"size": 10}
    nodes.hovertext = [hover[name] for name in nodes.customdata]
    tags = {float(n["row"]): n["id"].split(".")[0] for n in graph.nodes if n["kind"] in ("feature", "error")}
    kinds = {r: {n["kind"] for n in graph.nodes if float(n["row"]) == r} for r in rows}
    from app.views import token_labels

    fig.update_xaxes(visible=True, title="token position", tickmode="array", tickvals=list(range(seq)),
                     ticktext=token_labels(graph.tokens), range=[-0.4, seq + 0.4], showgrid=True, zeroline=False)
    fig.update_yaxes(title="layer", tickmode="array", tickvals=list(range(len(rows))),
                     ticktext=[row_name(r, kinds[r], tags) for r in rows], range=[-0.6, len(rows) - 0.4])
    fig.update_layout(clickmode="event+select", dragmode=False, showlegend=True,
                      legend={"orientation": "h", "y": -0.16}, margin={"l": 60, "r": 20, "t": 50, "b": 90})
    return fig


@st.cache_resource(show_spinner=False, max_entries=16)
def dashboards(path: str, _stamp: float) -> Any | None:
    """The stored dashboards of a dictionary directory (None when it has none)."""
    from pathlib import Path

    from attribution.sae.dashboard import Dashboards

    if not (Path(path) / "dashboards.safetensors").exists():
        return None
    return Dashboards.load(path)


def all_labels(graph: Any) -> dict[str, list[str]]:
    """Dictionary name -> its features' short explanations with their simulation scores (their automatic
    token labels where no explanations are built; from the stored dashboards; empty without them)."""
    from pathlib import Path

    out = {}
    for d in graph.dictionaries:
        path = Path(d["path"]) / "dashboards.safetensors"
        try:
            db = dashboards(d["path"], path.stat().st_mtime if path.exists() else 0.0)
        except Exception:  # noqa: BLE001 - a damaged dashboard file only costs the labels
            db = None
        out[d["name"]] = [db.describe(f, short=True) for f in range(db.n_units)] if db is not None else []
    return out


def dashboard_card(graph: Any, node: dict[str, Any]) -> None:
    """A feature's dashboard (label, numbers, the logits it raises, its top contexts) beside the graph."""
    from pathlib import Path

    from attribution.sae.render import contexts_html

    path = next((d["path"] for d in graph.dictionaries if d["name"] == node["dictionary"]), None)
    db = dashboards(path, (Path(path) / "dashboards.safetensors").stat().st_mtime) if path and (
        Path(path) / "dashboards.safetensors").exists() else None
    if db is None:
        st.caption(f"{node['dictionary']} has no stored dashboards (`workbench sae dashboards` builds them).")
        return
    card = db.card(int(node["feature"]))
    st.markdown(f"**Feature {node['feature']}** · {card['explanation'] or card['label']}")
    if card["score"] is not None:
        st.caption(f"simulation score {card['score']:.2f} (explanation vs. true activations on held-out text) · "
                   f"tokens: {card['label']}")
    c1, c2 = st.columns(2)
    c1.metric("density", f"{card['density']:.5f}")
    c2.metric("max activation", f"{card['max_activation']:.3f}")
    if any(v for _, v in card["top_logits"]):
        st.caption("Raises: " + " · ".join(f"{t!r} {v:+.2f}" for t, v in card["top_logits"][:6]))
    top = [c for c in card["contexts"] if c["group"] == "top"][:5]
    if top:
        st.html(contexts_html(top, card["max_activation"]))
