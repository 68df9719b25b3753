"""The Runs page's views of one stored run, drawn as the page that made it shows it, and of two circuits side by
side. Nothing heavy is drawn: a circuit is drawn as its top edges (never a plot of its scores over every
edge), other tensors are loaded behind a toggle.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from app import common as C
from app import views as V
from app.bench_view import show_leaderboard
from app.graph_view import LEGEND_HELP, inspect_clicked, show_subgraph
from app.graph_view import clicked as clicked_node

BIG = 5000  # tensors with more values than this are summarised, never drawn point by point


def describe(run: Any) -> dict[str, Any]:
    """Level, prompt (or data set), target, foil, counterfactual and ablation of a run, from its arguments; a
    circuit's from its first prompt, so runs of one prompt with different fields tell apart in the list."""
    args = run.meta.get("args") or {}
    prompt = args.get("prompt") or args.get("prompts") or args.get("dataset") or args.get("source")
    target, foil, corrupt = args.get("target"), args.get("foil"), args.get("corrupt") or args.get("corrupted")
    if run.meta.get("kind") == "circuit" and prompt is None:
        try:
            rows = run.rows("prompts.jsonl")
        except Exception:  # noqa: BLE001 - a damaged prompts file only costs these columns
            rows = []
        if rows:
            more = f" (+{len(rows) - 1} more)" if len(rows) > 1 else ""
            prompt = str(rows[0].get("prompt")) + more
            target, foil = rows[0].get("target"), rows[0].get("foil")
            corrupt = rows[0].get("corrupt")
            corrupt = None if corrupt is None else str(corrupt) + more
    ablation = args.get("ablation")

    def cut(v: Any) -> str | None:
        return None if v is None else str(v)[:80]

    return {"level": args.get("level") or args.get("site"), "prompt": cut(prompt), "target": cut(target),
            "foil": cut(foil), "counterfactual": cut(corrupt), "ablation": cut(ablation)}


def show_run(run: Any, prefix: str) -> None:
    """A run as its page shows it (attribution, circuit, feature graph, subgraph; other kinds: their stored
    figures and tables), then its arguments, raw result and tensors, collapsed."""
    meta = run.meta
    st.markdown(f"**{C.esc(run.id)}** · kind {C.code(run.kind)} · model {C.code(meta.get('model'))} · method "
                f"{C.code(meta.get('method'))}")
    info = describe(run)
    if info["prompt"] is not None:
        st.caption(f"prompt {C.quoted(info['prompt'])}"
                   + (f" · target {C.quoted(info['target'])}" if info["target"] else ""))
    drawn = {"attribute": _attribution, "circuit": _circuit, "feature-graph": _feature_graph,
             "subgraph": _subgraph, "bench": _bench}.get(run.kind)
    try:
        shown = drawn is not None and drawn(run, prefix)
    except Exception as exc:  # noqa: BLE001 - an older or partial run: its stored figures instead
        st.caption(f"Not drawn as a {C.esc(run.kind)} run ({type(exc).__name__}: {C.esc(str(exc)[:200])}); its stored "
                   "figures:")
        shown = False
    if not shown:
        _figures(run, prefix)
    export_panel(run, prefix)
    for name in C.attempt("Cannot list the tables", run.tables) or []:
        frame = C.attempt(f"Cannot read table {name}", run.table, name)
        if frame is not None:
            st.markdown(f"Table {C.code(name)}")
            st.dataframe(frame.head(500), hide_index=True, key=f"{prefix}_table_{name}")
    st.caption(C.esc(run.path))
    with st.expander("Arguments, timings, versions"):
        st.json({k: meta.get(k) for k in ("args", "timings", "versions", "git_commit", "created")}, expanded=False)
    with st.expander("Raw result"):
        result = C.attempt("Cannot read result.json", run.result) or {}
        st.json({k: v for k, v in result.items() if len(json.dumps(v, default=str)) <= 4000}, expanded=False)
    if st.toggle("Load the tensors", key=f"{prefix}_tensors_on"):
        tensors(run, prefix)


def export_panel(run: Any, prefix: str) -> None:
    """Download the run in the formats its kind can go to (circuits.export): graph-json (circuit-tracer /
    Neuronpedia), mib (EAP-IG / MIB), csv or parquet; a kind no format holds says so."""
    from circuits.export import KIND_FORMATS

    formats = KIND_FORMATS.get(run.kind, ())
    if not formats:
        st.caption(f"Export: a {C.esc(run.kind or 'unknown')} run has no export format (graph-json, mib, csv and "
                   "parquet hold circuit, feature-graph, subgraph and attribute runs).")
        return
    c1, c2, c3 = st.columns([2, 2, 3])
    fmt = c1.selectbox("Export format", formats, key=f"{prefix}_export_fmt",
                       help="graph-json: circuit-tracer / Neuronpedia graph JSON; mib: EAP-IG / MIB graph JSON "
                            "(every edge scored, the circuit in_graph); csv / parquet: every scored edge or node.")
    table = "edges"
    if fmt in ("csv", "parquet") and run.kind != "attribute":
        table = c2.selectbox("Table", ["edges", "nodes"], key=f"{prefix}_export_table")
    held = st.session_state.get(f"{prefix}_export_data")
    if held is not None and held[0] != (run.id, fmt, table):
        held = None
    if held is None:
        if c3.button(f"Prepare {fmt}", key=f"{prefix}_export_go"):
            from circuits.runs import run_bytes

            with st.spinner(f"Writing {fmt}…"):
                got = C.attempt(f"Cannot export run {run.id} as {fmt}", run_bytes, run, fmt, table)
            if got is not None:
                st.session_state[f"{prefix}_export_data"] = held = ((run.id, fmt, table), *got)
    if held is not None:
        _, data, name = held
        mime = {"csv": "text/csv", "parquet": "application/octet-stream"}.get(fmt, "application/json")
        c3.download_button(f"Download {C.esc(name)} ({len(data) / 1e6:.2f} MB)", data, file_name=name, mime=mime,
                           key=f"{prefix}_export_dl")


def tensors(run: Any, prefix: str) -> None:
    got = C.attempt("Cannot read the tensors", run.tensors) or {}
    if not got:
        st.caption("No tensors.")
        return
    st.dataframe([{"tensor": k, "shape": str(tuple(v.shape)), "dtype": str(v.dtype)} for k, v in got.items()],
                 hide_index=True)
    pick = st.selectbox("Look at tensor", list(got), key=f"{prefix}_tensor")
    fig = tensor_figure(pick, got[pick])
    if fig is not None:
        st.plotly_chart(fig, key=f"{prefix}_tensor_fig")


def tensor_figure(name: str, t: Any):
    """V.tensor_figure, or a histogram of the values for a big tensor (123k edge scores as a bar chart took
    the browser seconds and showed nothing readable)."""
    import plotly.graph_objects as go

    if t.numel() <= BIG:
        return V.tensor_figure(name, t)
    fig = go.Figure(go.Histogram(x=t.detach().float().flatten().numpy(), nbinsx=80))
    fig.update_layout(title=f"{name} {tuple(t.shape)}: histogram of its {t.numel():,} values", height=320,
                      yaxis={"type": "log", "title": "count"}, margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def _figures(run: Any, prefix: str) -> None:
    import plotly.io as pio

    for i, file in enumerate(sorted(run.path.glob("*.plotly.json"))):
        fig = C.attempt(f"Cannot read figure {file.name}", pio.from_json, file.read_text())
        if fig is not None:
            st.plotly_chart(fig, key=f"{prefix}_fig_{i}")


def _attribution(run: Any, prefix: str) -> bool:
    from attribution.result import AttributionResult

    res = AttributionResult.from_json(run.result(), scores=run.tensors()["scores"])
    st.caption(f"{C.esc(res.level)} level · foil {C.quoted(res.foil)} · target logit {res.target_logit:+.3f}")
    st.plotly_chart(res.plot(), key=f"{prefix}_attr")
    st.dataframe(V.top_items(res.scores, res.axes, res.tokens), hide_index=True, key=f"{prefix}_attr_top")
    return True


def circuit_parts(run: Any) -> tuple[Any, dict[str, Any]]:
    """(subgraph, result) of a stored circuit: its top ``edges`` (as saved) from its scores, which is one
    small tensor read (a 123k-edge circuit: 0.5 MB); never drawn edge by edge."""
    from circuits.discover import CircuitResult

    res = CircuitResult.from_run(run)
    result = {"n_edges_total": res.graph.n_edges, "n_prompts": res.n_prompts, "ablation": res.ablation,
              "faithfulness": res.faithfulness.to_json() if res.faithfulness is not None else None}
    return res.subgraph(), result


def _circuit(run: Any, prefix: str) -> bool:
    from app import graph_interact as GI
    from circuits.plot import faithfulness_figure

    sub, result = circuit_parts(run)
    total = result.get("n_edges_total")
    # the Circuits page's controls, opened with what the run was saved with (its supernodes.json): its
    # supernodes, pins and threshold
    current = clicked_node(f"{prefix}_circuit")  # the last click (the chart's state), before the controls
    view = GI.controls(f"{prefix}_circ", sub, run=run, current=current)
    pruned, drawn = view.apply(sub)
    fig = GI.circuit_figure(pruned, drawn, f"{run.meta.get('method')} circuit: top {len(sub.edges)} of "
                                           f"{f'{total:,}' if isinstance(total, int) else '?'} edges "
                                           f"({result.get('n_prompts', '?')} prompts, {result.get('ablation')} "
                                           "ablation)", selected=current, pinned=view.annotations.pinned)
    show_subgraph(drawn, key=f"{prefix}_circuit", figure=fig)
    st.caption(GI.caption(view, sub, pruned, drawn) + " " + LEGEND_HELP)
    inspect_clicked(drawn, current, prefix)
    if result.get("faithfulness"):
        st.plotly_chart(faithfulness_figure({run.meta.get("method") or "circuit": result["faithfulness"]}),
                        key=f"{prefix}_faith")
    with st.expander(f"The {len(sub.edges)} edges"):
        st.dataframe(sub.table(), hide_index=True, key=f"{prefix}_edges")
    return True


def _bench(run: Any, prefix: str) -> bool:
    """A circuit benchmark run: its leaderboard, curves and cells' circuits (the Circuit benchmark page's view)."""
    return show_leaderboard(run, prefix)


def _feature_graph(run: Any, prefix: str) -> bool:
    from app import feature_view as FV
    from app import graph_interact as GI
    from circuits.subgraph import Subgraph

    graph = Subgraph.from_json(run.result())
    st.caption(FV.scores_caption(graph))
    if len(graph.nodes) > FV.BIG_NODES or len(graph.edges) > FV.BIG_EDGES:  # e.g. an imported graph: pruned to read
        c1, c2 = st.columns(2)
        per_row = c1.slider("Nodes per layer", 2, 24, 8, key=f"{prefix}_fg_per_row")
        n_edges = c2.slider("Edges kept", 5, 400, 120, key=f"{prefix}_fg_edges")
        st.caption(f"The stored graph has {len(graph.nodes):,} nodes and {len(graph.edges):,} edges; drawn: each "
                   "layer's most influential nodes and the strongest edges among them (export holds them all).")
        graph = FV.readable(graph, per_row, n_edges)
    # the Feature graph page's controls, opened with the run's saved supernodes, pins and threshold
    current = clicked_node(f"{prefix}_fg")  # the last click (the chart's state), before the controls
    labels = FV.all_labels(graph, full=True)
    view = GI.controls(f"{prefix}_fgc", graph, run=run, current=current,
                       explanations=FV.explanations(graph, labels))
    pruned, drawn = view.apply(graph)
    fig = GI.feature_figure(graph, drawn, labels, selected=current, pinned=view.annotations.pinned)
    show_subgraph(drawn, f"{prefix}_fg", figure=fig)
    st.caption(GI.caption(view, graph, pruned, drawn))
    inspect_clicked(drawn, current, prefix)
    st.dataframe(graph.node_table(), hide_index=True, key=f"{prefix}_fg_nodes")
    return True


def _subgraph(run: Any, prefix: str) -> bool:
    from circuits.runs import subgraph_of

    sub = subgraph_of(run)
    clicked = show_subgraph(sub, f"{prefix}_graph", title=f"{sub.provenance.method} {sub.provenance.source} on "
                                                           f"{sub.provenance.model}: {len(sub.edges)} edges")
    inspect_clicked(sub, clicked, prefix)
    st.dataframe(sub.table(), hide_index=True, key=f"{prefix}_graph_edges")
    return True


def compare_circuits(a: Any, b: Any) -> None:
    """Two stored circuits: their graphs side by side and how many edges they share."""
    import pandas as pd

    parts = {}
    for tag, run in (("A", a), ("B", b)):
        got = C.attempt(f"Cannot read circuit {tag}", circuit_parts, run)
        if got is None:
            return
        parts[tag] = got
    ea = {(e.source, e.dst): e.score for e in parts["A"][0].edges}
    eb = {(e.source, e.dst): e.score for e in parts["B"][0].edges}
    shared = ea.keys() & eb.keys()
    union = ea.keys() | eb.keys()
    c1, c2, c3 = st.columns(3)
    c1.metric("shared edges", f"{len(shared)}", help="Edges in both circuits' stored top edges.")
    c2.metric("edge overlap (Jaccard)", f"{len(shared) / max(len(union), 1):.2f}")
    c3.metric("A only / B only", f"{len(ea) - len(shared)} / {len(eb) - len(shared)}")
    left, right = st.columns(2)
    for col, tag, run in ((left, "A", a), (right, "B", b)):
        with col:
            sub = parts[tag][0]
            show_subgraph(sub, key=f"runs_cmp_graph_{tag}",
                          title=f"{tag}: {run.meta.get('method')} · {len(sub.edges)} edges")
    rows = [{"src": s, "dst": d, "in": "both" if (s, d) in shared else ("A" if (s, d) in ea else "B"),
             "score A": ea.get((s, d)), "score B": eb.get((s, d))} for s, d in union]
    order = {"both": 0, "A": 1, "B": 2}
    rows.sort(key=lambda r: (order[r["in"]], -max(abs(r["score A"] or 0), abs(r["score B"] or 0))))
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="runs_cmp_edges")
