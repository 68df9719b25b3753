"""Runs: browse, filter and open any saved run (from the CLI or the app), and compare two runs.

Fast with a big store: the listing is read once per change of the store folder, per-run details only for the
rows shown (a page of them), a run is drawn as its page shows it (app/run_views.py) with its tensors behind a
toggle, and ``?run=ID`` opens one directly."""

from __future__ import annotations

import json
import os
from typing import Any

import streamlit as st

from app import common as C
from app import run_views as RV
from app import shared as SH


def compare(a: Any, b: Any) -> None:
    """Side by side: arguments and summary numbers, with the differences first."""
    import pandas as pd

    rows = []
    for section in ("args", "summary", "timings"):
        da, db = a.meta.get(section) or {}, b.meta.get(section) or {}
        for k in sorted(set(da) | set(db)):
            va, vb = da.get(k), db.get(k)
            row = {"field": f"{section}.{k}", "A": str(va), "B": str(vb), "same": va == vb}
            if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool):
                row["B - A"] = vb - va
            rows.append(row)
    for k in ("kind", "model", "method"):
        rows.insert(
            0,
            {
                "field": k,
                "A": str(a.meta.get(k)),
                "B": str(b.meta.get(k)),
                "same": a.meta.get(k) == b.meta.get(k),
            },
        )
    frame = pd.DataFrame(rows).sort_values("same", kind="stable")
    st.dataframe(frame, hide_index=True)
    if a.meta.get("kind") == b.meta.get("kind") == "circuit":
        RV.compare_circuits(a, b)
        return
    ta, tb = (
        C.attempt("Cannot read tensors of A", a.tensors) or {},
        C.attempt("Cannot read tensors of B", b.tensors) or {},
    )
    shared = [k for k in ta if k in tb]
    if a.meta.get("kind") != b.meta.get("kind") or (a.meta.get("args") or {}).get("level") != (
            b.meta.get("args") or {}).get("level"):
        st.warning("A and B are different kinds or levels: their tensors do not measure the same thing.")
    if shared:
        name = st.selectbox("Compare tensor", shared, key="runs_cmp_tensor")
        c1, c2 = st.columns(2)
        for col, t, tag in ((c1, ta, "A"), (c2, tb, "B")):
            fig = RV.tensor_figure(f"{tag}: {name}", t[name])
            if fig is not None:
                col.plotly_chart(fig, key=f"runs_cmp_{tag}")
        if ta[name].shape == tb[name].shape:
            diff = (tb[name].float() - ta[name].float()).abs().max().item()
            st.metric(f"max |B - A| on {C.esc(name)}", f"{diff:.4g}")


def details(store: Any, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per run: level, prompt (or data set; a circuit's first prompt) and target, so runs saved in the same
    second tell apart in the list; read once per run and session, and only for the rows shown."""
    held = st.session_state.setdefault("_runs_details", {})
    for r in rows:
        if r["id"] not in held:  # a run never changes once stored: described once per server
            held[r["id"]] = SH.shared(("run_details", str(store.root), r["id"]), lambda r=r: describe(store, r["id"]))
    return held


def describe(store: Any, run_id: str) -> dict[str, Any]:
    try:
        return RV.describe(store.get(run_id))
    except Exception:  # noqa: BLE001 - a run removed meanwhile: nothing to show
        return {"level": None, "prompt": None, "target": None, "foil": None, "counterfactual": None,
                "ablation": None}


@st.cache_data(show_spinner=False, max_entries=4)
def listing(root: str, names: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(sound runs, damaged entries) of the store, read again only when its entries change (a run saved or
    removed); ``names`` is the key (the folder's mtime changes on every read: the index's journal)."""
    from core.store import RunStore

    del names  # the cache key only
    store = RunStore(root)
    return store.list(), store.damaged()


def entry_names(root: Any) -> tuple[str, ...]:
    """The store folder's run entries (names only: cheap for thousands of runs)."""
    try:
        return tuple(sorted(n for n in os.listdir(root) if not n.startswith(".") and not n.startswith("index")))
    except OSError:
        return ()


def like_pair(rows: list[dict[str, Any]], info: dict[str, dict[str, Any]]) -> tuple[int, int]:
    """Default (A, B) for Compare: B the newest run, A the newest older run of the same kind and level (an
    edge tensor is never paired with a token tensor by default); else the two newest."""
    b = rows[0]
    key = (b["kind"], info.get(b["id"], {}).get("level"))
    for i, r in enumerate(rows[1:], start=1):
        if (r["kind"], info.get(r["id"], {}).get("level")) == key:
            return i, 0
    return 1, 0


def _delete(run_id: str) -> None:
    try:
        C.store().remove(run_id)
    except Exception as exc:
        st.session_state["runs_rm_error"] = str(exc)
    st.session_state["runs_id"] = ""
    st.session_state["runs_pick"] = ""


def _import() -> None:
    """Store the uploaded circuit-tracer / Neuronpedia graph JSON as a feature-graph run and open it (in the
    click callback, so the listing below already holds it)."""
    import tempfile
    from pathlib import Path

    from circuits.importer import import_graph_json

    upload = st.session_state.get("runs_import_file")
    if upload is None:
        st.session_state["runs_import_msg"] = ("error", "Choose a graph JSON file first.")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / (Path(upload.name).name or "graph.json")
        path.write_bytes(upload.getvalue())
        try:
            run = import_graph_json(path, C.store())
        except Exception as exc:  # noqa: BLE001 - a refused file is one message, the page stays
            st.session_state["runs_import_msg"] = ("error", f"Not imported: {C.esc(exc)}")
            return
    st.session_state["runs_import_msg"] = ("ok", f"Imported {C.esc(upload.name)} as run {C.esc(run.id)}.")
    st.session_state["_runs_open"] = run.id


PAGE = 25  # rows listed (and described) at a time

st.title("Runs")
st.caption("Everything saved by the CLI, the notebook API and this app, in one store.")
store = C.store()
st.caption(f"Store: {C.code(store.root)}")
got = C.attempt("Cannot read the run store", listing, str(store.root), entry_names(store.root))
if got is None:
    st.stop()
rows, damaged = got
if not rows:
    st.info(
        "No runs yet. Save a result from any page, or run e.g. `workbench attribute … ` on the command line."
    )
if "runs_id" not in st.session_state and st.query_params.get("run"):  # ?run=ID opens it
    st.session_state["runs_id"] = st.query_params["run"]
if opened := st.session_state.pop("_runs_open", None):  # "Open result" on the Jobs page or a job panel
    st.session_state["runs_id"] = opened

c1, c2, c3 = st.columns(3)
kinds = sorted({r["kind"] or "" for r in rows})
models = sorted({r["model"] or "" for r in rows})
kind = c1.selectbox("Kind", ["(all)"] + kinds, key="runs_kind")
model = c2.selectbox("Model", ["(all)"] + models, key="runs_model")
text = c3.text_input("Search id / method", key="runs_text")
shown = [
    r
    for r in rows
    if (kind == "(all)" or r["kind"] == kind)
    and (model == "(all)" or r["model"] == model)
    and (not text or text.lower() in (r["id"] + " " + (r["method"] or "")).lower())
]
pages = max(1, -(-len(shown) // PAGE))
page = 1
if pages > 1:
    page = int(st.number_input(f"Page (of {pages}, {PAGE} runs each)", 1, pages, 1, key="runs_page"))
visible = shown[(page - 1) * PAGE: page * PAGE]
info = details(store, visible)
st.dataframe(
    [{"id": r["id"], "created": r["created"], "kind": r["kind"], "model": r["model"], "method": r["method"],
      **info.get(r["id"], {}), "summary": json.dumps(r["summary"])} for r in visible],
    hide_index=True,
    column_config={"prompt": st.column_config.TextColumn("prompt", help="the prompt (or data set) the run used"),
                   "counterfactual": st.column_config.TextColumn(
                       "counterfactual", help="the reference prompt of corrupt ablation (none: mean or zero)")},
    column_order=["id", "created", "kind", "model", "method", "prompt", "target", "foil", "counterfactual",
                  "ablation", "level", "summary"],
)
if damaged:  # skipped by the listing above; named here so they can be removed
    st.warning(f"{len(damaged)} damaged run(s) skipped (unreadable or malformed meta.json, or a symlink): "
               "remove one with `workbench runs rm ID`.")
    with st.expander("Damaged runs", expanded=False):
        st.dataframe(damaged, hide_index=True)

with st.expander("Import a graph made elsewhere (circuit-tracer / Neuronpedia graph JSON)"):
    st.caption("A graph JSON as circuit-tracer's create_graph_files or Neuronpedia writes it, for any model (one "
               "the workbench cannot load too); it is stored as a feature-graph run and opens here and on the "
               "Feature graph page. Command line: `workbench import graph-json FILE`.")
    st.file_uploader("Graph JSON", type=["json"], key="runs_import_file")
    st.button("Import", key="runs_import_go", on_click=_import)
    if msg := st.session_state.pop("runs_import_msg", None):
        (st.success if msg[0] == "ok" else st.error)(C.esc(msg[1]))

if st.session_state.get("runs_rm_error"):
    st.error(f"Cannot delete: {C.esc(st.session_state.pop('runs_rm_error'))}")
tab_open, tab_cmp = st.tabs(["Open", "Compare two runs"])
with tab_open:
    typed = st.text_input("Run id (or pick below)", key="runs_id")
    ids = [r["id"] for r in shown]
    picked = st.selectbox("Run", [""] + ids, key="runs_pick", format_func=lambda i: i or "—")
    run_id = (typed or picked or "").strip()
    if run_id:
        run = C.open_run(run_id)
        if run is not None:
            RV.show_run(run, "runs_open")
            st.button("Delete this run", key="runs_rm", on_click=_delete, args=(run.id,))
with tab_cmp:
    ids = [r["id"] for r in shown]
    if len(ids) < 2:
        st.info("Two runs are needed to compare.")
    else:
        cmp_info = details(store, shown[:PAGE])  # like_pair looks for a like run among the recent ones
        a_i, b_i = like_pair(shown[:PAGE], cmp_info)
        label = lambda i: f"{i} · {shown[ids.index(i)]['kind']} · {cmp_info.get(i, {}).get('level') or ''}"  # noqa: E731
        a_id = st.selectbox("Run A", ids, index=a_i, key="runs_a", format_func=label)
        b_id = st.selectbox("Run B", ids, index=b_i, key="runs_b", format_func=label)
        # drawn when asked: two circuits' graphs and tensors are seconds of work on every render otherwise
        if st.toggle("Compare them", key="runs_cmp_on", value=bool(st.query_params.get("compare"))):
            a, b = C.open_run(a_id), C.open_run(b_id)
            if a is not None and b is not None:
                compare(a, b)
