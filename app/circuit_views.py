"""The Circuits page's views of a CircuitResult: which edges to draw, the faithfulness table and the
drill-down of one clicked node (its attention pattern, its direct logit effect, its circuit edges)."""

from __future__ import annotations

import re
from typing import Any

import streamlit as st

from app import common as C
from app import readouts as R
from app import shared as SH
from app import views as V


def circuit_edges(res: Any, k: int, selection: str, threshold: float = 0.0) -> list[dict[str, Any]]:
    """The top-k edges of ``res`` (``selection``: topk or greedy), minus those under ``threshold`` x the
    strongest drawn |score|; a greedy circuit is pruned again so it stays connected embed -> logits. Kept per
    session for the last few results and settings: a graph interaction reruns the page, and growing a greedy
    circuit over smollm2's 123,211 edges costs about 0.2 s each time."""
    memo = st.session_state.setdefault("_circ_edges_memo", {})
    sig = (id(res), k, selection, threshold)
    held = memo.get(sig)
    if held is not None and held[0] is res:
        return held[1]
    edges = _circuit_edges(res, k, selection, threshold)
    memo[sig] = (res, edges)
    while len(memo) > 8:
        memo.pop(next(iter(memo)))
    return edges


def _circuit_edges(res: Any, k: int, selection: str, threshold: float) -> list[dict[str, Any]]:
    import torch

    edges = res.top(k, selection)
    if threshold <= 0 or not edges:
        return edges
    top = max(abs(e["score"]) for e in edges)
    edges = [e for e in edges if abs(e["score"]) >= threshold * top]
    if selection == "greedy" and edges:
        g = res.graph
        mask = torch.zeros(g.n_edges, dtype=torch.bool)
        ids = [g.edge_id(e["src"], e["dst"]) for e in edges]
        mask[ids] = True
        kept = g.prune_connected(mask)
        edges = [e for e, i in zip(edges, ids, strict=True) if bool(kept[i])]
    return edges


def connected_edges(res: Any, budget: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The strongest connected circuit of at most ``budget`` edges (about: a single edge can join a larger
    piece): grown from the logits by |score| (MIB's greedy) to the longest length whose embed -> logits
    pruning keeps no more than ``budget`` edges, so the view is never empty when any path exists and never
    a tangle. Returns (edges as ``top`` gives them, facts: grown length, share of all |score| mass drawn)."""
    import torch

    g, scores = res.graph, res.scores
    n_all = g.n_edges
    budget = max(1, min(int(budget), n_all))
    memo: dict[int, torch.Tensor] = {}

    def kept(n: int) -> torch.Tensor:
        if n not in memo:
            memo[n] = g.prune_connected(g.grow(scores, n, absolute=True))
        return memo[n]

    # exponential then binary search on the grown length: the pruned count only rises with it
    lo, hi = 0, budget
    while int(kept(hi).sum()) <= budget and hi < n_all:
        lo, hi = hi, min(hi * 2, n_all)
    if int(kept(hi).sum()) <= budget:
        lo = hi
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if int(kept(mid).sum()) <= budget else (lo, mid)
    mask = kept(lo) if lo and int(kept(lo).sum()) else torch.zeros(n_all, dtype=torch.bool)
    if not int(mask.sum()):
        # the first connected piece is already larger than the budget: its strongest edges, pruned again
        first = kept(hi)
        ids = torch.nonzero(first).flatten()
        ids = ids[torch.argsort(scores[ids].abs(), descending=True, stable=True)][:budget]
        trimmed = torch.zeros(n_all, dtype=torch.bool)
        trimmed[ids] = True
        trimmed = g.prune_connected(trimmed)
        mask = trimmed if int(trimmed.sum()) else first
    ids = torch.nonzero(mask).flatten()
    ids = ids[torch.argsort(scores[ids].abs(), descending=True, stable=True)]
    edges = []
    for e in ids.tolist():
        src, dst = g.edge_name(e)
        edges.append({"src": src, "dst": dst, "score": float(scores[e])})
    total = float(scores.abs().sum())
    share = float(scores[ids].abs().sum()) / total if total > 0 else 0.0
    return edges, {"grown": max(lo, 1), "share": share}


def subgraphs(results: dict[str, Any], drawn: dict[str, list[dict[str, Any]]], k: int | None = None,
              selection: str | None = None) -> dict[str, Any]:
    """Each method's drawn edges as a circuits.graph.Subgraph (what graph_view draws and inspects), recording
    the ``k`` and ``selection`` they were drawn at (so the graph is the one a run saved at them reopens)."""
    return {m: results[m].subgraph(k, selection, edges=edges) for m, edges in drawn.items()}


def identity(results: dict[str, Any], subs: dict[str, Any], k: int, selection: str, hidden: float = 0.0) -> str:
    """The identity the page's interaction state is keyed on: the drawn circuit's Subgraph.key (with several
    methods, of all their keys), the circuit at k and selection before the hide-weak-edges slider (a view of it)."""
    import hashlib

    keys = [(results[m].subgraph(k, selection) if hidden > 0 else sub).key for m, sub in subs.items()]
    return keys[0] if len(keys) == 1 else hashlib.sha256("|".join(keys).encode()).hexdigest()[:16]


def union(subs: dict[str, Any]) -> Any:
    """One Subgraph with every method's nodes (the first method's edges and provenance): what the shared pins,
    supernodes and suggestions of the Circuits page are made on."""
    from dataclasses import replace

    first = next(iter(subs.values()))
    seen: dict[str, Any] = {}
    for sub in subs.values():
        for n in sub.nodes:
            seen.setdefault(n.id, n)
    return replace(first, nodes=list(seen.values()))


def faith_table(results: dict[str, Any]):
    import pandas as pd

    rows = []
    for method, res in results.items():
        f = res.faithfulness
        rows.append({"method": method, "AUC": None if f is None else round(f.auc, 4),
                     "scoring s": round(res.seconds, 3), "ablation": res.ablation, "metric": res.metric,
                     "prompts": res.n_prompts, "selection": None if f is None else f.selection,
                     "metric intact": None if f is None else round(f.metric_full, 4),
                     "metric ablated": None if f is None else round(f.metric_empty, 4)})
    return pd.DataFrame(rows)


def curve_note(curves: dict[str, Any], tolerance: float = 0.05, ablations: dict[str, str] | None = None) -> str | None:
    """One note on faithfulness curves that go below zero or fall as the circuit grows, with what usually
    causes it; None when every curve is non-negative and (within ``tolerance``) rising. ``ablations``: the
    ablation each method's curve was computed under; advice to use corrupt ablation is given only where it
    was not (unknown: given)."""
    negative = [m for m, f in curves.items() if min(f.normalized, default=0.0) < 0]
    falling = [m for m, f in curves.items()
               if any(b < a - tolerance for a, b in zip(f.normalized, f.normalized[1:], strict=False))]
    if not negative and not falling:
        return None
    said = []
    if negative:
        ks = sorted({k for m in negative for k, v in zip(curves[m].k, curves[m].normalized, strict=False) if v < 0})
        said.append(f"{', '.join(negative)} scored below zero (at k = {', '.join(map(str, ks[:6]))}"
                    f"{', ...' if len(ks) > 6 else ''}): there the circuit alone gives the metric a value further "
                    "from the full model's than ablating every edge does")
    if falling:
        said.append(f"{', '.join(falling)} fell as edges were added (non-monotone)")
    f = curves[(negative or falling)[0]]
    gap = f.metric_full - f.metric_empty
    used = {(ablations or {}).get(m) for m in negative or falling}
    causes = []
    if "mean" in used or None in used:
        causes.append("mean ablation puts the edges outside the circuit off the model's distribution (their mean "
                      "over positions is no input the model ever saw): try corrupt ablation with a counterfactual")
    elif "zero" in used:
        causes.append("zero ablation puts the edges outside the circuit off the model's distribution (a zero "
                      "input is none the model ever saw): try corrupt ablation with a counterfactual")
    if gap <= 0 or abs(gap) < 0.1 * max(abs(f.metric_full), 1e-9):
        causes.append(f"the empty circuit already scores the metric as well as the full model (metric ablated "
                      f"{f.metric_empty:+.3f} vs intact {f.metric_full:+.3f}): the normalised score divides by "
                      "that small or negative gap, so it swings or flips sign")
    else:
        causes.append(f"edges of opposite sign enter the circuit: an edge that pushes against the target lowers "
                      f"the score until its partners join (metric ablated {f.metric_empty:+.3f}, intact "
                      f"{f.metric_full:+.3f})")
    return ("; ".join(said) + ". Usually: " + "; or ".join(causes) + ".")


def edges_table(drawn: dict[str, list[dict[str, Any]]]):
    import pandas as pd

    return pd.DataFrame([{"method": m, **e} for m, edges in drawn.items() for e in edges],
                        columns=["method", "src", "dst", "score"])


def _dla(loaded: Any, row: dict[str, Any]):
    """Direct logit attribution of every component on one prompt (attribution.dla), kept per prompt."""
    from attribution.dla import direct_logit_attribution

    sig = (loaded.name, repr(row))
    held = st.session_state.get("_circ_dla")
    if not held or held[0] != sig:
        with loaded.lock:
            got = C.attempt("Cannot compute the direct logit effects", direct_logit_attribution, loaded.model,
                            row["prompt"], row["target"], row.get("foil"))
        if got is None:
            return None
        held = (sig, got)
        st.session_state["_circ_dla"] = held
    return held[1]


def show_node(loaded: Any, graphs: dict[str, Any], node: str, row: dict[str, Any], key: str = "circ_node") -> None:
    """The drill-down of ``node`` on the first prompt: pattern (heads), then graph_view's inspector with its
    direct logit effect and its edges in each method's circuit."""
    from app.graph_view import inspect_node

    head = re.fullmatch(r"L(\d+)\.H(\d+)", node)
    mlp = re.fullmatch(r"L(\d+)\.mlp", node)
    left, right = st.columns([1, 1])
    with right:
        inspect_node(graphs, node, key, extra=lambda _: _direct_effect(loaded, row, node, head, mlp))
    with left:
        if head:
            layer, h = int(head[1]), int(head[2])
            hv = C.attempt("Cannot read the head", R.head_view, loaded, row["prompt"], layer, h,
                           row["target"], row.get("foil"))
            if hv is not None:
                skip = V.first_token_toggle("circ_pattern_skip0")
                st.plotly_chart(V.pattern_heatmap(hv.pattern, hv.tokens, f"{node} attention pattern (first prompt)",
                                                  skip_first=skip), key="circ_pattern")
        elif mlp:
            st.caption("An MLP has no attention pattern: its direct logit effect and edges are on the right.")
        elif node.startswith("⊕ "):
            st.caption(f"{C.esc(node[2:])} is a supernode: its members' edges are summed on the right.")
        else:
            st.caption(f"{C.esc(node)} is the graph's {'input' if node == 'embed' else 'output'}: its edges are on the "
                       "right.")


def _direct_effect(loaded: Any, row: dict[str, Any], node: str, head: Any, mlp: Any) -> None:
    """A head's or MLP's direct logit effect on the first prompt, as a metric."""
    if not (head or mlp):
        return
    dla = _dla(loaded, row)
    value = None if dla is None else dla.head(int(head[1]), int(head[2])) if head else dla.component(f"L{mlp[1]}.mlp")
    if value is not None:
        what = "logit(target) − logit(foil)" if row.get("foil") is not None else "logit(target)"
        st.metric(f"{C.esc(node)} direct logit effect", f"{value:+.3f}",
                  help=f"Its write at the last position, through the final norm (frozen), onto {what}; "
                       f"all components together give {dla.logit_diff:+.3f} on this prompt.")


def prompt_circuit(loaded: Any, prompt: str, target: str, foil: str | None, key: str) -> bool:
    """One prompt's DPA circuit (the Attribution page's information flow), with a k slider and an optional
    counterfactual; widgets are keyed ``{key}_k`` and ``{key}_corrupt``, the chart ``key``. Returns whether
    the circuit was scored on this run (a new prompt), not just drawn again."""
    from app.graph_view import LEGEND_HELP, clicked, show_subgraph

    c1, c2 = st.columns([3, 2])
    corrupt = c1.text_input("Counterfactual prompt (optional, same number of tokens)", key=f"{key}_corrupt",
                            help="Edges are then scored against this run (corrupt ablation); without it, "
                                 "against zero.")
    k = c2.slider("Edges drawn (at most)", 5, 100, 30, 5, key=f"{key}_k",
                  help="The strongest circuit from the input to the logits that fits in this many edges: grown "
                       "from the logits by |score| until one more edge would pass the cap, so the graph is "
                       "never empty and never a tangle. Weak edges are drawn thin and faint.")
    row = {"prompt": prompt, "target": target, **({"foil": foil} if foil else {}),
           **({"corrupt": corrupt} if corrupt.strip() else {})}
    sig, held, scored = (loaded.name, repr(row)), st.session_state.get(f"_{key}_circuit"), False
    if not held or held[0] != sig:
        if C.engine("circuits.discover", "circuit discovery") is None:
            return False
        from circuits.discover import circuit

        def trace() -> Any:
            with loaded.lock:
                return C.attempt("Cannot trace the circuit", circuit, loaded.model, [row], method="dpa",
                                 ablation="corrupt" if "corrupt" in row else "zero", evaluate=False,
                                 selection="greedy", edges=k)

        res = SH.shared(("prompt_circuit", *sig), trace)  # scores do not depend on k: any session's will do
        if res is None:
            return False
        held, scored = (sig, res), True
        st.session_state[f"_{key}_circuit"] = held  # only the latest prompt
    res = held[1]
    edges, facts = SH.shared(("prompt_circuit_edges", *sig, k), lambda: connected_edges(res, k))
    sub = res.subgraph(edges=edges)
    names = {n.id for n in sub.nodes}
    # The chart's own selection is lost when the figure changes (the clicked node is drawn larger), so the
    # node is held in the session: a new click replaces it.
    picked = clicked(key)
    if picked != st.session_state.get(f"_{key}_seen"):
        st.session_state[f"_{key}_seen"] = picked
        if picked is not None:
            st.session_state[f"_{key}_node"] = picked
    node = st.session_state.get(f"_{key}_node")
    from app import graph_interact as GI

    GI.enter(key, sub.key, lineage=sig)  # this prompt's graph: its supernodes before the click is read
    view = GI.controls(key, sub, current=node if node in names or node in GI.supernode_ids(key) else None,
                       lineage=sig)
    pruned, drawn = view.apply(sub)
    names = {n.id for n in drawn.nodes}
    fig = GI.circuit_figure(pruned, drawn, f"DPA circuit: {len(edges)} of {res.graph.n_edges:,} edges "
                            f"({res.ablation} ablation)", selected=node if node in names else None,
                            pinned=view.annotations.pinned, top=GI.top_logits(loaded, prompt), target=target)
    show_subgraph(drawn, key=key, figure=fig)
    st.caption(GI.caption(view, sub, pruned, drawn))
    fits = f"within {k} edges" if len(edges) <= k else f"({len(edges)} edges: none smaller fits in {k})"
    st.caption(f"The strongest connected circuit {fits} (grown from the logits over the "
               f"{facts['grown']:,} strongest reachable edges): it holds {facts['share']:.1%} of the |score| of "
               f"all {res.graph.n_edges:,} edges. " + LEGEND_HELP
               + " Open the Circuits page for other methods, prompt sets and faithfulness.")
    if not edges:
        st.caption("No edge path connects the input to the logits on this prompt.")
    if node in names:  # the clicked node's drill-down: pattern, direct logit effect, its edges
        st.markdown(f"**{C.esc(node)}** (the clicked node; click another to inspect it)")
        show_node(loaded, {"dpa": drawn}, node, row, key=f"{key}_node")
    return scored
