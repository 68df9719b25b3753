"""Circuit benchmark: the leaderboard of a ``workbench bench circuits`` run (tasks x methods, MIB's CPR and CMD
with intervals, seconds), a task's curves, and any cell's circuit in the circuit view (app/bench_view.py).
``?run=ID`` opens a run."""

from __future__ import annotations

import streamlit as st

from app import bench_view as BV
from app import common as C

st.title("Circuit benchmark")
st.caption("Every circuit method on every task: circuits scored on the train split, judged on held-out prompts "
           "with MIB's CPR and CMD. Run one with `workbench bench circuits --model smollm2-135m --workers 2`.")
rows = C.attempt("Cannot read the run store", C.store().list, kind="bench")
shipped = C.attempt("Cannot read the shipped leaderboards", BV.shipped_results) or {}
if not rows and not shipped:
    if rows is not None:
        st.info("No benchmark runs yet: `workbench bench circuits --model smollm2-135m` makes one.")
    st.stop()
rows = rows or []
ids = [r["id"] for r in rows] + [BV.SHIPPED + name for name in shipped]  # new runs first, the shipped beside them
if "bench_run" not in st.session_state and st.query_params.get("run") in ids:  # ?run=ID opens it
    st.session_state["bench_run"] = st.query_params["run"]
by_id = {r["id"]: r for r in rows}


def _label(i: str) -> str:
    if i.startswith(BV.SHIPPED):
        return f"shipped · {i[len(BV.SHIPPED):]}"
    return f"{i} · {by_id[i].get('model') or ''} · {BV.shape_of(C.store(), i)}"


run_id = st.selectbox("Benchmark run", ids, key="bench_run", format_func=_label)
if run_id.startswith(BV.SHIPPED):
    BV.show_shipped(run_id[len(BV.SHIPPED):], "bench")
else:
    run = C.open_run(run_id)
    if run is not None:
        BV.show_leaderboard(run, "bench")
