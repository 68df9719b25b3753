"""Build the circuit benchmark's task files for one model: data/bench/<model>/<task>.jsonl.

    python scripts/build_bench_tasks.py [--model smollm2-135m] [--tasks ioi,facts,...] [--n 128] [--seed 0]

A task may carry its parameters (``ioi:counterfactual=abc`` writes ioi.abc.jsonl; plain ``ioi`` is MIB's
S2 -> IO flip and writes ioi.jsonl).

Each task's generator and filter live in circuits/bench/tasks.py (a row is kept when the model answers the
clean prompt top-1 and the counterfactual changes its answer); rows carry their split (train / validation /
test, 3/8, 1/8, 1/2). Files are written atomically; a task that keeps fewer than --n rows says so.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    from circuits.bench.tasks import TASKS, build, task_file_stem

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-candidates", type=int, default=8192)
    parser.add_argument("--out", default=str(ROOT / "data" / "bench"))
    args = parser.parse_args()

    import torch

    from core.models.zoo import load

    torch.set_num_threads(2)
    model = load(args.model)
    out = Path(args.out) / args.model
    out.mkdir(parents=True, exist_ok=True)
    for task in args.tasks.split(","):
        started = time.perf_counter()
        rows = build(model, task, n=args.n, seed=args.seed, fractions=(0.375, 0.125, 0.5),
                     max_candidates=args.max_candidates)
        fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would leave a data file only its builder can read
        os.replace(tmp, out / f"{task_file_stem(task)}.jsonl")
        counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "validation", "test")}
        print(f"{task}: {len(rows)} rows {counts} in {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
