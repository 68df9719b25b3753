"""The Circuit benchmark page's render times on a stored bench run, with streamlit's AppTest (the script run,
no browser): cold (the first session of this process: imports and reading the run), warm (a new session once the
run was read), a rerun of the same session, and opening a cell's circuit (its edge scores read, its graph drawn).
The app's page-speed target is well under 3 s warm.

    .venv/bin/python scripts/measure_bench_page.py [--run ID] [--task T --method M --edges 50]

The run is the newest of kind ``bench`` in the store (``WORKBENCH_RUNS``) unless ``--run`` names one. torch is
imported before the first session unless ``--bare``: the app server holds it once any model page was served (the
default page is one); with ``--bare`` the first circuit opened pays for that import too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="", help="bench run id (default: the newest)")
    ap.add_argument("--task", default="", help="the cell to open (default: the run's first drawable cell)")
    ap.add_argument("--method", default="")
    ap.add_argument("--edges", type=int, default=50)
    ap.add_argument("--bare", action="store_true", help="do not import torch first")
    args = ap.parse_args()
    if not args.bare:
        import torch  # noqa: F401 - what a served app already holds

    from app.testing import open_page, problems
    from core.store import RunStore

    store = RunStore()
    runs = store.list(kind="bench")
    run_id = args.run or (runs[0]["id"] if runs else "")
    if not run_id:
        sys.exit("no bench run in the store: run `workbench bench circuits` first")
    cells = store.get(run_id).result().get("cells") or []
    out: dict[str, object] = {"run": run_id, "cells_with_scores": len(cells)}
    out["cold_s"], at = timed(lambda: open_page("benchmark", {"bench_run": run_id}))
    out["problems"] = problems(at)
    out["warm_s"], at = timed(lambda: open_page("benchmark", {"bench_run": run_id}))
    out["rerun_s"], _ = timed(at.run)
    task = args.task or (cells[0]["task"] if cells else "")
    method = args.method or (cells[0]["method"] if cells else "")
    if task and method:
        at.selectbox(key="bench_cell_task").set_value(task).run()
        at.selectbox(key="bench_cell_method").set_value(method).run()
        at.number_input(key="bench_cell_k").set_value(args.edges).run()
        out["open_circuit_s"], at = timed(at.button(key="bench_open").click().run)
        out["open_circuit_again_s"], _ = timed(at.run)
        out["cell"] = f"{task} x {method}, top {args.edges} edges"
        out["problems"] = out["problems"] + problems(at)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
