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
if not rows:
    if rows is not None:
        st.info("No benchmark runs yet: `workbench bench circuits --model smollm2-135m` makes one.")
    st.stop()
ids = [r["id"] for r in rows]
if "bench_run" not in st.session_state and st.query_params.get("run") in ids:  # ?run=ID opens it
    st.session_state["bench_run"] = st.query_params["run"]
by_id = {r["id"]: r for r in rows}
run_id = st.selectbox("Benchmark run", ids, key="bench_run",
                      format_func=lambda i: f"{i} · {by_id[i].get('model') or ''} · {BV.shape_of(C.store(), i)}")
run = C.open_run(run_id)
if run is not None:
    BV.show_leaderboard(run, "bench")
