"""Jobs in the app: long work runs as a job, placed by its estimate (made first): under the runner's threshold
(about 10 s) in a thread of this server on the model it holds, else on Ray (outside this server process), so
the page, and every other session, stays usable. One widget shows a job (progress, time left, cancel, open the
result); the Jobs page lists them all, and pages that start long work show theirs inline.

Each widget that polls is an ``st.fragment(run_every=...)``: only it reruns while its job is active.
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from app import common as C

POLL_S = 1.0
# A job's state as coloured text: emoji render as empty boxes where the browser has no emoji font (offline).
STATE_COLORS = {"queued": "gray", "running": "blue", "done": "green", "failed": "red", "cancelled": "orange"}


def badge(state: str) -> str:
    """The state as Streamlit markdown: bold and coloured (no emoji, no font fetched from outside)."""
    return f":{STATE_COLORS.get(state, 'gray')}[**{state}**]"


def board():
    from workbench.scheduler import JobBoard

    return JobBoard(C.store().root / ".jobs")


def lent_models(spec: Any) -> dict[str, tuple[Any, Any]]:
    """The spec's model when this server already holds it, with its lock: a job that runs in this process
    (see workbench/scheduler/runner.py placement) uses it instead of loading a copy."""
    name = getattr(spec, "model", None) if not isinstance(spec, dict) else spec.get("model")
    if not isinstance(name, str) or name not in C.HELD:
        return {}
    try:
        loaded = C.load_cached(name)  # cached: held models are never loaded again here
    except Exception:  # noqa: BLE001 - the job then loads its own
        return {}
    return {name: (loaded.model, loaded.lock)}


def estimate_here(spec: Any, workers: int = 1) -> tuple[float, str] | None:
    """(seconds, text) of ``spec`` on this machine, once per session and work: what an earlier job of its
    shape measured, else, when this server already holds its model, one item measured now on that model (the
    kind's ``measure``, under the model's lock); None when neither is possible (its model is not loaded here
    and no job of its shape has run)."""
    from workbench.scheduler.board import spec_key
    from workbench.scheduler.kinds import JobEstimate, estimate, get_kind, lend
    from workbench.scheduler.specs import as_dict

    memo = st.session_state.setdefault("_job_estimates", {})
    sig = (spec_key(spec), workers)
    if sig not in memo:
        models = lent_models(spec)
        try:
            with lend(models):
                cost = estimate(spec, workers, root=board().root, measure=bool(models))
                plain = as_dict(spec)
                kind = get_kind(plain.get("kind", ""))
                if cost is None and models and hasattr(kind, "measure_lent"):
                    per_item = kind.measure_lent(plain)
                    if per_item is not None:
                        cost = JobEstimate(items=int(kind.items(plain)), seconds_per_item=float(per_item),
                                           parallel=len(kind.shards(plain, workers)),
                                           source="measured now on the model this server holds")
        except Exception:  # noqa: BLE001 - no estimate is no reason not to run
            cost = None
        memo[sig] = None if cost is None else (cost.seconds, cost.text())
        while len(memo) > 32:
            memo.pop(next(iter(memo)))
    return memo[sig]


def submit(spec: Any, key: str, workers: int = 1, seconds: float | None = None) -> Any | None:
    """Start ``spec`` as a job, remembered under ``key`` in this session so the page shows it inline. Estimate
    first (``seconds`` the page measured, else ``estimate_here``): under the runner's threshold (about 10 s)
    it runs in a thread of this server on its loaded model, else on the warm local Ray instance (or
    WORKBENCH_RAY_ADDRESS). None (after a message) when it cannot start."""
    import workbench.scheduler

    if seconds is None and workers == 1:
        got = estimate_here(spec, workers)
        seconds = None if got is None else got[0]
    job = C.attempt("Cannot start the job", workbench.scheduler.submit, spec, workers=workers, board=board(),
                    models=lent_models(spec), seconds=seconds, warm_owner=os.getpid())  # the warm Ray instance
    if job is not None:
        st.session_state[key] = job.id
    return job


def _cancel(job_id: str) -> None:
    try:
        board().request_cancel(job_id)
    except Exception as exc:  # finished meanwhile: the panel says so on its next refresh
        st.session_state["_jobs_cancel_error"] = str(exc)


def _open(run_id: str) -> None:
    # handed over under a key of its own: the Runs page assigns it to its field in its own script run, since a
    # widget value set by another page's run can stay blank in the browser when that run is cut short by the
    # page switch (streamlit/streamlit#7338)
    st.session_state["_runs_open"] = run_id


def panel(job_id: str, key: str) -> Any | None:
    """One job: state, progress with items and time left, error and log, Cancel and Open result buttons."""
    try:
        job = board().get(job_id)
    except Exception as exc:
        C.error("Cannot read the job", exc)
        return None
    with st.container(border=True):
        st.markdown(f"{badge(job.state)} · {C.esc(job.label)} · {C.code(job.id)}")
        if job.state in ("queued", "running"):
            left = f" · about {job.eta_s:.0f} s left" if job.eta_s is not None else ""
            items = f"{job.done:,} / {job.total:,} items" if job.total else "starting workers"
            if not job.total and job.estimate_s is not None:
                items += f" · estimated {job.estimate_s:.0f} s in all"
            st.progress(job.fraction, text=f"{100 * job.fraction:.0f}% · {items}{left}")
            st.button("Cancel", key=f"{key}_cancel_{job.id}", on_click=_cancel, args=(job.id,))
        elif job.state == "done":
            st.caption(f"finished {C.esc(job.finished)} · run {C.code(job.run_id)}")
            if job.run_id and st.button("Open result", key=f"{key}_open_{job.id}", on_click=_open,
                                        args=(job.run_id,)):
                st.switch_page("pages/runs.py")
        else:
            (st.error if job.state == "failed" else st.info)(job.error or job.state)
        if job.log and job.state != "done":
            with st.expander("Log"):
                st.code("\n".join(job.log[-30:]), language="text")
    return job


def live_panel(job_id: str, key: str) -> None:
    """``panel`` that refreshes itself every POLL_S while the job is active (the rest of the page does not);
    when the job ends, the whole page reruns once to show its result, and the polling stops."""
    try:
        active = board().get(job_id).state in ("queued", "running")
    except Exception:
        active = False

    def _live() -> None:
        job = panel(job_id, key)
        if active and job is not None and job.state not in ("queued", "running"):
            st.rerun()

    st.fragment(_live, run_every=POLL_S if active else None)()


# -- the one job widget of a page's long work ------------------------------------------------------------
THRESHOLD_S = 3.0  # work estimated above this runs as a job, after the user confirms
# What the warm local Ray instance holds, measured on this 2-core machine (results/app/ray_footprint.md): its own
# processes idle, then a model's worker that keeps the model loaded for the next job.
RAY_FOOTPRINT = ("a warm local Ray instance: about 0.6 GB in 8 processes of its own, plus about 1.2 GB for each "
                 "model it keeps loaded for the next job (smollm2-135m); it ends after 10 min without a job")


CONFIRM_S = 3600.0  # a job estimated longer than this needs a second, explicit confirmation


def hours(secs: float) -> str:
    """A duration as a person reads it: 5.6 h, 10 min, 42 s."""
    return f"{secs / 3600:.1f} h" if secs >= 3600 else f"{secs / 60:.0f} min" if secs >= 120 else f"{secs:.0f} s"


def confirmed(seconds: float | None, key: str) -> bool:
    """The second confirmation of a job estimated over CONFIRM_S: a checkbox naming its hours (under ``key``);
    True when ticked, or when the job is not that long (or has no estimate: nothing to name)."""
    if seconds is None or seconds <= CONFIRM_S:
        return True
    return st.checkbox(f"Yes, start a job of about {hours(seconds)}", key=key,
                       help="A job estimated over an hour needs this second confirmation.")


def local_limit() -> float:
    """The runner's threshold for work in this server's process (about 10 s; more on a busy machine)."""
    from workbench.scheduler.runner import local_seconds

    return local_seconds()
ACTIVE = ("queued", "running")


def held_job(spec: Any, key: str) -> Any | None:
    """The job to show for ``spec`` (a JobSpec): the one this session started under ``key`` for this very
    work, else the newest finished job that any session (or a command) ran for the same work (the same
    normalised key) and whose run is still stored, so a new session, or the app after a restart, opens the
    result at once; else one that another session is running for it."""
    from workbench.scheduler.board import spec_key

    want = spec_key(spec)
    held = st.session_state.get(key)
    if held:
        try:
            job = board().get(held)
            if job.key == want:
                return job
        except Exception:
            pass
    try:  # a stored result first; else another session's job for this very work, shown, not started twice
        done = board().latest_done(spec, store=C.store())
        if done is not None:
            return done
        running = [j for j in board().list() if j.key == want and j.state in ACTIVE]
        return running[0] if running else None
    except Exception:
        return None


def follow(spec: Any, key: str, widget: str) -> Any | None:
    """The job for ``spec`` (see ``held_job``), shown as it needs: queued or running, its live panel
    (progress, time left, Cancel; the page reruns once when it ends); failed or cancelled, its panel (why);
    done, nothing (the page shows the result from its run). None: never run."""
    job = held_job(spec, key)
    if job is not None and job.state in ACTIVE:
        live_panel(job.id, widget)
    elif job is not None and job.state != "done":
        panel(job.id, widget)
    return job


def start_button(spec: Any, key: str, label: str, workers: int = 1, estimate: tuple[float, str] | None = None,
                 button: str | None = None) -> Any | None:
    """The Run button of a page's long work. It shows the job's estimate (``estimate``: (seconds, text) the
    page measured; else items x the per-item seconds an earlier job of the same shape measured here); above
    THRESHOLD_S the estimate is a warning and the button names it, so pressing it is the confirmation (over
    CONFIRM_S a second one, ``confirmed``, comes first). Starts
    ``spec`` as a job (remembered under ``key``) and returns it; None when not pressed or it could not start."""
    if estimate is None:
        estimate = estimate_here(spec, workers)
    if estimate is not None and estimate[0] > THRESHOLD_S:
        where = (f"Under about {local_limit():.0f} s it runs as a job in this server, on the model it holds"
                 if estimate[0] <= local_limit() else
                 f"It runs as a job on Ray, outside this app ({RAY_FOOTPRINT})")
        st.warning(f"Estimate: {C.esc(estimate[1])}. {where}, so every page stays usable; follow it here or on "
                   "the Jobs page.")
        label = f"{label} (about {C.esc(estimate[1].rsplit('about ', 1)[-1])})"
    elif estimate is not None:
        st.caption(f"Estimate: {C.esc(estimate[1])}.")
    else:
        st.caption("No estimate yet (no job of this shape has run here and its model is not loaded in this "
                   f"server): it runs on Ray ({RAY_FOOTPRINT}); later jobs of its shape are placed by this one's "
                   "measured cost.")
    button = button or f"{key}_start"
    sure = confirmed(None if estimate is None else estimate[0], f"{button}_sure")  # over an hour: asked twice
    if not st.button(label, key=button, type="primary", disabled=not sure):
        return None
    st.session_state.pop(f"{button}_sure", None)  # the next long job is asked again
    return submit(spec, key, workers=workers, seconds=None if estimate is None else estimate[0])


def job_result(spec: Any, key: str, widget: str, label: str, read: Any, note: str | None = None,
               estimate: tuple[float, str] | None = None, button: str | None = None) -> tuple[Any, Any]:
    """Start, progress, cancel, result and failure of one job on a page: (job, ``read(run_id)``) once a job
    for this work is done (this session's, another's, or a command's); else (job or None, None) after its
    live panel, or after why it failed, ``note`` and the start button (the page reruns when it starts)."""
    job = follow(spec, key, widget)
    if job is not None and job.state == "done" and job.run_id:
        got = C.attempt("Cannot read the job's result", read, job.run_id)
        if got is not None:
            return job, got
    if job is not None and job.state in ACTIVE:
        return job, None
    if note:
        st.caption(note)
    if start_button(spec, key, label, estimate=estimate, button=button) is not None:
        st.rerun()
    return job, None


# -- long attribution levels on the Attribution page -------------------------------------------------


def slow_levels(loaded: Any, enc: Any, method: str, levels: tuple[str, ...]) -> dict[str, Any]:
    """The levels of ``method`` whose measured estimate is over THRESHOLD_S: {level: Estimate}."""
    from attribution.cost import SLOW_METHODS, estimate

    if method not in SLOW_METHODS:
        return {}
    out = {}
    for level in levels:
        with loaded.lock:
            cost = C.attempt(f"Cannot estimate {method} at the {level} level", estimate, loaded.model, enc, method,
                             level)
        if cost is not None and cost.seconds > THRESHOLD_S:
            out[level] = cost
    return out


def level_jobs(loaded: Any, prompt: str, target: str, foil: str | None, method: str, slow: dict[str, Any],
               position: int | None) -> dict[tuple[str, str], Any]:
    """For each slow level: its estimate and a button that starts it as a job (the confirmation), then the
    job's live panel; a finished job's result, read back from its run, joins the page's results. A job that
    any session (or ``workbench attribute``) finished for the same prompt and level opens at once; a failed or
    cancelled one can be started again. One worker: the server keeps the other core for the sessions' own
    work."""
    from workbench.scheduler.specs import AttributeSpec

    results: dict[tuple[str, str], Any] = {}
    for level, cost in slow.items():
        spec = AttributeSpec(model=loaded.name, prompt=prompt, target=target, foil=foil, method=method, level=level,
                             position=position, n_items=cost.items)
        _, got = job_result(spec, f"_attr_job_{level}", f"attr_job_{level}", f"Run {method} · {level} as a job",
                            _attribution_from_run, estimate=(cost.seconds, cost.text()),
                            button=f"attr_job_go_{level}")
        if got is not None:
            results[(method, level)] = got
    return results


def _attribution_from_run(run_id: str) -> Any:
    from attribution.result import AttributionResult

    run = C.store().get(run_id)
    return AttributionResult.from_json(run.result(), scores=run.tensors()["scores"])
