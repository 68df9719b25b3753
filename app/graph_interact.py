"""Graph interaction on the Circuits, Information flow and Feature graph views (circuit-tracer's and Neuronpedia's
graph view is the model): hover a node to light its neighbours and edges, pin nodes into a subgraph, group
nodes into labelled supernodes (by hand or from suggestions) kept with the run, and a pruning threshold by
cumulative influence that moves on the drawn graph. The logic lives in circuits/interact.py; this module draws
the controls and the figure.

Hover runs in the browser, offline: ``hover_script`` is a small script (``st.html`` with JavaScript, no
download) that listens to plotly's hover events on every figure marked ``layout.meta.wbGraph`` and, from the
``meta.wbEdges`` list each edge trace carries (the source and target of each of its segments, read off the
node positions by ``annotate``), dims the rest of the graph and redraws the hovered node's edges on top.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app.common import code, esc
from circuits.interact import SUPER, Annotations

PIN_SYMBOL, SUPER_SYMBOL = "diamond", "hexagon"
TOP_LOGITS = 5  # output tokens drawn as nodes of their own, with their probabilities

HOVER_JS = r"""
<script>
(() => {
  if (window.__wbGraphHover) return;
  window.__wbGraphHover = true;
  const DIM = 0.12;
  const dashes = {dash: "6,4", dot: "2,3"};
  const isGraph = gd => !!(gd.layout && gd.layout.meta && gd.layout.meta.wbGraph);
  const indexOf = el => { const cd = el.__data__; return cd && cd[0] && cd[0].trace ? cd[0].trace.index : -1; };
  function clear(gd) {
    gd.querySelectorAll(".wb-hl").forEach(e => e.remove());
    gd.querySelectorAll(".scatterlayer .trace, .scatterlayer .point, .scatterlayer .textpoint")
      .forEach(e => { e.style.opacity = ""; });
    gd.removeAttribute("data-wb-hover");
    gd.removeAttribute("data-wb-near");
  }
  function highlight(gd, ev) {
    if (!isGraph(gd) || !ev || !ev.points || !ev.points.length) return;
    const last = gd.data.length - 1, pt = ev.points[0];
    if (pt.curveNumber !== last) return;
    let name = pt.customdata;
    if (Array.isArray(name)) name = name[0];
    clear(gd);
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const near = new Set([name]), paths = [];
    gd.data.forEach(t => {
      const edges = t.meta && t.meta.wbEdges;
      if (!edges) return;
      let seg = 0, pts = [];
      const flush = () => {
        if (!pts.length) return;
        const e = edges[seg];
        if (e && (e[0] === name || e[1] === name)) { near.add(e[0]); near.add(e[1]); paths.push([pts, t.line || {}]); }
        seg += 1; pts = [];
      };
      for (let k = 0; k < t.x.length; k++) {
        if (t.x[k] === null || t.y[k] === null) flush(); else pts.push([t.x[k], t.y[k]]);
      }
      flush();
    });
    let nodes = null;
    gd.querySelectorAll(".scatterlayer .trace").forEach(el => {
      const i = indexOf(el);
      if (i === last) { nodes = el; return; }
      if (gd.data[i] && gd.data[i].meta && gd.data[i].meta.wbEdges) el.style.opacity = DIM;
    });
    const names = gd.data[last].customdata || [];
    if (nodes) {
      nodes.querySelectorAll(".point, .textpoint").forEach(el => {
        const d = el.__data__;
        if (d && d.i !== undefined && !near.has(names[d.i])) el.style.opacity = DIM;
      });
      const ns = "http://www.w3.org/2000/svg", g = document.createElementNS(ns, "g");
      g.setAttribute("class", "wb-hl");
      for (const [pts, line] of paths) {
        const p = document.createElementNS(ns, "path");
        p.setAttribute("d", "M" + pts.map(([x, y]) => xa.c2p(x) + "," + ya.c2p(y)).join("L"));
        p.setAttribute("fill", "none");
        p.setAttribute("stroke", line.color || "#333");
        p.setAttribute("stroke-width", String((line.width || 2) + 1.5));
        if (dashes[line.dash]) p.setAttribute("stroke-dasharray", dashes[line.dash]);
        g.appendChild(p);
      }
      nodes.parentNode.insertBefore(g, nodes);
    }
    gd.setAttribute("data-wb-hover", name);
    gd.setAttribute("data-wb-near", JSON.stringify([...near]));
  }
  function attach() {
    document.querySelectorAll(".js-plotly-plot").forEach(gd => {
      if (gd.__wbOn || typeof gd.on !== "function") return;
      gd.__wbOn = true;
      gd.on("plotly_hover", ev => highlight(gd, ev));
      gd.on("plotly_unhover", () => clear(gd));
      gd.on("plotly_afterplot", () => gd.querySelectorAll(".wb-hl").length && clear(gd));
    });
  }
  attach();
  setInterval(attach, 400);
})();
</script>
"""


def hover_script() -> None:
    """Turn on hover highlighting for every marked graph of the page (idempotent; runs in the browser)."""
    st.html(HOVER_JS, unsafe_allow_javascript=True)


# -- the figure ------------------------------------------------------------------------------------------------
def annotate(fig: Any, pinned: list[str] | None = None) -> Any:
    """Mark ``fig`` (a graph_figure / feature_graph_figure: edge traces, then the node trace last) for hover
    highlighting: each edge trace's ``meta.wbEdges`` lists its segments' [source, target] (read off the node
    positions), ``layout.meta.wbGraph``; pinned nodes drawn as diamonds, supernodes as hexagons."""
    nodes = fig.data[-1]
    names = list(nodes.customdata or [])
    where = {(round(float(x), 6), round(float(y), 6)): n for x, y, n in zip(nodes.x, nodes.y, names, strict=True)}
    for trace in fig.data[:-1]:
        if trace.mode != "lines" or not trace.x:
            continue
        segs: list[list[str | None]] = []
        start = prev = None
        for x, y in [*zip(trace.x, trace.y, strict=True), (None, None)]:
            if x is None or y is None:
                if start is not None:
                    segs.append([where.get(start), where.get(prev)])
                start = prev = None
                continue
            prev = (round(float(x), 6), round(float(y), 6))
            start = start or prev
        if segs:
            trace.meta = {"wbEdges": segs}
    pinned_set = set(pinned or [])
    symbols = [SUPER_SYMBOL if str(n).startswith("⊕ ") else PIN_SYMBOL if n in pinned_set else "circle"
               for n in names]
    nodes.marker.symbol = symbols
    sizes = nodes.marker.size
    sizes = list(sizes) if isinstance(sizes, list | tuple) else [sizes or 11] * len(names)
    nodes.marker.size = [s + 6 if sym != "circle" else s for s, sym in zip(sizes, symbols, strict=True)]
    fig.update_layout(meta={"wbGraph": 1}, hoverlabel={"namelength": -1})
    return fig


def add_logits(fig: Any, top: list[tuple[str, float]], target: str | None, spread: list[float] | None = None) -> Any:
    """The top output tokens as nodes of their own in the output row, labelled with their probabilities: the
    target's probability goes on the graph's logits node, the others beside it (at ``spread``'s x values, or
    spaced over the row)."""
    if not top:
        return fig
    nodes = fig.data[-1]
    names = list(nodes.customdata)
    if "logits" not in names:
        return fig
    i = names.index("logits")
    y, x0 = nodes.y[i], nodes.x[i]
    probs = dict(top)
    text, hover = list(nodes.text), list(nodes.hovertext or [""] * len(names))
    if target in probs:
        text[i] = f"{html.escape(repr(target), quote=False)} p={probs[target]:.2f}"
        hover[i] = f"{hover[i]}<br>p({html.escape(repr(target), quote=False)}) = {probs[target]:.3f}"
    others = [(t, p) for t, p in top if t != target]
    if spread is None:
        step = 0.8 / max(len(others), 1)
        spread = [x for x in (0.1 + step * (k + 0.5) for k in range(len(others) + 1)) if abs(x - x0) > step / 2]
    others = others[:len(spread)]
    xs, ys = list(nodes.x) + spread[:len(others)], list(nodes.y) + [y] * len(others)
    text += [f"{html.escape(repr(t), quote=False)}<br>p={p:.2f}" for t, p in others]
    hover += [f"<b>output {html.escape(repr(t), quote=False)}</b><br>p = {p:.3f}<br>not attributed (the graph explains "
              f"{html.escape(repr(target), quote=False)})" for t, p in others]
    names += [f"logit {t!r}" for t, _ in others]
    colours = nodes.marker.color
    colours = list(colours) if isinstance(colours, list | tuple) else [colours] * (len(xs) - len(others))
    sizes = nodes.marker.size
    sizes = list(sizes) if isinstance(sizes, list | tuple) else [sizes] * (len(xs) - len(others))
    widths = nodes.marker.line.width
    widths = list(widths) if isinstance(widths, list | tuple) else [widths] * (len(xs) - len(others))
    positions = nodes.textposition
    positions = list(positions) if isinstance(positions, list | tuple) else [positions] * (len(xs) - len(others))
    nodes.update(x=xs, y=ys, text=text, hovertext=hover, customdata=names,
                 textposition=positions + ["top center"] * len(others),
                 marker={"color": colours + ["#ffffff"] * len(others), "size": sizes + [9] * len(others),
                         "line": {"width": widths + [1] * len(others), "color": "#000"}})
    return fig


def top_logits(loaded: Any, prompt: str, k: int = TOP_LOGITS) -> list[tuple[str, float]]:
    """The model's ``k`` most probable next tokens after ``prompt`` with their probabilities (one forward)."""
    import torch

    from app import shared as SH

    def run() -> list[tuple[str, float]]:
        m = loaded.model
        with loaded.lock, torch.no_grad():
            logits = m.logits(m.to_tokens(prompt))[0, -1].float()
        probs = torch.softmax(logits, -1)
        top = probs.topk(min(k, probs.numel()))
        return [(m.decode([int(i)]), float(p)) for p, i in zip(top.values, top.indices, strict=True)]

    try:
        return SH.shared(("top_logits", loaded.name, prompt, k), run)
    except Exception:  # noqa: BLE001 - the logits row is extra: a failure costs only its nodes
        return []


# -- the controls ----------------------------------------------------------------------------------------------
# Interaction state belongs to one graph: pins, supernodes, the threshold, pinned-only and the selected node are
# held per view (``key``) and per graph identity (its Subgraph.key), so a new prompt starts clean, and what is
# written into a run is only the state of the graph that run holds.
MAX_STATES = 32  # graphs per view whose state a session keeps (a return to one finds it as it was left)


@dataclass
class GraphState:
    """One graph's interaction state in one view; the stored run it was opened from, whose copy follows every
    change (``runs``), and the runs saved from it, each holding the state as it was when saved (``saved``)."""

    annotations: Annotations = field(default_factory=Annotations)
    threshold: float = 1.0
    pinned_only: bool = False
    node: str | None = None
    runs: list[str] = field(default_factory=list)
    lineage: Any = None
    saved: list[str] = field(default_factory=list)


@dataclass
class View:
    """What the controls chose: the threshold, the pins, the supernodes (and whether only the pinned subgraph
    is drawn), and the graph identity they belong to."""

    threshold: float = 1.0
    annotations: Annotations = field(default_factory=Annotations)
    pinned_only: bool = False
    identity: str | None = None

    def apply(self, sub: Any) -> tuple[Any, Any]:
        """(the pruned graph, the graph drawn: pruned, grouped, perhaps only the pinned part). Pinned nodes are
        never pruned."""
        from circuits import interact as I

        pruned = I.prune(sub, self.threshold, self.annotations.pinned)
        drawn = I.group(pruned, self.annotations.supernodes)
        if self.pinned_only:
            drawn = I.pinned_only(drawn, self.annotations.pinned)
        return pruned, drawn


def _states(key: str) -> dict[str, GraphState]:
    return st.session_state.setdefault(f"_{key}_states", {})


def state(key: str) -> GraphState | None:
    """The state of the graph this view shows now (None before ``enter``)."""
    return _states(key).get(st.session_state.get(f"_{key}_identity"))


def _fresh(key: str, run: Any, lineage: Any, before: GraphState | None) -> GraphState:
    """A graph seen for the first time: a stored run's kept state (it reopens with what it was saved with), else
    the previous graph's pins, supernodes and threshold when it was the same result drawn another way (the same
    ``lineage``: another k), else nothing."""
    from circuits.interact import load

    if run is not None:
        ann = Annotations()
        try:
            ann = load(run)
        except Exception as exc:  # noqa: BLE001 - damaged annotations cost them, not the graph
            st.warning(f"The supernodes kept with run {esc(run.id)} cannot be read: {esc(exc)}")
        return GraphState(ann, ann.threshold or 1.0, runs=[run.id], lineage=lineage)
    if before is not None and lineage is not None and before.lineage == lineage:
        ann = before.annotations.copy()
        return GraphState(ann, before.threshold, before.pinned_only, lineage=lineage)
    return GraphState(lineage=lineage)


def enter(key: str, identity: str, run: Any = None, lineage: Any = None) -> tuple[GraphState, bool]:
    """This view's state for the graph ``identity`` (its Subgraph.key), made on first sight (``_fresh``); returns
    (state, whether the view's graph changed since its last run). On a change the view's widgets take the
    graph's own values, so call it before they are drawn; a widget dropped while the page waited on a job gets
    its graph's value back."""
    s = st.session_state
    states = _states(key)
    before = s.get(f"_{key}_identity")
    got = states.pop(identity, None)
    if got is None:
        got = _fresh(key, run, lineage, states.get(before))
    states[identity] = got  # the newest last: the oldest goes first
    while len(states) > MAX_STATES:
        states.pop(next(iter(states)))
    switched = before != identity
    if switched:
        s[f"_{key}_identity"] = identity
        s[f"{key}_prune"] = got.threshold
        s[f"{key}_pinned_only"] = got.pinned_only
        for k in (f"_{key}_pinned_last", f"_{key}_suggested", f"_{key}_open", f"_{key}_prune_error"):
            s.pop(k, None)
        # set, not dropped: the browser keeps a dropped widget's text; a value set here is sent to it
        s[f"{key}_sn_name"], s[f"{key}_sn_members"] = "", []
        s.pop(f"{key}_pinned", None)
    else:
        if f"{key}_prune" not in s:
            s[f"{key}_prune"] = got.threshold
        if f"{key}_pinned_only" not in s:
            s[f"{key}_pinned_only"] = got.pinned_only
    return got, switched


def saved(key: str, identity: str, run: Any) -> None:
    """A run was just saved from this view's graph ``identity``: that graph's state as it is now (and only it) is
    written into the run, so the run reopens with exactly that; later changes stay in the session until saved
    again. Called from the save button's callback."""
    from circuits.interact import keep

    got = _states(key).get(identity)
    if got is None:
        return
    ann = got.annotations
    ann.threshold = None if got.threshold >= 1.0 else got.threshold
    if ann.pinned or ann.supernodes or ann.threshold is not None:
        try:
            keep(run, ann)
        except Exception as exc:  # noqa: BLE001 - said on the page; the run itself is saved
            st.session_state[f"_{key}_keep_error"] = f"Supernodes not kept with run {run.id}: {exc}"
            return
    if run.id not in got.saved:
        got.saved.append(run.id)


def _keep(key: str, got: GraphState) -> list[str]:
    """Write this graph's pins, supernodes and threshold into each run it is kept with whose copy differs; the
    runs kept with (ids)."""
    from app.common import store
    from circuits.interact import keep

    ann = got.annotations
    ann.threshold = None if got.threshold >= 1.0 else got.threshold
    text = json.dumps(ann.to_json(), sort_keys=True)
    kept = []
    for rid in list(got.runs):
        slot = f"_{key}_kept_{rid}"
        if st.session_state.get(slot) != text:
            try:
                keep(store().get(rid), ann)
            except Exception as exc:  # noqa: BLE001 - one line on the page (a run removed since: not kept)
                st.warning(f"Supernodes not kept with run {esc(rid)}: {esc(exc)}")
                continue
            st.session_state[slot] = text
        kept.append(rid)
    return kept


def _threshold_changed(key: str) -> None:
    """on_change of the threshold box: a good value becomes the graph's; a bad one is a message and the box goes
    back to the value in use."""
    from circuits.interact import check_threshold

    got = state(key)
    if got is None:
        return
    value = st.session_state.get(f"{key}_prune")
    try:
        got.threshold = check_threshold(value)
    except Exception as exc:  # noqa: BLE001 - ArgumentError: the message is the page's
        st.session_state[f"_{key}_prune_error"] = str(exc)
        st.session_state[f"{key}_prune"] = got.threshold


def _pinned_only_changed(key: str) -> None:
    got = state(key)
    if got is not None:
        got.pinned_only = bool(st.session_state.get(f"{key}_pinned_only"))


def _pin(key: str, node: str, on: bool) -> None:
    """The Pin / Unpin button's callback: the change lands before the page redraws, so the button's label
    follows it."""
    got = state(key)
    if got is None:
        return
    pins = got.annotations.pinned
    if on and node not in pins:
        pins.append(node)
    elif not on and node in pins:
        pins.remove(node)


def controls(key: str, sub: Any, run: Any = None, current: str | None = None,
             explanations: dict[str, str] | None = None, identity: str | None = None, lineage: Any = None) -> View:
    """The controls above a graph: the pruning threshold, pins (the clicked ``current`` node with one button, or
    any from the list), supernodes (by hand or suggested) and whether to draw only the pinned subgraph, all of
    them the state of one graph: ``identity`` (default ``sub.key``; see ``enter``). ``run``: the stored run shown
    (its kept state is loaded, and written back as it changes); a run saved from the view through ``saved`` is
    kept with the same way."""
    from circuits import interact as I

    hover_script()
    identity = identity or sub.key
    got, _ = enter(key, identity, run, lineage)
    ann = got.annotations
    ids = [n.id for n in sub.nodes]
    groupable = [n.id for n in sub.nodes if n.kind in I.GROUPABLE]
    c1, c2, c3 = st.columns([2, 2, 2])
    c1.number_input("Pruning threshold (cumulative influence)", step=0.05, format="%.2f", key=f"{key}_prune",
                    on_change=_threshold_changed, args=(key,),
                    help="Draw the most influential nodes that together hold this share of the influence on the "
                         "logits (circuit-tracer's node threshold), each with its strongest path to the logits and "
                         "from the embeddings; pinned nodes always. 1 draws every node. In (0, 1].")
    bad = st.session_state.pop(f"_{key}_prune_error", None)
    if bad:
        st.warning(f"{esc(bad)}. The graph stays pruned at {got.threshold:g}.")
    c2.toggle("Pinned subgraph only", key=f"{key}_pinned_only", on_change=_pinned_only_changed, args=(key,),
              help="Draw the pinned nodes and the edges among them (a supernode holding a pinned node counts).")
    only = got.pinned_only
    if current in ids and current not in ann.pinned:
        c3.button(f"Pin {current}", key=f"{key}_pin", on_click=_pin, args=(key, current, True))
    elif current in ann.pinned:
        c3.button(f"Unpin {current}", key=f"{key}_unpin", on_click=_pin, args=(key, current, False))
    else:
        c3.caption("Click a node to pin it; hover one to light its edges.")
    present = [p for p in ann.pinned if p in ids]
    with st.expander(f"Pins and supernodes ({len(present)} pinned, {len(ann.supernodes)} supernodes)",
                     expanded=bool(st.session_state.get(f"_{key}_open"))):
        _pins(key, ann, ids)
        _grouping(key, ann, sub, groupable, explanations)
        kept = _keep(key, got)
        err = st.session_state.pop(f"_{key}_keep_error", None)
        if err:
            st.warning(esc(err))
        if kept:
            st.caption(f"Kept with run {', '.join(code(r) for r in kept)} (and its graph-JSON export's qParams).")
        elif got.saved:
            st.caption(f"Saved with run {', '.join(code(r) for r in got.saved)} as they were then; changes since "
                       "stay in this session, with this graph only (save again to keep them).")
        else:
            st.caption("Kept for this session, with this graph only: save the graph to keep them with its run.")
    if only and not ann.pinned:
        st.info("No node is pinned yet: the whole graph is drawn. Click a node and press Pin.")
        only = False
    return View(got.threshold, ann, only, identity)


def _pins(key: str, ann: Annotations, ids: list[str]) -> None:
    """The pinned nodes as a list to edit: a change the user made to the list since it was last drawn is taken
    first, then the list is drawn from the pins (which the Pin button may have changed)."""
    pin_key, last_key = f"{key}_pinned", f"_{key}_pinned_last"
    shown = st.session_state.get(pin_key)
    if shown is not None and shown != st.session_state.get(last_key):
        ann.pinned[:] = [p for p in ann.pinned if p not in ids] + [p for p in shown if p in ids]
        st.session_state[f"_{key}_open"] = True
    present = [p for p in ann.pinned if p in ids]
    st.session_state[pin_key] = st.session_state[last_key] = present
    st.multiselect("Pinned nodes", ids, key=pin_key)


def _grouping(key: str, ann: Annotations, sub: Any, groupable: list[str],
              explanations: dict[str, str] | None) -> None:
    """Make a supernode by hand, ungroup one, and take, edit or discard suggested ones."""
    from circuits import interact as I

    taken = {m for s in ann.supernodes for m in s.members}
    edit = st.session_state.pop(f"_{key}_edit", None)
    if edit is not None:  # a suggestion to edit: into the form before its widgets are drawn
        st.session_state[f"{key}_sn_name"], st.session_state[f"{key}_sn_members"] = edit
    c1, c2, c3 = st.columns([2, 4, 1])
    c1.text_input("Supernode label", key=f"{key}_sn_name", placeholder="e.g. name movers")
    free = [g for g in groupable if g not in taken]
    st.session_state[f"{key}_sn_members"] = [m for m in st.session_state.get(f"{key}_sn_members", []) if m in free]
    c2.multiselect("Members", free, key=f"{key}_sn_members")
    if c3.button("Group", key=f"{key}_sn_group"):
        st.session_state[f"_{key}_open"] = True
        try:
            made = I.check_supernode(st.session_state.get(f"{key}_sn_name", ""),
                                     st.session_state.get(f"{key}_sn_members", []), set(groupable), ann.supernodes)
        except Exception as exc:  # noqa: BLE001 - ArgumentError: said on the page; what was typed stays
            st.warning(f"Not grouped: {esc(exc)}.")
        else:
            ann.supernodes.append(made)
            st.session_state.pop(f"{key}_sn_members", None)
            st.rerun()
    if ann.supernodes:
        for i, s in enumerate(list(ann.supernodes)):
            a, b = st.columns([6, 1])
            a.markdown(f"**{esc(s.name)}**: {esc(', '.join(s.members))}")
            if b.button("Ungroup", key=f"{key}_sn_ungroup_{i}"):
                ann.supernodes.remove(s)
                st.session_state[f"_{key}_open"] = True
                st.rerun()
    slot = f"_{key}_suggested"
    if st.button("Suggest groups", key=f"{key}_suggest",
                 help="Features (or heads and MLPs) whose edges into and out of the graph are alike and whose "
                      "explanations share words, clustered; accept, edit or discard each."):
        st.session_state[f"_{key}_open"] = True
        st.session_state[slot] = [s for s in I.suggest(sub, explanations) if not set(s.members) & taken]
        if not st.session_state[slot]:
            st.info("No suggestion: no two nodes here have alike edges (or explanations).")
    for i, s in enumerate(list(st.session_state.get(slot) or [])):
        a, b, c, d = st.columns([5, 1, 1, 1])
        a.markdown(f"Suggested **{esc(s.name)}**: {esc(', '.join(s.members))}  \n{esc(s.reason)}")
        if b.button("Accept", key=f"{key}_sg_ok_{i}"):
            try:
                ann.supernodes.append(I.check_supernode(s.name, s.members, set(groupable), ann.supernodes))
            except Exception as exc:  # noqa: BLE001 - e.g. a member grouped meanwhile
                st.warning(f"Not grouped: {esc(exc)}.")
            else:
                st.session_state[slot].remove(s)
                st.rerun()
        if c.button("Edit", key=f"{key}_sg_edit_{i}"):  # into the form above, to change and Group
            st.session_state[f"_{key}_edit"] = (s.name, [m for m in s.members if m not in taken])
            st.session_state[slot].remove(s)
            st.rerun()
        if d.button("Discard", key=f"{key}_sg_no_{i}"):
            st.session_state[slot].remove(s)
            st.rerun()


def caption(view: View, full: Any, pruned: Any, drawn: Any) -> str:
    """One line: what the threshold kept and what the pins and supernodes changed; pins are counted as drawn
    (on their own, or inside a supernode)."""
    said = [f"threshold {view.threshold:g}: {len(pruned.nodes)} of {len(full.nodes)} nodes, "
            f"{len(pruned.edges)} of {len(full.edges)} edges"]
    n_super = sum(1 for n in drawn.nodes if n.kind == SUPER)
    if n_super:
        said.append(f"{n_super} supernode{'s' if n_super > 1 else ''} drawn as hexagons")
    ids = {n.id for n in drawn.nodes}
    grouped = {m for n in drawn.nodes if n.kind == SUPER for m in n.metadata.get("members") or []}
    alone = [p for p in view.annotations.pinned if p in ids]
    inside = [p for p in view.annotations.pinned if p in grouped]
    if alone or inside:
        said.append(f"{len(alone) + len(inside)} pinned"
                    + (" (diamonds)" if alone else "") + (f", {len(inside)} inside a supernode" if inside else "")
                    + (": only the pinned subgraph is drawn" if view.pinned_only else ""))
    return "Drawn at " + " · ".join(said) + ". Hover a node to light its neighbours and edges."


def supernode_ids(key: str) -> list[str]:
    """The ids of the supernodes of the graph this view shows (what a click on one names), before its controls
    are drawn (after ``enter``)."""
    got = state(key)
    return [s.id for s in got.annotations.supernodes] if got else []


# -- drawing ---------------------------------------------------------------------------------------------------
def circuit_figure(pruned: Any, drawn: Any, title: str = "", selected: str | None = None,
                   pinned: list[str] | None = None, top: list[tuple[str, float]] | None = None,
                   target: str | None = None, height: int | None = None) -> Any:
    """A circuit (heads, MLPs, embed, logits) as circuits.plot.graph_figure draws it; with supernodes, each one
    sits where its most influential member sat (the layout of ``pruned``, before grouping), so the rest of the
    graph does not move. Then the top output tokens and the hover marks."""
    from circuits.plot import bend_edges, graph_figure, layout, row_label, short_name

    if not any(n.kind == SUPER for n in drawn.nodes):
        nodes, edges = drawn.drawable()
        fig = graph_figure(nodes, edges, title=title, selected=selected, height=height)
    else:
        pos = layout([n.drawable() for n in pruned.nodes])
        layers = sorted({float(n.layer) for n in pruned.nodes})
        kinds: dict[float, set[str]] = {}
        for n in pruned.nodes:
            kinds.setdefault(float(n.layer), set()).add(n.kind)
        nodes = []
        for n in drawn.nodes:
            rep = n.metadata.get("rep") if n.kind == SUPER else n.id
            if rep not in pos:
                continue
            x, y = pos[rep]
            nodes.append({"name": n.id, "layer": y, "x": x, "kind": n.kind,
                          "label": html.escape(n.label, quote=False) if n.kind == SUPER else short_name(n.id, n.kind)})
        fig = graph_figure(nodes, drawn.drawable()[1], title=title, selected=selected, height=height)
        bend_edges(fig)
        fig.update_yaxes(tickvals=list(range(len(layers))), ticktext=[row_label(y, kinds[y]) for y in layers],
                         range=[-0.6, len(layers) - 0.4])
        _member_hover(fig, drawn)
    add_logits(fig, top or [], target)
    return annotate(fig, pinned)


def _member_hover(fig: Any, drawn: Any) -> None:
    """A supernode's hover names its members."""
    nodes = fig.data[-1]
    by_id = {n.id: n for n in drawn.nodes}
    hover = list(nodes.hovertext or [""] * len(nodes.customdata))
    for i, name in enumerate(nodes.customdata):
        n = by_id.get(name)
        if n is not None and n.kind == SUPER:
            members = ", ".join(n.metadata.get("members") or [])
            hover[i] = f"<b>{html.escape(n.label)}</b> (supernode)<br>{_wrap(html.escape(members))}"
    nodes.hovertext = hover


def _wrap(text: str, width: int = 70) -> str:
    """Long hover lines broken at spaces (plotly does not wrap hover labels)."""
    import textwrap

    return "<br>".join("<br>".join(textwrap.wrap(line, width, break_long_words=False) or [""])
                       for line in text.split("<br>"))


def feature_figure(graph: Any, drawn: Any, labels: dict[str, list[str]], selected: str | None = None,
                   pinned: list[str] | None = None, top: list[tuple[str, float]] | None = None) -> Any:
    """A feature graph's drawn Subgraph as circuits.plot.feature_graph_figure draws it, its tokens the graph's;
    ``labels`` (dictionary name -> each feature's full explanation) go on the nodes, cut to their column, whole
    on hover. Then the top output tokens beside the logits and the hover marks."""
    from types import SimpleNamespace

    from circuits.plot import feature_graph_figure

    nodes = [{"id": n.id, "kind": n.kind, "row": n.layer, "position": n.position, "label": n.label,
              **{k: v for k, v in n.metadata.items() if v is not None and k != "members"},
              "influence": float(n.metadata.get("influence") or 0.0)} for n in drawn.nodes]
    edges = [{"src": e.source, "dst": e.target, "score": e.score} for e in drawn.edges]
    view = SimpleNamespace(nodes=nodes, edges=edges,
                           tokens=list(graph.tokens), model=graph.model, target=graph.target, foil=graph.foil)
    fig = feature_graph_figure(view, labels, selected=selected)
    trace = fig.data[-1]
    trace.hovertext = [_wrap(h) for h in trace.hovertext]
    _member_hover(fig, drawn)
    last = max(len(graph.tokens) - 1, 0)
    add_logits(fig, top or [], graph.target, spread=[float(x) for x in range(last - 1, max(last - TOP_LOGITS, -1), -1)])
    return annotate(fig, pinned)
