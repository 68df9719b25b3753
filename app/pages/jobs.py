"""Jobs: long work (faithfulness, prompt sets, activation patching), in this server when short, else on Ray;
queued, running (progress and time left), done, failed, cancelled. Cancel, or open the result."""

from __future__ import annotations

import os

import streamlit as st

from app import common as C
from app import jobs_view as J
from core.paths import data_root

PROMPTS = data_root() / "prompts"
SHOWN = 25


def start_faithfulness() -> None:
    """The form: disrupt / recover curves of some methods over a prompt file, as a job."""
    from attribution.faithfulness import LEVELS
    from attribution.methods import METHODS

    with st.form("jobs_faith", enter_to_submit=False):  # Enter in a field must not start a job
        st.markdown("**Start a faithfulness job** (`workbench faithfulness` as a job)")
        c1, c2, c3 = st.columns(3)
        llms = [e.name for e in C.zoo(("llm", "toy"))]
        model = c1.selectbox("Model", llms, index=llms.index("smollm2-135m") if "smollm2-135m" in llms else 0,
                             key="jobs_model")
        files = sorted(p.relative_to(PROMPTS).as_posix() for p in PROMPTS.rglob("*.jsonl"))  # MODEL/*.jsonl too
        prompts = c2.selectbox("Prompt set", files, key="jobs_prompts")
        level = c3.selectbox("Items", list(LEVELS), key="jobs_level")
        c4, c5, c6 = st.columns([2, 1, 1])
        methods = c4.multiselect("Methods", list(METHODS), default=["dpa", "random"], key="jobs_methods")
        limit = c5.number_input("Prompts", 1, 500, 10, key="jobs_limit")
        workers = c6.number_input("Workers", 1, max(1, os.cpu_count() or 1), 1, key="jobs_workers",
                                  help="Ray workers, each holding the model once; the prompts are split among them.")
        if st.form_submit_button("Start job", type="primary"):
            if not methods:
                st.warning("Pick at least one method.")
                return
            from core.prompt_files import read_prompts
            from workbench.scheduler.specs import FaithfulnessSpec

            rows = C.attempt("Cannot read the prompt set", read_prompts, str(PROMPTS / prompts), int(limit))
            if rows is None:
                return
            # the spec `workbench faithfulness --prompts data/prompts/... --limit N` builds for the same work
            spec = C.attempt("Cannot start the job", FaithfulnessSpec, model=model, rows=rows,
                             prompts_file=f"data/prompts/{prompts}", limit=int(limit), methods=methods, level=level)
            found = None if spec is None else J.held_job(spec, "jobs_last")
            if found is not None and found.state in ("done", *J.ACTIVE):  # a command's, another session's
                st.session_state["jobs_last"] = found.id
                run = f", run {C.code(found.run_id)}" if found.run_id else ""
                st.info(f"The same work is {found.state} already: job {C.code(found.id)}{run} (below); not started "
                        "again.")
            elif spec is not None:
                J.submit(spec, "jobs_last", workers=int(workers))


def start_sleep() -> None:
    """A job that only waits, reporting each step: checks that jobs run here or on a cluster (progress,
    cancel, results) with no model. Shown when WORKBENCH_JOBS_DEMO=1 (the browser test uses it)."""
    with st.form("jobs_sleep", enter_to_submit=False):
        st.markdown("**Start a sleep job** (no model: checks progress, cancel and results)")
        c1, c2 = st.columns(2)
        seconds = c1.number_input("Seconds", 1, 3600, 60, key="jobs_sleep_seconds")
        steps = c2.number_input("Steps", 1, 10_000, 120, key="jobs_sleep_steps")
        if st.form_submit_button("Start sleep job"):
            from workbench.scheduler.specs import SleepSpec

            J.submit(SleepSpec(seconds=int(seconds), steps=int(steps)), "jobs_last")


st.title("Jobs")
address = os.environ.get("WORKBENCH_RAY_ADDRESS") or "a local Ray instance (started on demand)"
st.caption(f"Work estimated under about {J.local_limit():.0f} s runs as a job in this server, on the model it holds "
           "(the estimate comes first: an earlier job's cost, else one item measured on that model); longer work "
           f"runs on {C.esc(address)}, outside this server: pages stay usable, a job survives a page reload, and "
           "Cancel stops it within seconds. Results land in the run store."
           + ("" if os.environ.get("WORKBENCH_RAY_ADDRESS") else f" Memory: {J.RAY_FOOTPRINT} "
              "(results/app/ray_footprint.md)."))
if C.engine("attribution.faithfulness", "faithfulness") is not None:
    start_faithfulness()
if os.environ.get("WORKBENCH_JOBS_DEMO") == "1":
    start_sleep()


def job_list(polling: bool) -> None:
    jobs = C.attempt("Cannot read the jobs", J.board().list)
    if jobs is None:
        return
    if polling and not any(j.state in ("queued", "running") for j in jobs):
        st.rerun()  # the last active job ended: redraw once, and stop polling
    if not jobs:
        st.info("No jobs yet. Start one above, from a page's long work (activation patching on the Attribution "
                "page), or with `workbench faithfulness --workers 2 ...`.")
        return
    counts = {s: sum(j.state == s for j in jobs) for s in J.STATE_COLORS}
    st.caption(" · ".join(f"{J.badge(s)} {n}" for s, n in counts.items() if n))
    if st.session_state.get("_jobs_cancel_error"):
        st.warning(C.esc(st.session_state.pop("_jobs_cancel_error")))
    for job in jobs[:SHOWN]:
        J.panel(job.id, "jobs")


# Only while a job is active does the list refresh itself (a fragment: the form above is not redrawn).
active = any(j.state in ("queued", "running") for j in (C.attempt("Cannot read the jobs", J.board().list) or []))
st.fragment(job_list, run_every=J.POLL_S if active else None)(active)
