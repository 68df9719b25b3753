"""What ``attribute`` costs on top of the bare method call (the method table's function alone).

    nice -n 19 .venv/bin/python scripts/bench_attribute_overhead.py [--model smollm2-135m] [--reps 7]

For gradient (token), integrated gradients (token, 20 steps) and DPA (token) on a few prompts: CPU seconds
(min over reps, jobs interleaved so drifting load hits all alike) of the bare function and of
``attribution.attribute``; the ratio attribute / bare is the overhead (1.0 = none). Before the method's own
forward gave the target logit, ``attribute`` ran one more full forward for it.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

PROMPTS = [
    ("The capital of France is", " Paris", None),
    ("When Mary and John went to the store, John gave a drink to", " Mary", " John"),
]
JOBS = [("gradient", "token", {}), ("integrated_gradients", "token", {"steps": 20}), ("dpa", "token", {})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    import workbench as wb
    from attribution import attribute, get_method

    torch.set_num_threads(args.threads)
    model = wb.load(args.model)
    out = []
    for prompt, target, foil in PROMPTS:
        enc = model.encode(prompt, target, foil)
        jobs = {}
        for method, level, params in JOBS:
            fn = get_method(method, level)[1]
            jobs[f"{method}:bare"] = partial(fn, model, enc, level, **params)
            jobs[f"{method}:attribute"] = partial(attribute, model, prompt, target, foil, method=method, level=level,
                                                  **params)
        for job in jobs.values():  # warm-up
            job()
        cpu: dict[str, list[float]] = {k: [] for k in jobs}
        for _ in range(args.reps):
            for name, job in jobs.items():
                c = time.process_time()
                job()
                cpu[name].append(time.process_time() - c)
        best = {k: min(v) for k, v in cpu.items()}
        row = {"prompt": prompt, "tokens": enc.seq_len, "cpu_seconds": best,
               "overhead": {m: best[f"{m}:attribute"] / best[f"{m}:bare"] for m, _, _ in JOBS}}
        out.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
