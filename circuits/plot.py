"""Figures of circuits: the layered graph (every edge method and feature graphs draw through it), the feature
graph's token-column layout, and the faithfulness curve. The app's Circuits and Feature graph pages, the
notebook's ``.plot()`` and the paper figures (scripts/paper_figures.py) all draw through this module.

``graph_figure(nodes, edges)`` takes plain data, so any graph can use it: nodes are dicts with ``name``,
``layer`` (the row, bottom to top) and optional ``label``/``kind``/``x`` (a column). Without ``x``, the drawn
layers become evenly spaced rows (no empty bands for the layers a circuit skips), heads sit in one column per
head index with the MLP beside them (``L3.H5`` is drawn as ``H5`` in the row ``L3``), and edges bow sideways
so one that passes a row, or runs beside another, stays visible. Edges are dicts with ``src``, ``dst`` (a
node name, or a receiver input ``L3.H5.q`` drawn into its node with the role's dash) and ``score``. Edge
width follows |score|, colour its sign (blue supports the target, red opposes it); the node trace carries
each node's name as customdata, so a click on it can be read back (Streamlit's on_select).

Labels never overlap at the figure's own size (``layout.width`` x ``layout.height``, set on every graph
figure): the layout estimates each label's box from its font size and characters (``text_width``: ``CHAR_EM``
em an ordinary character, more for capitals and the widest glyphs)
and staggers, shortens or shrinks labels until the boxes are apart; tests/test_figure_layout.py checks it.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

import plotly.graph_objects as go

from attribution.sae.dashboard import Dashboards

POSITIVE, NEGATIVE = "#2166ac", "#b2182b"
ROLE_DASH = {"q": "dash", "k": "dot", "v": "solid", None: "solid"}
ROLE_NAME = {"q": "into a head's query (dashed)", "k": "into a head's key (dotted)",
             None: "into a value, MLP or the logits (solid)"}
KIND_COLOUR = {"embed": "#4d4d4d", "head": "#f4a582", "mlp": "#92c5de", "logits": "#1a1a1a",
               "feature": "#a6dba0", "error": "#bababa", "token": "#4d4d4d", "bias": "#dddddd"}
KIND_NAME = {"embed": "embeddings", "token": "token embedding", "head": "attention head", "mlp": "MLP",
             "feature": "dictionary feature", "error": "error (what the dictionary misses)", "logits": "logits",
             "bias": "bias"}

WIDTH = 900  # px: the default width of a circuit figure (a paper's full text width at scale 2)
FEATURE_WIDTH = 1000  # px: the feature graph's (one column per token: room for a label in each)
FONT = 11  # px: node label font size
FEATURE_FONT = 10  # px: the feature graph's labels (more of them, in narrower columns)
CHAR_EM = 0.6  # a label character's width in em, an upper estimate for plotly's Arial (digits are 0.556)
MARKER = 11  # px: node marker diameter
MARGIN = {"l": 70, "r": 30, "t": 90, "b": 110}  # room for the title and subtitle, the axis ticks and the legend
ROW_PX = 58  # px between two rows of a circuit
PER_CELL = 3  # feature graph: nodes drawn at one (row, position); their labels stay apart
ROW_SPREAD = 0.6  # feature graph: the nodes of one cell sit within +-ROW_SPREAD/2 of their row
ROLE_BEND = {"dash": 0.03, "dot": 0.06}  # q and k edges bow further out than v, so roles never overlap
_HEAD = re.compile(r"L(\d+)\.H(\d+)")
_MLP = re.compile(r"L(\d+)\.mlp")


def _split(dst: str, names: set[str]) -> tuple[str, str | None]:
    """'L3.H5.q' -> ('L3.H5', 'q') when 'L3.H5' is a node; other names are nodes themselves."""
    if dst not in names and "." in dst:
        node, role = dst.rsplit(".", 1)
        if node in names and role in ("q", "k", "v"):
            return node, role
    return dst, None


WIDE_EM = {"…": 1.0, "M": 0.85, "W": 0.95, "m": 0.85, "w": 0.75, "@": 1.0, "%": 0.9}  # Arial's widest glyphs


def text_width(text: str, font: float) -> float:
    """An upper estimate of a label's width in px (plotly draws labels in Arial): CHAR_EM an ordinary character
    (Arial's digits and lower case are 0.5-0.56 em), 0.75 em a capital, more for the widest glyphs (measured
    in Chromium: "MLP" 0.69 em a character, "prepos…" 0.58)."""
    text = html.unescape(text)
    return font * sum(WIDE_EM.get(c, 0.75 if c.isupper() else CHAR_EM) for c in text)


def _column(name: str, kind: str) -> int | None:
    """A circuit node's column: its head index; an MLP one past the last head (None: centred, or unknown)."""
    if kind in ("embed", "logits", "token"):
        return None
    m = _HEAD.fullmatch(name)
    if m:
        return int(m[2])
    return -1 if _MLP.fullmatch(name) else None


def layout(nodes: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Node positions in data units. Nodes that all carry an ``x`` (a feature graph's token position) are
    drawn at (x, layer). Otherwise y is the rank of the node's layer among the drawn layers, and x its column:
    heads by head index with the MLP after the last head, the embeddings and the logits centred (a graph
    whose names are not heads and MLPs spreads each row evenly over [0, 1] in the given order)."""
    if nodes and all("x" in n for n in nodes):
        return {n["name"]: (float(n["x"]), float(n["layer"])) for n in nodes}
    rank = {y: i for i, y in enumerate(sorted({float(n["layer"]) for n in nodes}))}
    cols = {n["name"]: _column(n["name"], n.get("kind", "head")) for n in nodes}
    centred = [n for n in nodes if n.get("kind") in ("embed", "logits", "token")]
    if all(c is not None for name, c in cols.items() if name not in {n["name"] for n in centred}):
        n_heads = max((c for c in cols.values() if c is not None and c >= 0), default=-1) + 1
        width = n_heads + (1 if any(c == -1 for c in cols.values()) else 0)
        # the embeddings and logits sit between two middle columns, never on one (its labels under their edges)
        centre = 0.5 + (0.5 / (width + 1) if width % 2 else 0.0)
        pos = {}
        for n in nodes:
            c = cols[n["name"]]
            x = centre if c is None else ((n_heads if c == -1 else c) + 1) / (width + 1)
            pos[n["name"]] = (x, float(rank[float(n["layer"])]))
        return pos
    rows: dict[float, list[str]] = {}
    for n in nodes:
        rows.setdefault(float(n["layer"]), []).append(n["name"])
    pos = {}
    for y, names in rows.items():
        for i, name in enumerate(names):
            pos[name] = ((i + 1) / (len(names) + 1), float(rank[y]))
    return pos


def short_name(name: str, kind: str) -> str:
    """A circuit node's label in its row: ``H5`` for ``L3.H5`` (the row says L3), ``MLP``, ``embed``..."""
    m = _HEAD.fullmatch(name)
    if m:
        return f"H{m[2]}"
    if _MLP.fullmatch(name):
        return "MLP"
    return name


def bend_edges(fig: go.Figure, steps: int = 12, unit: float = 1.0, mid: float = 0.5,
               only_vertical: bool = False) -> None:
    """Bow each edge sideways by the rows it skips (and its q/k role), so an edge that passes a node's
    row, or runs beside another edge between the same nodes, stays visible (one column of nodes would
    otherwise draw every edge on one vertical line); an edge within one row arcs over the nodes between its
    ends. ``unit``: the x distance of the largest bow's scale (a column); ``mid``: the x the bows lean
    towards; ``only_vertical``: bow only edges within one column (a feature graph's diagonals stay straight)."""
    for trace in fig.data:
        if trace.mode != "lines" or not trace.x or len(trace.x) < 3:  # legend-only traces have no segment
            continue
        shift = ROLE_BEND.get(trace.line.dash or "solid", 0.0)
        xs: list[float | None] = []
        ys: list[float | None] = []
        pts = list(zip(trace.x, trace.y, strict=True))
        for (x0, y0), (x1, y1) in zip(pts[0::3], pts[1::3], strict=True):
            if only_vertical:  # a column's edges bow out of it, away from its nodes and their labels' side
                bend, lift = (0.0 if abs(x1 - x0) > 1e-9 else -min(0.4, 0.15 + 0.05 * abs(y1 - y0)) * unit), 0.0
            elif abs(y1 - y0) < 1e-9:  # within a row: arc above it, higher the further it reaches
                bend, lift = 0.0, min(0.45, 0.15 + 0.5 * abs(x1 - x0) / unit)
            else:
                bend = min(0.12, 0.03 * max(0.0, abs(y1 - y0) - 1) + shift) * unit
                bend = -bend if (x0 + x1) / 2 > mid else bend  # bow towards the middle
                lift = 0.0
            cx, cy = (x0 + x1) / 2 + 2 * bend, (y0 + y1) / 2 + 2 * lift
            for i in range(steps + 1):
                t = i / steps
                xs.append((1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t**2 * x1)
                ys.append((1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t**2 * y1)
            xs.append(None)
            ys.append(None)
        trace.x, trace.y = xs, ys


def _legend_entries(fig: go.Figure, signs: set[str], roles: set[str | None], kinds: list[str]) -> None:
    """Legend-only traces: one per edge sign, one per receiver role (drawn thick, grey, in its dash) and one
    per node kind, so the legend names what the figure's colours and line styles mean."""
    for sign in ("+", "-"):
        if sign in signs:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", hoverinfo="skip",
                                     name="supports the target" if sign == "+" else "opposes the target",
                                     line={"color": POSITIVE if sign == "+" else NEGATIVE, "width": 4}))
    if roles - {None, "v"}:  # the dashes only mean something when some edge enters a query or key
        for role in ("q", "k", None):
            if role in roles or (role is None and "v" in roles):
                fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", hoverinfo="skip", name=ROLE_NAME[role],
                                         line={"color": "#555", "width": 2.5, "dash": ROLE_DASH[role]}))
    for kind in kinds:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", hoverinfo="skip", name=KIND_NAME.get(kind, kind),
                                 marker={"size": MARKER, "color": KIND_COLOUR.get(kind, "#f4a582"),
                                         "line": {"width": 1, "color": "#000"}}))


def graph_figure(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], title: str = "",
                 selected: str | None = None, height: int | None = None, subtitle: str = "",
                 width: int = WIDTH) -> go.Figure:
    """A layered drawing of a graph: inputs at the bottom, the output at the top (see the module's doc)."""
    names = {n["name"] for n in nodes}
    explicit = bool(nodes) and all("x" in n for n in nodes)
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
    for (sign, role, width_bin), segs in sorted(groups.items(), key=lambda kv: kv[0][2]):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for src, dst, _ in segs:
            (x0, y0), (x1, y1) = pos[src], pos[dst]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
            opacity=0.35 + 0.13 * width_bin,
            line={"color": POSITIVE if sign == "+" else NEGATIVE, "width": 1.1 + 1.6 * width_bin,
                  "dash": ROLE_DASH.get(role, "solid")}))
    if not explicit:
        bend_edges(fig)
    strength: dict[str, float] = {}
    for e in edges:
        dst, _ = _split(e["dst"], names)
        for n in (e["src"], dst):
            strength[n] = strength.get(n, 0.0) + abs(float(e["score"]))
    kinds = [k for k in KIND_NAME if any(n.get("kind", "head") == k for n in nodes)]
    _legend_entries(fig, {k[0] for k in groups}, {k[1] for k in groups}, kinds)
    labels = [n.get("label", n["name"]) if explicit else short_name(n["name"], n.get("kind", "head")) for n in nodes]
    fig.add_trace(go.Scatter(
        x=[pos[n["name"]][0] for n in nodes], y=[pos[n["name"]][1] for n in nodes],
        mode="markers+text", text=labels, textposition="top center", textfont={"size": FONT},
        customdata=[n["name"] for n in nodes], name="nodes (click to inspect)", showlegend=False,
        hovertext=[f"{n['name']}<br>sum |edge score| {strength.get(n['name'], 0.0):.3g}" for n in nodes],
        hoverinfo="text",
        marker={"size": [MARKER + 5 if n["name"] == selected else MARKER for n in nodes],
                "color": [KIND_COLOUR.get(n.get("kind", "head"), "#f4a582") for n in nodes],
                "line": {"width": [3 if n["name"] == selected else 1 for n in nodes], "color": "#000"}}))
    rows: dict[float, set[str]] = {}
    for n in nodes:
        rows.setdefault(float(n["layer"]), set()).add(n.get("kind", "head"))
    layers = sorted(rows)
    extra = 17 * max(0, subtitle.count("<br>") - 1)  # a subtitle of more than two lines pushes the plot down
    margin = {**MARGIN, "t": MARGIN["t"] + extra}
    fig.update_layout(
        title={"text": title, "subtitle": {"text": subtitle}} if subtitle else {"text": title},
        width=width, height=(height + extra) if height else max(420, ROW_PX * len(layers) + margin["t"] + MARGIN["b"]),
        hovermode="closest", plot_bgcolor="#ffffff", legend={"orientation": "h", "y": -0.02, "yanchor": "top"},
        margin=margin, xaxis={"visible": False, "range": [0.0, 1.0]},
        yaxis={"title": "layer", "tickmode": "array", "zeroline": False, "showgrid": True, "gridcolor": "#eeeeee",
               "range": [-0.6, len(layers) - 0.4],
               "tickvals": list(range(len(layers))), "ticktext": [row_label(y, rows[y]) for y in layers]})
    if not explicit:
        _fit_labels(fig, len(layers))
    return fig


def plot_box(fig: go.Figure) -> tuple[float, float, float, float]:
    """(left, top, width, height) in px of a figure's plotting area at its own size."""
    lay = fig.layout
    m = lay.margin
    w, h = float(lay.width or 700), float(lay.height or 450)
    return float(m.l), float(m.t), w - float(m.l) - float(m.r), h - float(m.t) - float(m.b)


def _fit_labels(fig: go.Figure, n_rows: int) -> None:
    """Stagger, then shrink, a circuit's labels until no two boxes meet at the figure's size: a row whose
    labels are wider than the gaps between its nodes puts every other label below its node; the font then
    shrinks (to 7 px at least; below that, hover names the heads) until neighbours on one side are apart."""
    nodes = fig.data[-1]
    _, _, pw, ph = plot_box(fig)
    xr = fig.layout.xaxis.range
    px = pw / (xr[1] - xr[0])
    rows: dict[float, list[int]] = {}
    for i, y in enumerate(nodes.y):
        rows.setdefault(float(y), []).append(i)
    positions = ["top center"] * len(nodes.x)
    font = float(FONT)

    def need(a: int, b: int, size: float) -> float:  # centre distance two labels need to stay apart
        return (text_width(nodes.text[a], size) + text_width(nodes.text[b], size)) / 2 + 4

    for members in rows.values():
        members.sort(key=lambda i: nodes.x[i])
        pairs = list(zip(members, members[1:], strict=False))
        if any((nodes.x[b] - nodes.x[a]) * px < need(a, b, font) for a, b in pairs):
            for k, i in enumerate(members):
                positions[i] = "top center" if k % 2 == 0 else "bottom center"
        for side in ("top center", "bottom center"):
            same = [i for i in members if positions[i] == side]
            for a, b in zip(same, same[1:], strict=False):
                ems = (text_width(nodes.text[a], 1.0) + text_width(nodes.text[b], 1.0)) / 2  # width per px of font
                if ems:
                    font = min(font, ((nodes.x[b] - nodes.x[a]) * px - 4) / ems)
    row_px = ph / max(n_rows - 1 + 1.2, 1.0)  # the y range is [-0.6, n_rows - 0.4]
    font = min(font, (row_px - MARKER - 4) / 2 / 1.3)  # a label below one row and one above the next fit between
    if font < 7:  # too many nodes for labels at this size: hover names them
        nodes.text = ["" if _column(n, "head") is not None else t
                      for n, t in zip(nodes.customdata, nodes.text, strict=True)]
        font = FONT
    nodes.textposition = positions
    nodes.textfont = {"size": math.floor(font * 10) / 10}


def row_label(y: float, kinds: set[str]) -> str:
    """The axis label of a drawing row holding nodes of ``kinds``: "input", "output" or its layer ("L3", "2.5")."""
    if kinds <= {"embed", "token"}:
        return "input"
    if kinds == {"logits"}:
        return "output"
    return f"L{int(y)}" if float(y).is_integer() else f"{y:g}"


def metric_name(target: str | None, foil: str | None) -> str:
    """What a graph explains, as its title says it: "logit(' Mary') − logit(' John')"."""
    if target is None:
        return "the top logit"
    return f"logit({target!r})" + (f" − logit({foil!r})" if foil else "")


# -- the feature graph: layers by row, token positions by column ---------------------------------------------
def readable(graph: Any, per_row: int, max_edges: int, per_cell: int = PER_CELL) -> Any:
    """``graph`` (a feature graph's Subgraph) with, in every row (embeddings, each dictionary), its ``per_row``
    nodes of largest influence (at most ``per_cell`` at one position), the logits, the ``max_edges`` edges among
    them of largest edge influence (influence of the target x |score| / its total |incoming|), then only nodes on
    a kept path to the logits."""
    import dataclasses

    total: dict[str, float] = {}
    for e in graph.edges:
        total[e.target] = total.get(e.target, 0.0) + abs(float(e.score))
    infl = {n.id: float(n.metadata["influence"]) for n in graph.nodes}
    roots = {n.id for n in graph.nodes if n.kind == "logits"} or {"logits"}  # an imported graph: several
    keep = set(roots)
    by_row: dict[float, list[Any]] = {}
    for n in graph.nodes:
        if n.kind != "logits":
            by_row.setdefault(float(n.layer), []).append(n)
    for members in by_row.values():
        cells: dict[Any, int] = {}
        taken = 0
        for n in sorted(members, key=lambda n: -infl[n.id]):
            if taken >= per_row:
                break
            if cells.get(n.position, 0) >= per_cell:
                continue
            cells[n.position] = cells.get(n.position, 0) + 1
            keep.add(n.id)
            taken += 1
    scored = sorted(((infl.get(e.target, 0.0) * abs(float(e.score)) / (total[e.target] or 1.0), e)
                     for e in graph.edges if e.source in keep and e.target in keep and float(e.score) != 0.0),
                    key=lambda se: -se[0])
    edges = [e for _, e in scored[:max_edges]]
    reach, changed = set(roots), True
    while changed:
        changed = False
        for e in edges:
            if e.target in reach and e.source not in reach:
                reach.add(e.source)
                changed = True
    nodes = [n for n in graph.nodes if n.id in reach]
    edges = [e for e in edges if e.source in reach and e.target in reach]
    params = {**graph.provenance.params, "per_row": per_row, "max_edges": max_edges, "per_cell": per_cell}
    return dataclasses.replace(graph, nodes=nodes, edges=edges,
                               provenance=dataclasses.replace(graph.provenance, params=params))


def feature_labels(dictionaries: list[dict[str, Any]], load: Any = None) -> dict[str, list[str]]:
    """Dictionary name -> its features' short explanations (their automatic token labels where none are
    built), from the stored dashboards; an empty list for a dictionary without them. ``load(path)``: how to
    open a dictionary's dashboards (the app passes its cached loader); None when it has none."""
    from pathlib import Path

    def _open(path: str) -> Any:
        return Dashboards.load(path) if (Path(path) / "dashboards.safetensors").exists() else None

    out = {}
    for d in dictionaries:
        try:
            db = (load or _open)(d["path"])
        except Exception:  # noqa: BLE001 - a damaged dashboard file only costs the labels
            db = None
        out[d["name"]] = [db.describe(f, short=True) for f in range(db.n_units)] if db is not None else []
    return out


def short_label(node: dict[str, Any], labels: dict[str, list[str]], chars: int) -> str:
    """What a node shows on the feature graph: a feature's id over the first words of its label (two lines,
    ``<br>``; an imported graph's own explanation, ``clerp``, where it has one), an error node "err", the
    logits "logits", an embedding nothing (its token labels the column); each line at most ``chars``
    characters, escaped (plotly reads tags in labels)."""

    budget = chars * CHAR_EM * FEATURE_FONT  # px a line may take

    def cut(text: str) -> str:  # by estimated width: capitals and the ellipsis are wider than CHAR_EM
        if text_width(text, FEATURE_FONT) > budget:
            while len(text) > 1 and text_width(text + "…", FEATURE_FONT) > budget:
                text = text[:-1]
            text = text.rstrip() + "…"
        return html.escape(text, quote=False)

    if node["kind"] == "feature":
        text = (labels.get(node.get("dictionary") or "") or [])[node["feature"]:node["feature"] + 1]
        words = re.findall(r"'([^']*)'", text[0]) if text else []  # an automatic label: its first token
        word = words[0].strip() if words else (text[0].split(" · sim")[0].strip() if text else "")
        word = word or str(node.get("clerp") or "").strip()
        return f"{cut(str(node['feature']))}<br>{cut(word)}" if word else cut(str(node["feature"]))
    if node["kind"] == "error":
        return cut("err")
    if node["kind"] == "token":
        return ""  # the token stands under its column on the x axis
    return cut(str(node.get("label") or node["id"]))


def row_name(row: float, kinds: set[str], tags: dict[float, str]) -> str:
    if "token" in kinds:
        return "embeddings"
    if "logits" in kinds:
        return "logits"
    return tags.get(row, f"L{row:g}")


def token_labels(tokens: list[str], width: int = 12) -> list[str]:
    """x-axis labels of token positions: ``3:' John'`` (plotly merges equal labels; the index keeps repeated
    tokens apart), cut to ``width`` characters."""
    out = []
    for i, t in enumerate(tokens):
        text = f"{i}:{t!r}"
        out.append(html.escape(text if len(text) <= width else text[: width - 1] + "…", quote=False))
    return out


def feature_view(sub: Any) -> Any:
    """A feature graph's Subgraph as what ``feature_graph_figure`` reads: its nodes and edges as the feature graph
    stores them (rows), its tokens, model, target and foil. A feature graph saved as a subgraph run (no tokens
    kept): its nodes' own fields (influence 0 where it has none), its tokens from its token nodes."""
    from types import SimpleNamespace

    if sub.is_feature_graph:
        return SimpleNamespace(nodes=[n.row() for n in sub.nodes],
                               edges=[{"src": e.source, "dst": e.target, "score": e.score} for e in sub.edges],
                               tokens=sub.tokens, model=sub.model, target=sub.target, foil=sub.foil)
    nodes = [{"id": n.id, "kind": n.kind, "row": n.layer, "position": n.position, "label": n.label,
              "influence": 0.0, **{k: v for k, v in n.metadata.items() if v is not None}} for n in sub.nodes]
    seq = max((n["position"] for n in nodes if n["position"] is not None), default=-1) + 1
    tokens = [""] * seq
    for n in nodes:
        if n["position"] is not None and isinstance(n.get("token"), str):
            tokens[n["position"]] = n["token"]
    row = sub.provenance.prompts[0] if sub.provenance.prompts else {}
    return SimpleNamespace(nodes=nodes, edges=[{"src": e.source, "dst": e.target, "score": e.score} for e in sub.edges],
                           tokens=tokens, model=sub.provenance.model, target=row.get("target"), foil=row.get("foil"))


def feature_graph_figure(graph: Any, labels: dict[str, list[str]] | None = None, selected: str | None = None,
                         title: str | None = None, subtitle: str = "", width: int = FEATURE_WIDTH) -> go.Figure:
    """A feature graph (``feature_view``'s rows) drawn as circuit-tracer's and Neuronpedia's graph views draw one.
    Rows: embeddings at the bottom, each dictionary at its layer (a transcoder half a layer below), the logits on
    top; columns: token positions (the logits at the last one). The nodes of one (row, position) sit one above
    the other, each with its short label to its right, cut to fit its column; hover gives the id, the full label
    and the numbers."""
    labels = labels or {}
    rows = sorted({float(n["row"]) for n in graph.nodes})
    index = {r: i for i, r in enumerate(rows)}
    seq = max(len(graph.tokens), 1)
    last = seq - 1
    cells: dict[tuple[float, int], list[dict[str, Any]]] = {}
    for n in graph.nodes:
        pos = last if n["position"] is None else int(n["position"])
        cells.setdefault((float(n["row"]), pos), []).append(n)
    pw = width - MARGIN["l"] - MARGIN["r"]
    column_px = pw / (seq + 0.8)  # the x range below is [-0.4, seq + 0.4]
    # a label starts right of its marker and must end before the next column's marker
    chars = int((column_px - MARKER - 4) / (CHAR_EM * FEATURE_FONT))
    drawn, hover = [], {}
    for (row, pos), members in cells.items():
        members.sort(key=lambda n: -float(n["influence"]))
        m = len(members)
        for k, n in enumerate(members):
            y = index[row] + (ROW_SPREAD / 2 - ROW_SPREAD * k / (m - 1) if m > 1 else 0.0)
            label = short_label(n, labels, chars) if chars >= 3 or n["kind"] == "logits" else ""
            drawn.append({"name": n["id"], "layer": y, "x": pos, "kind": n["kind"], "label": label})
            names = labels.get(n.get("dictionary") or "") or []
            full = names[n["feature"]] if n["kind"] == "feature" and n["feature"] < len(names) else ""
            full = html.escape(full or str(n.get("clerp") or ""), quote=False)
            hover[n["id"]] = "<br>".join(x for x in (
                f"<b>{html.escape(str(n['id']), quote=False)}</b>", full, f"influence {float(n['influence']):.3f}",
                f"activation {n['activation']:.3f}" if n.get("activation") is not None else "",
                f"DPA score {n['score']:+.3f}" if n.get("score") is not None else "", "click: its dashboard") if x)
    tokens = list(graph.tokens) or [""]
    title = title or (f"Feature graph of {metric_name(graph.target, graph.foil)} on {graph.model}")
    height = max(520, 110 * len(rows) + MARGIN["t"] + MARGIN["b"] + 40)
    fig = graph_figure(drawn, [{"src": e["src"], "dst": e["dst"], "score": e["score"]} for e in graph.edges],
                       title=title, subtitle=subtitle, selected=selected, height=height, width=width)
    nodes = fig.data[-1]
    nodes.textposition = "middle right"
    nodes.textfont = {"size": FEATURE_FONT}
    nodes.hovertext = [hover[name] for name in nodes.customdata]
    bend_edges(fig, unit=1.0, mid=seq / 2, only_vertical=True)
    tags = {float(n["row"]): n["id"].split(".")[0] for n in graph.nodes if n["kind"] in ("feature", "error")}
    kinds = {r: {n["kind"] for n in graph.nodes if float(n["row"]) == r} for r in rows}
    fig.update_xaxes(visible=True, title="token position", tickmode="array", tickvals=list(range(seq)),
                     ticktext=token_labels(tokens), tickangle=-45, range=[-0.4, seq + 0.4], showgrid=True,
                     gridcolor="#eeeeee", zeroline=False)
    fig.update_yaxes(title="layer", tickmode="array", tickvals=list(range(len(rows))),
                     ticktext=[row_name(r, kinds[r], tags) for r in rows], range=[-0.6, len(rows) - 0.4],
                     showgrid=False)
    for i in range(len(rows)):  # a light band per row: the nodes stacked in a cell read as that row's
        fig.add_shape(type="rect", xref="paper", x0=0, x1=1, y0=i - 0.42, y1=i + 0.42, layer="below",
                      line={"width": 0}, fillcolor="#f3f3f3" if i % 2 else "#fafafa")
    margin = {**fig.layout.margin.to_plotly_json(), "b": MARGIN["b"] + 40}  # room for the rotated token labels
    plot_h = fig.layout.height - margin["t"] - margin["b"]
    fig.update_layout(showlegend=True, margin=margin, legend={"orientation": "h", "yanchor": "top", "y": -95 / plot_h})
    return fig


def log_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Axis settings for a log axis of counts from ``lo`` to ``hi``: ticks at 1-2-5 steps (powers of ten only
    past three decades) written as whole numbers ("10", "200", "1,000"), never plotly's bare minor digits
    ("8 9 10 2 3") or SI fractions ("12.2223k")."""
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


# -- the titles of the notebook's figures: what is explained, what was kept, what each mark means ----------
def feature_graph_plot(graph: Any, per_row: int = 8, max_edges: int = 120, selected: str | None = None,
                       title: str | None = None, labels: dict[str, list[str]] | None = None) -> go.Figure:
    """A feature graph's figure (``Subgraph.plot``): pruned as the app prunes it (``readable``: the
    ``per_row`` most influential nodes of each layer, at most PER_CELL at one position), labelled from the
    dictionaries' stored dashboards, the subtitle saying what was kept."""
    shown = readable(graph, per_row, max_edges)
    labels = feature_labels(graph.dictionaries) if labels is None else labels
    subtitle = (f"{graph.prompt!r}<br>{len(shown.nodes)} of {len(graph.nodes)} nodes (per layer the {per_row} of "
                f"largest influence on the logits, at most {PER_CELL} per position), {len(shown.edges)} of "
                f"{len(graph.edges)} edges · width ∝ |DPA score| · labels: feature id and explanation")
    if not any(n.kind == "token" for n in graph.nodes):  # the engine's own top-k pruning dropped them
        subtitle += ("<br>this graph kept no embedding nodes: build it with max_nodes=100_000, max_edges=1_000_000 "
                     "(as the app does) and let the figure prune per layer")
    return feature_graph_figure(feature_view(shown), labels, selected=selected, title=title, subtitle=subtitle)
