"""Execute notebooks/tour.ipynb (smollm2-135m, dinov2-small) with nbclient and write its outputs back.

    .venv/bin/python scripts/run_tour.py                  # runs in place, a fresh run store in a temp folder
    .venv/bin/python scripts/run_tour.py --notebook notebooks/quickstart.ipynb   # the other notebook
    .venv/bin/python scripts/run_tour.py --threads 2 --store ~/.workbench/runs --out /tmp/tour.ipynb

The notebook runs in a fresh kernel from the checkout's root; its runs and jobs go to a temporary run store
unless --store names one (the tour must not fill a user's store when it is only being checked). The output
notebook is written atomically, and only when every cell ran; on an error the failing cell and its error are
printed in one line each and the exit status is 1. Each code cell records the SHA-1 of the source it ran
(metadata "source_sha1"), so a cell edited after the run shows as stale. Per-cell times (nbclient's own timing
metadata) and the whole run's time are printed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "tour.ipynb"


def cell_seconds(cell) -> float | None:  # noqa: ANN001
    """Seconds nbclient measured for one executed cell (from its execution metadata)."""
    ex = cell.get("metadata", {}).get("execution", {})
    start, end = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
    if not start or not end:
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def source_sha1(source: str) -> str:
    """The fingerprint of a cell's source that its outputs were produced from."""
    return hashlib.sha1(source.encode("utf-8")).hexdigest()


def tidy_streams(cell) -> None:  # noqa: ANN001
    """Merge a cell's consecutive stream outputs of one name and keep each line's last carriage-return state,
    so a progress bar is stored as its final line, not as one output per redraw."""
    merged: list = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream" \
                and merged[-1].get("name") == out.get("name"):
            merged[-1]["text"] += out["text"]
        else:
            merged.append(out)
    for out in merged:
        if out.get("output_type") == "stream" and "\r" in out["text"]:
            out["text"] = "\n".join(line.rsplit("\r", 1)[-1] for line in out["text"].split("\n"))
    cell["outputs"] = merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notebook", type=Path, default=NOTEBOOK)
    ap.add_argument("--out", type=Path, default=None, help="where to write the executed notebook (default: in place)")
    ap.add_argument("--store", type=Path, default=None, help="run store for the tour's runs (default: a temp one)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads in the kernel (OMP_NUM_THREADS)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds one cell may take")
    args = ap.parse_args(argv)

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    out = args.out or args.notebook
    nb = nbformat.read(args.notebook, as_version=4)
    for cell in nb.cells:  # a clean start: outputs of an earlier run never survive into this one
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    tmp = tempfile.TemporaryDirectory(prefix="tour-store-")
    store = args.store.expanduser().resolve() if args.store else Path(tmp.name) / "runs"
    os.environ["WORKBENCH_RUNS"] = str(store)  # the kernel inherits this process's environment
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    started = time.perf_counter()
    client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        failed = [c for c in nb.cells if c.cell_type == "code"
                  and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
        where = failed[0].source.splitlines()[0] if failed else "?"
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        print(f"error: the tour failed in the cell starting {where!r}: {last}", file=sys.stderr)
        return 1
    finally:
        tmp.cleanup()
    total = time.perf_counter() - started
    for cell in nb.cells:
        if cell.cell_type == "code":
            tidy_streams(cell)
            # the source these outputs came from: tests/test_notebooks.py fails on a cell edited and never re-run
            cell.metadata["source_sha1"] = source_sha1(cell.source)
    part = out.with_name(f".{out.name}.part")
    nbformat.write(nb, part)
    part.replace(out)
    timed = [(cell_seconds(c), c.source.splitlines()[0]) for c in nb.cells if c.cell_type == "code"]
    for seconds, first in sorted((t for t in timed if t[0] is not None), reverse=True)[:8]:
        print(f"{seconds:7.1f} s  {first[:70]}")
    print(f"tour executed in {total:.0f} s ({len(timed)} code cells); wrote {out} "
          f"({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
