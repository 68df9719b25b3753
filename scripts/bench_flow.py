"""Time one prompt's information flow by token (circuits.flow: the forward, every per-position share, each
position's prediction) and its pruned graph and figure on smollm2-135m and gemma3-270m, at the app's one torch
thread and at two; the load average beside each figure. Writes results/app/flow_timing.json.

    .venv/bin/python scripts/bench_flow.py [--models smollm2-135m,gemma3-270m] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = "When Mary and John went to the store, John gave a drink to"


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "results" / "app" / "flow_timing.json"))
    args = ap.parse_args()
    import torch

    import workbench as wb
    from circuits.flow import flow

    rows = []
    for name in args.models.split(","):
        model = wb.load(name)
        flow(model, "warm up")
        for threads in (1, 2):
            torch.set_num_threads(threads)
            best, graph_s, plot_s = [], 0.0, 0.0
            for _ in range(args.repeats):
                t = time.perf_counter()
                f = flow(model, PROMPT)
                best.append(time.perf_counter() - t)
            t = time.perf_counter()
            g = f.graph()
            graph_s = time.perf_counter() - t
            t = time.perf_counter()
            f.plot()
            plot_s = time.perf_counter() - t
            row = {"model": name, "threads": threads, "tokens": f.n_tokens, "flow_s_min": round(min(best), 3),
                   "flow_s_median": round(sorted(best)[len(best) // 2], 3), "graph_s": round(graph_s, 3),
                   "plot_s": round(plot_s, 3), "nodes": len(g.nodes), "edges": len(g.edges),
                   "prediction": f.prediction, "loadavg": load()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from core.errors import OutputError
    from core.store import write_atomic

    write_atomic(out, json.dumps({"prompt": PROMPT, "cpus": os.cpu_count(), "rows": rows}, indent=1) + "\n",
                 "the timing", OutputError)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
