"""Activation patching on smollm2-135m: seconds per site kind for an IOI prompt (issue 17 item 4's goal: a
15-token prompt's residual-stream scan well under a minute on 2 cores).

    .venv/bin/python scripts/bench_patching.py [--model smollm2-135m] [--threads 2] [--sites resid,attn,mlp,heads]

Prints one line per site (forward passes, seconds) and, with --json, a JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CLEAN = "When Mary and John went to the store, John gave a big drink to"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sites", default="resid,attn,mlp,heads")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    import workbench as wb
    from circuits.tools.patching import patch, swap_names

    torch.set_num_threads(args.threads)
    m = wb.load(args.model)
    corrupted = swap_names(CLEAN, " Mary", " John")
    n_tokens = m.to_tokens(CLEAN).shape[1]
    rows = []
    for site in args.sites.split(","):
        steps = []
        started = time.perf_counter()
        res = patch(m, CLEAN, corrupted, " Mary", " John", site=site, on_step=lambda d, n, steps=steps: steps.append(d))
        seconds = time.perf_counter() - started
        rows.append({"site": site, "tokens": n_tokens, "forwards": len(steps) + 2, "seconds": round(seconds, 2),
                     "shape": list(res.effect.shape), "clean": round(res.clean, 3),
                     "corrupted": round(res.corrupted, 3), "max_effect": round(float(res.effect.max()), 3)})
        if not args.json:
            print(f"{site:6s} {n_tokens} tokens  {len(steps) + 2:3d} forwards  {seconds:6.2f} s  "
                  f"effect max {float(res.effect.max()):.2f}", flush=True)
    if args.json:
        print(json.dumps({"model": args.model, "threads": args.threads, "rows": rows}))


if __name__ == "__main__":
    main()
