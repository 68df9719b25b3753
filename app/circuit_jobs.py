"""Circuit discovery on the Circuits page runs where it is cheapest, by its estimate (one masked forward of
the loaded model, circuits.discover.estimate, or earlier jobs' costs): up to about 10 s (smollm2's one-prompt
DPA circuit with its curve) in the page itself, no job, so a new prompt's circuit follows its fields; longer
work only after the Run button (and, over an hour, a second confirmation), as a job on Ray. Nothing starts by
itself, and a job whose fields were edited since it started is cancelled. A job's stored run is read back into
the page's results, so a later session, or the app after a restart, opens the same circuit at once.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import jobs_view as J

EDGES = 100  # the K a job's run records; the page draws its own k from the scores
# A graph this big (a real model: smollm2 has 123,211 edges) always runs as a job, unmeasured: one masked
# forward to measure it takes seconds itself (the job's estimate then comes from earlier jobs' costs).
BIG_GRAPH = 5000
MEASURE_ROWS = 4  # ... unless its prompts are this few: then one masked forward costs well under a second
CONFIRM_S = J.CONFIRM_S  # a job estimated longer than this needs a second, explicit confirmation
# One prompt, a method of a few passes, a model of this size or less: computed in the page with no estimate. On
# smollm2 the measured estimate (one edge-masked forward over 123,211 edges) costs more than the work: 8-16 s
# against ~3 s (DPA with its curve) under load, so a new prompt waited on its estimate.
QUICK_PASSES = 16.0
QUICK_BYTES = 2e9


def quick(loaded: Any, rows: list[dict], method: str, params: dict) -> bool:
    """Whether ``method`` on ``rows`` is one-prompt work cheap enough to compute in the page without measuring
    (see QUICK_PASSES)."""
    from circuits.edges import EDGE_METHODS

    spec = EDGE_METHODS.get(method)
    if len(rows) != 1 or spec is None or spec.exact or spec.passes(params, 1) > QUICK_PASSES or spec.per_layer:
        return False
    return C.model_bytes(loaded.model) <= QUICK_BYTES


def discover_spec(model: str, rows: list[dict], method: str, params: dict, ablation: str,
                  selection: str) -> Any:
    """The spec `workbench circuit discover` builds for the same work (so a command's circuit opens here)."""
    from workbench.scheduler.specs import CircuitDiscoverSpec

    return CircuitDiscoverSpec(model=model, rows=rows, method=method, params=params, edges=EDGES,
                               ablation=ablation, selection=selection)


def seconds(loaded: Any, graph: Any, prepared: Any, method: str, params: dict, key: tuple) -> float | None:
    """The measured estimate of discovery and its faithfulness curve, once per session and ``key`` (the
    page's cache key: model, prompts, ablation, method, parameters)."""
    from circuits.discover import estimate
    from circuits.evaluate import DEFAULT_GRID

    held = st.session_state.setdefault("_circ_seconds", {})
    if key not in held:
        with loaded.lock:
            secs = C.attempt(f"Cannot estimate {method}", estimate, loaded.model, graph, prepared, method,
                             params, grid=DEFAULT_GRID)
            if secs is not None and secs > J.local_limit():  # the first masked forward pays one-time costs
                secs = C.attempt(f"Cannot estimate {method}", estimate, loaded.model, graph, prepared, method,
                                 params, grid=DEFAULT_GRID)
            held[key] = secs
    return held[key]


def _from_run(run_id: str) -> Any:
    from circuits.discover import CircuitResult

    return CircuitResult.from_run(C.store().get(run_id))


def _estimate(loaded: Any, graph: Any, prepared: Any, rows: list[dict], method: str, params: dict, key: tuple,
              spec: Any) -> float | None:
    """Seconds the method's discovery and curve will take: measured now (one masked forward) unless the
    graph is big and the prompts many, else what earlier jobs of this shape measured, else None."""
    if graph.n_edges <= BIG_GRAPH or len(rows) <= MEASURE_ROWS:
        return seconds(loaded, graph, prepared, method, params, key)
    from workbench.scheduler.kinds import estimate

    try:
        cost = estimate(spec, 1, root=J.board().root, measure=False)
    except Exception:  # noqa: BLE001 - no estimate: it is offered as a job
        return None
    return None if cost is None else cost.seconds


def supersede(spec: Any, key: str) -> str | None:
    """Cancel the job this session started under ``key`` when it is still running for other work than ``spec``
    (a field was edited since): the id cancelled, else None."""
    from workbench.scheduler.board import spec_key

    held = st.session_state.get(key)
    if not held:
        return None
    try:
        job = J.board().get(held)
        if job.key == spec_key(spec) or job.state not in J.ACTIVE:
            return None
        J.board().request_cancel(held)
    except Exception:  # noqa: BLE001 - gone or finished meanwhile: nothing to cancel
        return None
    st.session_state.pop(key, None)
    return held


_hours = J.hours


def run_as_jobs(loaded: Any, rows: list[dict], todo: dict[str, dict], keys: dict[str, tuple], ablation: str,
                selection: str, graph: Any, prepared: Any) -> dict[str, dict]:
    """Each method of ``todo``, where it is cheapest. A finished job's stored circuit joins the page's
    results (``_circ_cache``: another session, or the app after a restart, opens it at once); a running
    job shows its live panel, and one this session started for fields edited since is cancelled. Otherwise by
    its estimate: up to the runner's local threshold (about 10 s) it is returned, to be computed in the page
    now (no job); longer, or unknown, methods share one Run button that starts them as jobs on Ray, and a job
    estimated over CONFIRM_S needs a second confirmation first. Nothing starts without a click."""
    cache = st.session_state.setdefault("_circ_cache", {})
    here: dict[str, dict] = {}
    offer: dict[str, tuple[Any, str, float | None]] = {}  # method -> (spec, session key, estimate)
    cancelled = []
    for method, params in todo.items():
        spec = discover_spec(loaded.name, rows, method, params, ablation, selection)
        key = f"_circ_job_{method}"
        if supersede(spec, key):
            cancelled.append(method)
        job = J.follow(spec, key, f"circ_job_{method}")  # the job widget: progress, or why it failed
        if job is not None and job.state == "done" and job.run_id:
            res = C.attempt(f"Cannot read the {method} circuit run", _from_run, job.run_id)
            if res is not None:
                cache[keys[method]] = res
                continue
        if job is not None and job.state in J.ACTIVE:
            continue  # its live panel reruns the page once when it ends
        if job is None and quick(loaded, rows, method, params):
            here[method] = params
            continue
        secs = _estimate(loaded, graph, prepared, rows, method, params, keys[method], spec)
        if job is None and secs is not None and secs <= J.local_limit():
            here[method] = params
            continue
        offer[method] = (spec, key, secs)  # a failed or cancelled job's panel (why) is shown above
    if cancelled:
        st.caption(f"Cancelled the {', '.join(cancelled)} job started for the fields before your edit.")
    if offer:
        costs = "; ".join(f"{m} on {len(rows)} prompts: " + (f"about {_hours(s)} here (estimated)" if s is not None
                          else f"{graph.n_edges:,} edges, not yet measured") for m, (_, _, s) in offer.items())
        st.warning(f"{costs}. It runs as a job outside this app, so every page stays usable; its circuit is "
                   "stored as a run. Nothing starts until you press the button.")
        longest = max((s for _, _, s in offer.values() if s is not None), default=0.0)
        sure = J.confirmed(longest, "circ_run_sure")
        if st.button(f"Run {', '.join(offer)} as a job{'s' if len(offer) > 1 else ''}", key="circ_run",
                     type="primary", disabled=not sure):
            if all(J.submit(spec, key, seconds=s) is not None for spec, key, s in offer.values()):
                st.session_state.pop("circ_run_sure", None)
                st.rerun()
    return here
