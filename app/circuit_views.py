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
    strongest drawn |score|; a greedy circuit is pruned again so it stays connected embed -> logits."""
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


def subgraphs(results: dict[str, Any], drawn: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each method's drawn edges as a circuits.graph.Subgraph (what graph_view draws and inspects)."""
    return {m: results[m].subgraph(edges=edges) for m, edges in drawn.items()}


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


def edges_table(drawn: dict[str, list[dict[str, Any]]]):
    import pandas as pd

    return pd.DataFrame([{"method": m, **e} for m, edges in drawn.items() for e in edges],
                        columns=["method", "src", "dst", "score"])


def _dla(loaded: Any, row: dict[str, Any]):
    """Direct logit attribution of every component on one prompt (circuits.tools.dla), kept per prompt."""
    from circuits.tools.dla import direct_logit_attribution

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
        else:
            st.caption(f"{C.esc(node)} is the graph's {'input' if node == 'embed' else 'output'}: its edges are on the "
                       "right.")


def _direct_effect(loaded: Any, row: dict[str, Any], node: str, head: Any, mlp: Any) -> None:
    """A head's or MLP's direct logit effect on the first prompt, as a metric."""
    if not (head or mlp):
        return
    dla = _dla(loaded, row)
    label = f"L{head[1]}H{head[2]}" if head else f"L{mlp[1]}mlp"
    if dla is not None and label in dla.labels:
        what = "logit(target) − logit(foil)" if row.get("foil") is not None else "logit(target)"
        st.metric(f"{C.esc(node)} direct logit effect", f"{float(dla.values[dla.labels.index(label)]):+.3f}",
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
    k = c2.slider("Edges kept (k)", 5, 300, 40, 5, key=f"{key}_k")
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
    edges = circuit_edges(res, k, "greedy")
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
    show_subgraph(sub, key=key, selected=node if node in names else None,
                  title=f"DPA circuit: {len(edges)} of {res.graph.n_edges:,} edges ({res.ablation} ablation)")
    st.caption(LEGEND_HELP + " Open the Circuits page for other methods, prompt sets and faithfulness.")
    if not edges:
        st.caption("No edge connects the input to the logits at this k: raise k.")
    if node in names:  # the clicked node's drill-down: pattern, direct logit effect, its edges
        st.markdown(f"**{C.esc(node)}** (the clicked node; click another to inspect it)")
        show_node(loaded, {"dpa": sub}, node, row, key=f"{key}_node")
    return scored
