"""Long circuit discovery on the Circuits page (a real model, many prompts) runs as a job outside the app.

A method on a big graph (a real model), or whose measured estimate (one masked forward of the loaded model,
circuits.discover.estimate) is over app/jobs_view.py's THRESHOLD_S, gets a start button instead of running
here; its job's stored run is read back into the page's results, so a later session, or the app after a
restart, opens the same circuit at once. Quick discovery (the toy models) stays in the page.
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


def discover_spec(model: str, rows: list[dict], method: str, params: dict, ablation: str,
                  selection: str) -> dict[str, Any]:
    return {"kind": "circuit_discover", "model": model, "rows": rows, "method": method, "params": params,
            "edges": EDGES, "ablation": ablation, "metric": None, "selection": selection, "evaluate": True,
            "grid": None, "batch_size": 16}


def seconds(loaded: Any, graph: Any, prepared: Any, method: str, params: dict, key: tuple) -> float | None:
    """The measured estimate of discovery and its faithfulness curve, once per session and ``key`` (the
    page's cache key: model, prompts, ablation, method, parameters)."""
    from circuits.discover import estimate
    from circuits.evaluate import DEFAULT_GRID

    held = st.session_state.setdefault("_circ_seconds", {})
    if key not in held:
        with loaded.lock:
            held[key] = C.attempt(f"Cannot estimate {method}", estimate, loaded.model, graph, prepared, method,
                                  params, grid=DEFAULT_GRID)
    return held[key]


def _from_run(run_id: str) -> Any:
    from circuits.discover import CircuitResult

    return CircuitResult.from_run(C.store().get(run_id))


def run_as_jobs(loaded: Any, rows: list[dict], todo: dict[str, dict], keys: dict[str, tuple], ablation: str,
                selection: str, graph: Any, prepared: Any) -> dict[str, dict]:
    """Each method of ``todo`` whose discovery is long: its finished job's result joins the page's results
    (``_circ_cache``), a running one shows its live panel, else a start button with the estimate. Returns
    the methods quick enough to run here."""
    cache = st.session_state.setdefault("_circ_cache", {})
    here = {}
    for method, params in todo.items():
        spec = discover_spec(loaded.name, rows, method, params, ablation, selection)
        key = f"_circ_job_{method}"
        job = J.held_job(spec, key)
        if job is not None and job.state == "done" and job.run_id:
            res = C.attempt(f"Cannot read the {method} circuit run", _from_run, job.run_id)
            if res is not None:
                cache[keys[method]] = res
                continue
        if job is None:
            big = graph.n_edges > BIG_GRAPH
            secs = None if big else seconds(loaded, graph, prepared, method, params, keys[method])
            if not big and (secs is None or secs <= J.THRESHOLD_S):
                here[method] = params
                continue
            cost = f"about {secs:.0f} s here (measured now)" if secs is not None else f"{graph.n_edges:,} edges"
            st.warning(f"{method} on {len(rows)} prompts: {cost}. It runs as a job outside this app, so every page "
                       "stays usable; its circuit is stored as a run.")
        elif job.state in ("queued", "running"):
            J.live_panel(job.id, f"circ_job_{method}")  # the page reruns once when it ends
            continue
        else:  # failed or cancelled: say why, then offer it again
            J.panel(job.id, f"circ_job_{method}")
        if J.start_button(spec, key, f"Run {method} as a job") is not None:
            st.rerun()
    return here
