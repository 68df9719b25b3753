"""Runs: browse, filter and open any saved run (from the CLI or the app), and compare two runs."""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from app import common as C
from app import views as V


def show_run(run: Any, prefix: str) -> None:
    """Everything a run holds: metadata, result, tables, stored figures, tensors."""
    meta = run.meta
    st.markdown(
        f"**{run.id}** · kind `{run.kind}` · model `{meta.get('model')}` · method `{meta.get('method')}`"
    )
    st.caption(f"{run.path}")
    with st.expander("Arguments, timings, versions", expanded=False):
        st.json({k: meta.get(k) for k in ("args", "timings", "versions", "git_commit", "created")})
    result = C.attempt("Cannot read result.json", run.result)
    if result:
        with st.expander("Result", expanded=True):
            small = {
                k: v for k, v in result.items() if not (isinstance(v, list) and len(json.dumps(v)) > 4000)
            }
            st.json(small)
    tables = C.attempt("Cannot list the tables", run.tables) or []
    for name in tables:
        frame = C.attempt(f"Cannot read table {name}", run.table, name)
        if frame is not None:
            st.markdown(f"Table `{name}`")
            st.dataframe(frame.head(500), hide_index=True)
    for i, file in enumerate(sorted(run.path.glob("*.plotly.json"))):
        import plotly.io as pio

        fig = C.attempt(f"Cannot read figure {file.name}", pio.from_json, file.read_text())
        if fig is not None:
            st.plotly_chart(fig, key=f"{prefix}_fig_{i}")
    tensors = C.attempt("Cannot read the tensors", run.tensors) or {}
    if tensors:
        st.dataframe(
            [{"tensor": k, "shape": str(tuple(v.shape)), "dtype": str(v.dtype)} for k, v in tensors.items()],
            hide_index=True,
        )
        pick = st.selectbox("Look at tensor", list(tensors), key=f"{prefix}_tensor")
        fig = V.tensor_figure(pick, tensors[pick])
        if fig is not None:
            st.plotly_chart(fig, key=f"{prefix}_tensor_fig")


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
            fig = V.tensor_figure(f"{tag}: {name}", t[name])
            if fig is not None:
                col.plotly_chart(fig, key=f"runs_cmp_{tag}")
        if ta[name].shape == tb[name].shape:
            diff = (tb[name].float() - ta[name].float()).abs().max().item()
            st.metric(f"max |B - A| on {name}", f"{diff:.4g}")


def details(store: Any, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per run: level, prompt (or data set) and target from its arguments, so runs saved in the same second
    tell apart in the list (meta.json is read once per run and session)."""
    held = st.session_state.setdefault("_runs_details", {})
    for r in rows:
        if r["id"] not in held:
            try:
                args = store.get(r["id"]).meta.get("args") or {}
            except Exception:  # noqa: BLE001 - a run removed meanwhile: nothing to show
                args = {}
            prompt = args.get("prompt") or args.get("prompts") or args.get("dataset") or args.get("source")
            held[r["id"]] = {"level": args.get("level") or args.get("site"), "prompt": None if prompt is None
                             else str(prompt)[:80], "target": args.get("target")}
    return held


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


st.title("Runs")
st.caption("Everything saved by the CLI, the notebook API and this app, in one store.")
store = C.store()
st.caption(f"Store: `{store.root}`")
rows = C.attempt("Cannot read the run store", store.list)
if rows is None:
    st.stop()
if not rows:
    st.info(
        "No runs yet. Save a result from any page, or run e.g. `workbench attribute … ` on the command line."
    )

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
info = details(store, shown)
st.dataframe(
    [{"id": r["id"], "created": r["created"], "kind": r["kind"], "model": r["model"], "method": r["method"],
      **info.get(r["id"], {}), "summary": json.dumps(r["summary"])} for r in shown],
    hide_index=True,
    column_config={"prompt": st.column_config.TextColumn("prompt", help="the prompt (or data set) the run used")},
)
damaged = C.attempt("Cannot read the run store", store.damaged) or []
if damaged:  # skipped by the listing above; named here so they can be removed
    st.warning(f"{len(damaged)} damaged run(s) skipped (unreadable or malformed meta.json, or a symlink): "
               "remove one with `workbench runs rm ID`.")
    with st.expander("Damaged runs", expanded=False):
        st.dataframe(damaged, hide_index=True)

if st.session_state.get("runs_rm_error"):
    st.error(f"Cannot delete: {st.session_state.pop('runs_rm_error')}")
tab_open, tab_cmp = st.tabs(["Open", "Compare two runs"])
with tab_open:
    typed = st.text_input("Run id (or pick below)", key="runs_id")
    ids = [r["id"] for r in shown]
    picked = st.selectbox("Run", [""] + ids, key="runs_pick", format_func=lambda i: i or "—")
    run_id = (typed or picked or "").strip()
    if run_id:
        run = C.open_run(run_id)
        if run is not None:
            show_run(run, "runs_open")
            st.button("Delete this run", key="runs_rm", on_click=_delete, args=(run.id,))
with tab_cmp:
    ids = [r["id"] for r in shown]
    if len(ids) < 2:
        st.info("Two runs are needed to compare.")
    else:
        a_i, b_i = like_pair(shown, info)
        label = lambda i: f"{i} · {shown[ids.index(i)]['kind']} · {info.get(i, {}).get('level') or ''}"  # noqa: E731
        a_id = st.selectbox("Run A", ids, index=a_i, key="runs_a", format_func=label)
        b_id = st.selectbox("Run B", ids, index=b_i, key="runs_b", format_func=label)
        a, b = C.open_run(a_id), C.open_run(b_id)
        if a is not None and b is not None:
            compare(a, b)
