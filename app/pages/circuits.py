"""Circuits: which edges between heads, MLPs, the input and the logits carry the model's answer."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import streamlit as st

from app import circuit_inputs as CI
from app import circuit_jobs as CJ
from app import circuit_views as CV
from app import common as C
from app import graph_interact as GI
from app import share as S
from app.graph_view import LEGEND_HELP, follow_click, show_subgraph

CACHE_SIZE = 8  # circuit results per session (scores are one float per edge: 0.5 MB on smollm2)
NONE = "—"


def show_saved() -> None:
    with st.expander("Open a saved circuit"):
        run = C.run_picker("circuit", key="circ_open")
        if run is None:
            return
        res = C.attempt(f"Cannot read run {run.id}", CircuitResult.from_run, run)
        if res is None:
            return
        st.caption(f"{C.esc(res.model)} · {C.esc(res.method)} · {res.n_prompts} prompts · {C.esc(res.ablation)} "
                   f"ablation · {C.esc(res.selection)} selection · top {res.edges} edges")
        sub = res.subgraph()
        current = st.session_state.get("_circ_saved_graph_node")
        view = GI.controls("circ_saved", sub, run=run, current=current)  # the run's own state, kept with it
        pruned, drawn = view.apply(sub)
        fig = GI.circuit_figure(pruned, drawn, f"saved {res.method} circuit", selected=current,
                                pinned=view.annotations.pinned)
        picked = show_subgraph(drawn, key="circ_saved_graph", figure=fig)
        if picked is not None and picked != current:
            st.session_state["_circ_saved_graph_node"] = picked
            st.rerun()
        st.caption(GI.caption(view, sub, pruned, drawn))
        if res.faithfulness is not None:
            st.plotly_chart(res.plot_faithfulness(), key="circ_saved_faith")
            note = CV.curve_note({res.method: res.faithfulness}, ablations={res.method: res.ablation})
            if note:
                st.info(note)
        st.dataframe(res.table(), hide_index=True)


def cache_key(loaded: Any, rows: list[dict], ablation: str, method: str, params: dict) -> tuple:
    return (loaded.name, json.dumps(rows, sort_keys=True), ablation, method, json.dumps(params, sort_keys=True))


def run_methods(loaded: Any, rows: list[dict], jobs: dict[str, dict], ablation: str, k: int, selection: str,
                evaluate: bool = True) -> None:
    """Score (and evaluate) each method's circuit; results land in the session's cache. Without ``evaluate``
    the curve is left for later in the page (``curves_due``), so the graph is drawn first."""
    cache = st.session_state.setdefault("_circ_cache", {})
    with C.Progress(f"Circuits on {len(rows)} prompts", len(jobs)) as prog, loaded.lock:
        for method, params in jobs.items():
            res = prog.attempt(f"{method} failed", circuit, loaded.model, rows, method=method, edges=k,
                               ablation=ablation, selection=selection, evaluate=evaluate, **params)
            prog.step(f"{method} done")
            if res is not None:
                cache[cache_key(loaded, rows, ablation, method, params)] = res
    while len(cache) > CACHE_SIZE:
        cache.pop(next(iter(cache)))


def patching_sample(graph: Any, prepared: Any, loaded: Any) -> dict | None:
    """On a big graph, activation patching only on a sample of edges, after its cost is estimated."""
    with st.expander(f"Activation patching: {graph.n_edges:,} edges are too many to patch one by one here"):
        st.caption(f"Path patching runs one forward per edge. Above {PATCHING_LIMIT_EDGES:,} edges it is "
                   "offered on a random sample of edges (the others score 0); estimate the cost first.")
        n = int(st.number_input("Edges to patch", 0, PATCHING_LIMIT_EDGES, 0, step=100, key="circ_ap_n"))
        if not n:
            return None
        params = get_method("activation_patching").check_params({"sample": n})
        sig = (loaded.name, prepared.n_prompts, n)
        if st.button("Estimate the cost", key="circ_ap_estimate"):
            with loaded.lock:
                secs = C.attempt("Cannot estimate", estimate, loaded.model, graph, prepared, "activation_patching",
                                 params)
            if secs is not None:
                st.session_state["_circ_ap_estimate"] = (sig, secs)
        held = st.session_state.get("_circ_ap_estimate")
        if not held or held[0] != sig:
            return None
        st.info(f"Patching {n:,} edges on {prepared.n_prompts} prompts takes about {held[1]:.0f} s here.")
        if st.checkbox("Include sampled activation patching in the run", key="circ_ap_on"):
            return params
    return None


def evaluate_all(loaded: Any, results: dict[str, Any], k: int, ablation: str, selection: str) -> None:
    grid = sorted(set(DEFAULT_GRID) | {k})
    with C.Progress(f"Evaluating at k={k} ({ablation} ablation)", len(results)) as prog, loaded.lock:
        for method, res in results.items():
            curve = prog.attempt(f"Evaluating {method} failed", res.evaluate, loaded.model, grid, ablation,
                                 selection)
            prog.step(method)
            if curve is not None:  # which ablation this curve is under (the note's advice depends on it)
                st.session_state.setdefault("_circ_curve_ablation", {})[method] = (id(curve), ablation)


def curves_due(loaded: Any, results: dict[str, Any], keys: dict[str, tuple]) -> None:
    """The faithfulness curves left for after the graph (one-prompt work scored in the page), computed now at
    the grid discovery uses, on the result's own ablation and selection."""
    due = st.session_state.setdefault("_circ_curve_due", set())
    todo = {m: r for m, r in results.items() if keys[m] in due and r.faithfulness is None}
    if not todo:
        return
    with C.Progress("Faithfulness curve", len(todo)) as prog, loaded.lock:
        for method, res in todo.items():
            prog.attempt(f"Evaluating {method} failed", res.evaluate, loaded.model, DEFAULT_GRID, res.ablation,
                         res.selection)
            prog.step(method)
    due.difference_update(keys[m] for m in todo)


def curve_ablations(results: dict[str, Any]) -> dict[str, str]:
    """The ablation each method's curve was computed under: the evaluation's where it made that curve,
    otherwise the result's own."""
    under = st.session_state.get("_circ_curve_ablation", {})
    return {m: under[m][1] if m in under and under[m][0] == id(r.faithfulness) else r.ablation
            for m, r in results.items()}


def faithfulness_at(res: Any, k: int) -> float | None:
    f = res.faithfulness
    return f.normalized[f.k.index(k)] if f is not None and k in f.k else None


# -- the page ------------------------------------------------------------------------------------------
st.title("Circuits")
st.caption("Score every edge between the input, heads, MLPs and the logits, keep the strongest, and check "
           "how much of the model's answer that circuit alone recovers.")
if C.engine("circuits.discover", "circuit discovery") is None:
    st.stop()
from circuits.counterfactual import prepare  # noqa: E402
from circuits.discover import PATCHING_LIMIT_EDGES, CircuitResult, circuit, estimate, methods  # noqa: E402
from circuits.edges import EDGE_METHODS, get_method  # noqa: E402
from circuits.evaluate import DEFAULT_GRID  # noqa: E402
from circuits.graph import CircuitGraph  # noqa: E402
from circuits.plot import faithfulness_figure  # noqa: E402

show_saved()
CI.mark_typed(C.seed_from_query({"prompt": "circ_prompt", "target": "circ_target", "foil": "circ_foil",
                                 "corrupt": "circ_corrupt", "methods": "_circ_methods_q"}))
if "_circ_methods_q" in st.session_state:  # ?methods=dpa,eap
    st.session_state["circ_methods"] = [m for m in st.session_state.pop("_circ_methods_q").split(",") if m]
loaded = C.sidebar_model(("llm", "toy"), key="circ_model", default="smollm2-135m")
picked = CI.pick_prompts(loaded)
if picked is None:
    st.stop()
source, rows = picked
graph = CircuitGraph.of(loaded.model)

c1, c2, c3 = st.columns([3, 1.2, 1.5])
offered = [m for m, spec in EDGE_METHODS.items() if not spec.exact or graph.n_edges <= PATCHING_LIMIT_EDGES]
C.keep("circ_methods", ["dpa"])
st.session_state["circ_methods"] = [m for m in st.session_state["circ_methods"] if m in offered]
summaries = methods()
chosen = c1.multiselect("Methods", offered, key="circ_methods", on_change=C.remember("circ_methods"),
                        format_func=lambda m: EDGE_METHODS[m].title,
                        help="; ".join(f"{EDGE_METHODS[m].title}: {summaries[m]}" for m in offered))
ablations = ["corrupt", "mean", "zero"] if all(r.get("corrupt") is not None for r in rows) else ["mean", "zero"]
# Set, not deleted: a keyed selectbox keeps its identity when its options change, so the browser would go on
# showing a value no longer offered; a value set here is sent to it. Corrupt without a counterfactual: mean.
if st.session_state.get("circ_ablation") not in ablations:
    st.session_state["circ_ablation"] = ablations[0] if "circ_ablation" not in st.session_state else "mean"
ablation = c2.selectbox("Ablation", ablations, key="circ_ablation",
                        help="What an edge outside the circuit carries instead: the counterfactual run's value, "
                             "the mean over the prompts' positions, or zero.")
greedy = c3.toggle("Connected circuit", value=True, key="circ_greedy",
                   help="Grow the circuit from the logits (greedy) so it is one graph from the input to the "
                        "logits; off: the top-k edges by |score| wherever they are.")
selection = "greedy" if greedy else "topk"
prepared = C.attempt("Bad prompts", prepare, loaded.model, rows, ablation)
if prepared is None:
    st.stop()

jobs = {m: {} for m in chosen}
if graph.n_edges > PATCHING_LIMIT_EDGES:
    sampled = patching_sample(graph, prepared, loaded)
    if sampled is not None:
        jobs["activation_patching"] = sampled
if not jobs:
    st.info("Pick at least one method.")
    st.stop()

c4, c5 = st.columns([3, 2])
top_k = min(graph.n_edges, 1000)
k = c4.slider("Edges kept (k)", 1, top_k, min(50, max(1, graph.n_edges // 2)), key="circ_k")
threshold = c5.slider("Hide edges under this fraction of the strongest", 0.0, 1.0, 0.0, 0.01, key="circ_thr")
keys = {m: cache_key(loaded, rows, ablation, m, p) for m, p in jobs.items()}
cache = st.session_state.setdefault("_circ_cache", {})
todo = {m: p for m, p in jobs.items() if keys[m] not in cache}
# Work up to ~10 s (a one-prompt circuit on a small model always) is computed now, in the page; longer work only
# behind the Run button, as jobs on Ray (app/circuit_jobs.py). The default prompt's circuit is drawn on open.
todo = CJ.run_as_jobs(loaded, rows, todo, keys, ablation, selection, graph, prepared)
if todo:  # in the page: the graph first, its faithfulness curve below it once the graph is drawn
    st.session_state.setdefault("_circ_curve_due", set()).update(keys[m] for m in todo)
    run_methods(loaded, rows, todo, ablation, k, selection, evaluate=False)
results = {m: cache[keys[m]] for m in jobs if keys[m] in cache}
if not results:
    st.caption(f"{graph.n_edges:,} edges, {len(rows)} prompts ({C.esc(source)}, {prepared.metric}, {ablation} "
               "ablation): "
               "the circuit is drawn here when its job ends.")
    st.stop()

drawn = {m: CV.circuit_edges(res, k, selection, threshold) for m, res in results.items()}
subs = CV.subgraphs(results, drawn, k, selection)
graph_keys = [f"circ_graph_{m}" for m in results]
# pins, supernodes, the pruning threshold and the selected node (app/graph_interact.py) belong to this graph:
# its identity is the drawn circuit's Subgraph.key (every method's, k and selection; not the hide slider), so a
# new prompt starts clean; another k of the same results carries them over (the lineage).
union = CV.union(subs)
identity = CV.identity(results, subs, k, selection, threshold)
lineage = (loaded.name, json.dumps(rows, sort_keys=True), ablation, tuple(results))
got, switched = GI.enter("circ", identity, lineage=lineage)
if switched or "circ_node" not in st.session_state:
    st.session_state["circ_node"] = got.node or NONE
follow_click(graph_keys, "circ_node", [NONE] + [n.id for n in union.nodes] + GI.supernode_ids("circ"))
held_node = st.session_state["circ_node"]
view = GI.controls("circ", union, current=None if held_node == NONE else held_node, identity=identity,
                   lineage=lineage)
shown_subs = {m: view.apply(sub) for m, sub in subs.items()}
shown = {n.id for _, sub in shown_subs.values() for n in sub.nodes}
options = [NONE] + [n.name for n in graph.nodes if n.name in shown] + sorted(i for i in shown if i.startswith("⊕ "))
if st.session_state["circ_node"] not in options:  # pruned away or grouped: nothing to inspect
    st.session_state["circ_node"] = NONE
selected = None if st.session_state["circ_node"] == NONE else st.session_state["circ_node"]
got.node = selected
top = GI.top_logits(loaded, rows[0]["prompt"]) if len(rows) == 1 else []
panes = st.columns(len(results)) if len(results) <= 2 else st.tabs(list(results))
for pane, method, key in zip(panes, results, graph_keys, strict=True):
    with pane:
        edges = drawn[method]
        pruned, shown_sub = shown_subs[method]
        fig = GI.circuit_figure(pruned, shown_sub, f"{method}: {len(edges)} of {graph.n_edges:,} edges (k={k}, "
                                f"{selection})", selected=selected, pinned=view.annotations.pinned, top=top,
                                target=rows[0].get("target"))
        show_subgraph(shown_sub, key=key, figure=fig)
        st.caption(GI.caption(view, subs[method], pruned, shown_sub))
        if not edges:
            st.caption("No edge of this circuit connects the input to the logits at this k: raise k.")
st.caption(LEGEND_HELP)
subs = {m: shown_subs[m][1] for m in subs}  # the inspector reads what is drawn (supernodes too)
node = st.selectbox("Inspect node (or click it in the graph)", options, key="circ_node")
if node != NONE:
    CV.show_node(loaded, subs, node, rows[0])

st.subheader("Faithfulness")
curves_due(loaded, results, keys)
e1, e2 = st.columns([1, 2])
# the evaluation's ablation follows the discovery's when that changes (the box shows the value it will use)
if st.session_state.get("circ_eval_ablation") not in ablations or st.session_state.get("_circ_eval_for") != ablation:
    st.session_state["circ_eval_ablation"] = ablation
st.session_state["_circ_eval_for"] = ablation
eval_ablation = e1.selectbox("Evaluate under ablation", ablations, key="circ_eval_ablation")
if e2.button(f"Evaluate circuit at k={k} ({selection})", key="circ_evaluate"):
    evaluate_all(loaded, results, k, eval_ablation, selection)
curves = {m: r.faithfulness for m, r in results.items() if r.faithfulness is not None}
if curves:
    st.plotly_chart(faithfulness_figure(curves), key="circ_faith")
    note = CV.curve_note(curves, ablations=curve_ablations(results))
    if note:
        st.info(note)
at_k = {m: faithfulness_at(r, k) for m, r in results.items()}
if any(v is not None for v in at_k.values()):
    st.caption(f"Normalized faithfulness at k={k}: " + " · ".join(
        f"{m} {v:.3f}" for m, v in at_k.items() if v is not None))
st.dataframe(CV.faith_table(results), hide_index=True, key="circ_faith_table")

S.share("circ", loaded.name,
        [f"rows = {rows!r}" if source == "prompt" else
         f"from circuits.toy.prompts import task_rows; rows = task_rows(m, {len(rows)})" if source.startswith("task:")
         else f"rows = {'data/prompts/' + source!r}  # the prompt file (first {len(rows)} rows)"]
        + [f"c_{m} = " + S.call("wb.circuit", S.M, S.Name("rows"), method=m, edges=k, ablation=ablation,
                               selection=selection, **jobs[m]) for m in results]
        + [f"c_{m}.plot()" for m in results],
        {"prompt": rows[0].get("prompt") if source == "prompt" else None,
         "target": rows[0].get("target") if source == "prompt" else None,
         "foil": rows[0].get("foil") if source == "prompt" else None,
         "corrupt": rows[0].get("corrupt") if source == "prompt" else None,
         "methods": list(results)})

st.subheader("Edges")
st.dataframe(CV.edges_table(drawn), hide_index=True, key="circ_edges")
for method, res in results.items():
    # saving writes this graph's pins and supernodes (and only its) into the run; the "Saved" line stays with it
    C.save_button(lambda res=res: replace(res, edges=k, selection=selection), key=f"circ_save_{method}",
                  label=f"Save the {method} circuit (k={k}) to the run store",
                  after=lambda run, identity=identity: GI.saved("circ", identity, run), scope=identity)
