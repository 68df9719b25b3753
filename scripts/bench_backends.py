"""DPA and the gradient methods on the nnsight backend against the TransformerLens backend, in one run.

    nice -n 19 .venv/bin/python scripts/bench_backends.py [--model smollm2-135m] [--reps 5] [--threads 2]

Both backends load the same model; every method runs once on each to warm up (nnsight reads the weights in its
first trace), then ``--reps`` rounds alternate the backends (TL, nnsight, TL, ...) so that a change of load hits
both. Each figure is the minimum over the rounds of one call's wall time (``time.perf_counter``) and of its CPU
time (``time.process_time``, every thread of this process: on a shared, loaded machine the steadier of the two,
at ``--threads 1`` especially); the ratios are nnsight / TransformerLens (the goal: at most 1.5). The numbers
also agree: the largest difference relative to the TransformerLens scores' own scale is reported. Writes
results/models/backends.md (and .json beside it) with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

PROMPT, TARGET, FOIL = "When Mary and John went to the store, John gave a drink to", " Mary", " John"
# (method, level, parameters): DPA at two levels and on its path, and the gradient family (IG at 8 steps)
CASES = [("dpa", "token", {}), ("dpa", "head", {}), ("dpa_path", "token", {}), ("gradient", "head", {}),
         ("input_x_gradient", "token", {}), ("integrated_gradients", "token", {"steps": 8}), ("atp", "head", {}),
         ("atp_foil", "token", {})]
GOAL = 1.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="results/models/backends.md")
    args = ap.parse_args()

    import torch

    import workbench as wb

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    models = {"transformer_lens": wb.load(args.model), "nnsight": wb.load(args.model, backend="nnsight")}

    def run(model, method, level, params):
        return wb.attribute(model, PROMPT, target=TARGET, foil=FOIL, method=method, level=level, **params).scores

    rows = []
    for method, level, params in CASES:
        best = {b: float("inf") for b in models}
        cpu = {b: float("inf") for b in models}
        scores = {b: run(m, method, level, params).float() for b, m in models.items()}  # warm-up, and the numbers
        for _ in range(args.reps):
            for backend, model in models.items():
                started, cpu_started = time.perf_counter(), time.process_time()
                run(model, method, level, params)
                best[backend] = min(best[backend], time.perf_counter() - started)
                cpu[backend] = min(cpu[backend], time.process_time() - cpu_started)
        ref = scores["transformer_lens"]
        rel = float((scores["nnsight"] - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)
        ratio = best["nnsight"] / best["transformer_lens"]
        cpu_ratio = cpu["nnsight"] / cpu["transformer_lens"]
        name = method + "".join(f" {k}={v}" for k, v in params.items())
        rows.append({"method": name, "level": level, "tl_s": best["transformer_lens"], "nnsight_s": best["nnsight"],
                     "ratio": ratio, "tl_cpu_s": cpu["transformer_lens"], "nnsight_cpu_s": cpu["nnsight"],
                     "cpu_ratio": cpu_ratio, "rel_diff": rel})
        print(f"{method}/{level}: TL {best['transformer_lens']:.3f} s, nnsight {best['nnsight']:.3f} s, "
              f"ratio {ratio:.2f}; CPU {cpu['transformer_lens']:.3f} s / {cpu['nnsight']:.3f} s, "
              f"ratio {cpu_ratio:.2f}; relative difference {rel:.1e}", flush=True)
    load_after = os.getloadavg()
    write(Path(args.out), args, rows, load_before, load_after, torch.__version__)


def write(out: Path, args, rows, load_before, load_after, torch_version: str) -> None:
    import nnsight

    from core.errors import OutputError
    from core.store import write_atomic

    worst = max(r["ratio"] for r in rows)
    worst_cpu = max(r["cpu_ratio"] for r in rows)
    lines = [
        "# Backends: nnsight against TransformerLens on one model",
        "",
        f"`scripts/bench_backends.py --model {args.model} --reps {args.reps} --threads {args.threads}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch_version}, nnsight {nnsight.__version__}).",
        f"Load average before {'/'.join(f'{x:.1f}' for x in load_before)}, after "
        f"{'/'.join(f'{x:.1f}' for x in load_after)} (the machine is shared: figures under load are noisy; the "
        "rounds alternate the backends so load hits both).",
        "",
        f"Prompt {PROMPT!r}, target {TARGET!r}, foil {FOIL!r}. Each time is the minimum of {args.reps} calls of "
        "`wb.attribute` after a warm-up; ratio = nnsight / TransformerLens (goal at most "
        f"{GOAL}); relative difference = the largest score difference over the TransformerLens scores' largest "
        "magnitude.",
        "",
        "| method | level | TL wall s | nnsight wall s | wall ratio | TL CPU s | nnsight CPU s | CPU ratio "
        "| relative difference |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {r['level']} | {r['tl_s']:.3f} | {r['nnsight_s']:.3f} | {r['ratio']:.2f} | "
                     f"{r['tl_cpu_s']:.3f} | {r['nnsight_cpu_s']:.3f} | {r['cpu_ratio']:.2f} | {r['rel_diff']:.1e} |")
    lines += ["", f"Largest wall ratio: {worst:.2f}, largest CPU ratio: {worst_cpu:.2f} (goal: at most {GOAL}).", ""]
    write_atomic(out, "\n".join(lines), "the backends report", OutputError)
    write_atomic(out.with_suffix(".json"), json.dumps(
        {"model": args.model, "reps": args.reps, "threads": args.threads, "load_before": load_before,
         "load_after": load_after, "rows": rows}, indent=1, allow_nan=False), "the backends report", OutputError)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
