"""Where the circuit benchmark's time goes, before and after the batched evaluation (issue 51, item 5).

One task, every method, on one model: per phase (task building, each method's scoring, its evaluation, the random
baseline's draws), the unbatched evaluation ("before": two circuits a forward, the counterfactual and prefix runs
made again per call) and the batched one ("after": circuits/bench/forward.py TaskForwards, a method's grid sizes
and random's draws stacked along the batch, the counterfactual and prefix runs once per task). Then the floor:
the same number of plain forwards of the same rows (the suffix after the shared prefix, no hooks, no masks),
what a masked evaluation cannot beat here, and the multiply-adds the masking adds per live position. Wall and
process CPU seconds both (the CPU is shared: the load average is written beside every figure). Every stored
figure of the two ways is compared (max |difference|). Writes results/circuits/time_breakdown.md.

    python scripts/bench_eval_phases.py [--model smollm2-135m] [--task ioi] [--n-train 16] [--n-test 16]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import torch

METHODS = ["random", "eap", "eap_ig", "dpa", "dpa_cf", "dpa_path:steps=4", "dpa_path:steps=16"]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


class Clock:
    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def run_mode(model: Any, cfg: Any, task: str, batched: bool) -> dict[str, Any]:
    from circuits.bench.runner import prepare_task, run_method

    out: dict[str, Any] = {"load_start": load(), "methods": {}}
    c = Clock()
    setup = prepare_task(model, task, cfg, batched=batched)
    out["task_building"] = c.read()
    out["ends_seconds"] = setup.header["ends_seconds"]
    for method in cfg.methods:
        c = Clock()
        res, _ = run_method(model, setup, method, cfg)
        wall, cpu = c.read()
        evals = sum(lv["eval_seconds"] for lv in res["levels"].values())
        out["methods"][method] = {"scoring": res["seconds"], "evaluation": evals, "wall": wall, "cpu": cpu,
                                  "n_forwards": sum(lv["n_forwards"] for lv in res["levels"].values()),
                                  "result": res}
        print(f"{'after' if batched else 'before'} {method}: scoring {res['seconds']:.1f} s, evaluation "
              f"{evals:.1f} s (load {load()})", flush=True)
    out["setup"] = setup
    out["load_end"] = load()
    return out


def floor(model: Any, setup: Any, units: int) -> dict[str, tuple[float, float]]:
    """Seconds (wall, CPU) of ``units`` forwards of every test batch with no mask, in the batched evaluation's
    chunk sizes: "suffix" runs each batch's suffix against its cached prefix with split head inputs and the
    logits at the last position (the masked forward less its masking), "plain" the whole prompts through the
    model as it is (no prefix reuse, no split inputs, every position's logits)."""
    from circuits.bench.forward import last_metric

    f = setup.forwards
    out = {}
    for kind in ("suffix", "plain"):
        c = Clock()
        for (_, runner, part, live), batch in zip(f.parts, f.prompts.batches, strict=True):
            size = f.copies(len(live[0]))
            left = units
            while left > 0:
                k = min(size, left)
                with torch.no_grad():
                    if kind == "suffix":
                        with model.split_inputs():
                            last_metric(runner, part, part.tokens.repeat(k, 1), [], f.prompts.metric)
                    else:
                        batch.metric(model.run_with_hooks(batch.tokens.repeat(k, 1), fwd_hooks=[]), f.prompts.metric)
                left -= k
        out[kind] = c.read()
    return out


def mask_macs(model: Any, graph: Any) -> tuple[float, float]:
    """Multiply-adds per live position: a plain forward's (weights, unembedding included) and what the masked
    forward adds (each receiver's product with the senders upstream, and the kv projections that split head
    inputs repeat for every query head)."""
    from circuits.intervene import receiver_groups

    pos = model.W_pos
    plain = model.n_params() - model.W_E.numel() - (0 if pos is None else pos.numel())  # the embeddings are lookups
    added = sum((cols.stop - cols.start) * n_up for n_up, cols in receiver_groups(graph)) * model.arch.d_model
    a = model.arch
    d_head = a.d_model // a.n_heads
    added += a.n_layers * 2 * (a.n_heads - a.n_kv_heads) * a.d_model * d_head
    return float(plain), float(added)


def max_difference(a: Any, b: Any) -> float:
    if isinstance(a, dict):
        return max([max_difference(a[k], b[k]) for k in a if k not in ("eval_seconds", "seconds")] or [0.0])
    if isinstance(a, list):
        return max([max_difference(x, y) for x, y in zip(a, b, strict=True)] or [0.0])
    if isinstance(a, float | int) and not isinstance(a, bool):
        return abs(float(a) - float(b))
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="ioi")
    ap.add_argument("--n-train", type=int, default=16)
    ap.add_argument("--n-test", type=int, default=16)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", default="results/circuits/time_breakdown.md")
    args = ap.parse_args()
    from circuits.bench.runner import BenchConfig
    from core.models.zoo import load as load_model

    cfg = BenchConfig(model=args.model, tasks=[args.task], methods=args.methods.split(","), levels=["edge"],
                      n_train=args.n_train, n_test=args.n_test)
    model = load_model(args.model)
    modes = {}
    for batched in (False, True):
        modes[batched] = run_mode(model, cfg, args.task, batched)
    after = modes[True]
    units = sum(m["n_forwards"] for m in after["methods"].values())
    fl = floor(model, after["setup"], units)
    plain, added = mask_macs(model, after["setup"].graph)
    diffs = {m: max_difference(modes[False]["methods"][m]["result"], after["methods"][m]["result"])
             for m in cfg.methods}
    write(args, cfg, modes, units, fl, (plain, added), diffs)


def derived(cfg: Any, before: dict[str, Any], after: dict[str, Any],
            stored: str = "results/circuits/bench_mib_smollm2-135m.json") -> list[str]:
    """The full seven-task leaderboard's time derived (not timed) from its stored per-cell seconds: each
    method's evaluation scaled by this run's after/before ratio for that method, scoring and ends as stored."""
    import json

    path = Path(stored)
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    ratio = {m: after["methods"][m]["evaluation"] / max(before["methods"][m]["evaluation"], 1e-9)
             for m in cfg.methods}
    total_b = total_a = 0.0
    for t in r["tasks"]:
        total_b += t["ends_seconds"]
        total_a += t["ends_seconds"]
        for m, v in t["methods"].items():
            ev = sum(lv["eval_seconds"] for lv in v["levels"].values())
            total_b += v["seconds"] + ev
            total_a += v["seconds"] + ev * ratio.get(m, 1.0)
    return ["## Derived, not timed: the seven-method, seven-task leaderboard", "",
            f"From {stored} ({r['config']['n_test']} test prompts, {len(r['tasks'])} tasks, stored wall "
            f"{r['seconds']:.0f} s alone on 2 cores): its cells' scoring, evaluation and m(full)/m(empty) seconds sum "
            f"to {total_b:.0f} s; with each method's evaluation scaled by this run's after/before ratio ("
            + ", ".join(f"{m} {x:.2f}" for m, x in ratio.items())
            + f") they sum to {total_a:.0f} s ({total_a / 60:.1f} min). This assumes the ratio measured on "
            f"{cfg.tasks[0]} at {cfg.n_test} test prompts holds for every task at {r['config']['n_test']} and "
            "for a quiet machine; the full command was not rerun."]


def write(args: Any, cfg: Any, modes: dict[bool, Any], units: int, fl: dict[str, tuple[float, float]],
          macs: tuple[float, float], diffs: dict[str, float]) -> None:
    before, after = modes[False], modes[True]
    lines = [
        "# Where the circuit benchmark's time goes (issue 51, item 5)", "",
        f"`python scripts/bench_eval_phases.py --model {args.model} --task {args.task} --n-train {args.n_train} "
        f"--n-test {args.n_test}` (edge level, MIB's grid, random {cfg.random_seeds} draws, batches of "
        f"{cfg.batch_size}; torch threads {torch.get_num_threads()}, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}). Before: the unbatched evaluation (two circuits a "
        "forward, the counterfactual run and the shared prefix made again for every call). After: "
        "circuits/bench/forward.py TaskForwards (counterfactual and prefix runs once per task, a method's grid "
        "sizes and random's draws stacked along the batch). Wall seconds; CPU = process CPU seconds (all "
        "threads). The machine was shared: load averages (1, 5, 15 min) are given per mode.", "",
        f"Load: before {before['load_start']} -> {before['load_end']}; after {after['load_start']} -> "
        f"{after['load_end']}.", "",
        "| phase | before wall (s) | before CPU (s) | after wall (s) | after CPU (s) |",
        "|---|---|---|---|---|",
        f"| task building (rows, prompts, references, m(full), m(empty)) | {before['task_building'][0]:.1f} | "
        f"{before['task_building'][1]:.1f} | {after['task_building'][0]:.1f} | {after['task_building'][1]:.1f} |",
    ]
    for m in cfg.methods:
        b, a = before["methods"][m], after["methods"][m]
        name = "random (scoring + its draws' evaluation)" if m == "random" else m
        lines.append(f"| {name}: scoring | {b['scoring']:.1f} | | {a['scoring']:.1f} | |")
        lines.append(f"| {name}: evaluation ({a['n_forwards']} circuits) | {b['evaluation']:.1f} | "
                     f"{b['cpu']:.1f} (cell) | {a['evaluation']:.1f} | {a['cpu']:.1f} (cell) |")
    tot_b = sum(x["evaluation"] for x in before["methods"].values())
    tot_a = sum(x["evaluation"] for x in after["methods"].values())
    sc_b = sum(x["scoring"] for x in before["methods"].values())
    sc_a = sum(x["scoring"] for x in after["methods"].values())
    lines += [f"| **all evaluation** | {tot_b:.1f} | | {tot_a:.1f} | |",
              f"| **all scoring** | {sc_b:.1f} | | {sc_a:.1f} | |", ""]
    plain, added = macs
    (sw, sc), (pw, pc) = fl["suffix"], fl["plain"]
    lines += [
        "## The floor", "",
        f"The after-evaluation ran {units} circuits over {args.n_test} test prompts (and m(full), m(empty) once). "
        f"The same number of forwards of the same rows without any mask, in the same chunk sizes: each batch's "
        f"suffix against its cached prefix with split head inputs and last-position logits (the masked forward "
        f"less its masking) {sw:.1f} s wall, {sc:.1f} s CPU; the whole prompts through the plain model (no prefix "
        f"reuse, no split inputs, all logits) {pw:.1f} s wall, {pc:.1f} s CPU. Evaluation after / suffix floor: "
        f"{tot_a / max(sw, 1e-9):.2f}x, / plain floor {tot_a / max(pw, 1e-9):.2f}x (wall); before / plain floor "
        f"{tot_b / max(pw, 1e-9):.2f}x. Load at the floor's end: {load()}.", "",
        f"Multiply-adds per live position: a plain forward {plain / 1e6:.0f} M (unembedding included); the masking "
        f"adds {added / 1e6:.0f} M ({added / plain:.0%}: every receiver input's product with its upstream "
        "senders' differences, and split head inputs computing keys and values per query head).", "",
        "## Equality", "",
        "Largest |difference| of any stored figure (CPR, CMD, intervals, curves) before vs after, per method: "
        + ", ".join(f"{m} {d:.2g}" for m, d in diffs.items()) + ".", "",
    ]
    eig = after["methods"].get("eap_ig")
    for steps in ("dpa_path:steps=16", "dpa_path:steps=4"):
        if eig and steps in after["methods"]:
            sh_a = after["methods"][steps]["scoring"] / max(eig["scoring"], 1e-9)
            sh_b = before["methods"][steps]["scoring"] / max(before["methods"]["eap_ig"]["scoring"], 1e-9)
            lines.append(f"`{steps}` scoring as a share of EAP-IG's (same run): {sh_b:.2f} (before mode), "
                         f"{sh_a:.2f} (after mode).")
    lines += ["", *derived(cfg, before, after)]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(args.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
