"""Benchmark DPA against one gradient (forward + backward), AtP and activation patching.

    python scripts/bench_dpa.py                    # smollm2-135m, 1 thread, a few prompts
    python scripts/bench_dpa.py --patching --json  # also activation patching over all heads

Every method is reached through the method table (attribution.get_method), timed around the
attribution call only (no evaluation), best (and median) of --reps interleaved rounds after one warm-up.
Times are reported as wall seconds and as this process's CPU seconds: on a shared machine the CPU time
is the steadier measure (with --threads 1 it is the compute actually spent). Ratios use the best CPU
time. "gradient_fb" is a plain forward (full logits) + backward to the embeddings; "gradient_token" is
the baselines' gradient method (it skips unembedding all but the last position).
Also reports DPA's completeness error (path weights v=1, q=k=0, gate+up=1) per prompt, and the
peak resident memory of a 200-token run with edge scores.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LONG = ("In the spring of that year the village council met in the old stone hall to decide what should "
        "be done about the bridge over the river, which had been damaged by the winter floods. The farmers "
        "wanted it rebuilt at once, since their carts could no longer cross, while the merchants argued that "
        "a new road around the hill would serve the market better. After a long evening of argument the "
        "council agreed to ")

PROMPTS = [
    ("The capital of France is", " Paris", None),
    ("When Mary and John went to the store, John gave a drink to", " Mary", " John"),
    (LONG, None, None),
]


def timed_round_robin(jobs: dict, reps: int) -> dict[str, dict[str, float]]:
    """Per job: min and median of wall and CPU seconds over reps runs, after one warm-up each.

    Jobs are interleaved (one run of each per round), so drifting load on a shared machine hits all
    of them alike; ``jobs`` maps a name to (function, args). A job with reps=0 (patching) runs once.
    """
    for fn, fargs in jobs.values():
        fn(*fargs)
    walls: dict[str, list[float]] = {k: [] for k in jobs}
    cpus: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(max(reps, 1)):
        for name, (fn, fargs) in jobs.items():
            w, c = time.perf_counter(), time.process_time()
            fn(*fargs)
            walls[name].append(time.perf_counter() - w)
            cpus[name].append(time.process_time() - c)
    return {k: {"cpu": min(cpus[k]), "wall": min(walls[k]), "cpu_median": statistics.median(cpus[k]),
                "wall_median": statistics.median(walls[k])} for k in jobs}


def gradient_fb(model, enc):
    """One gradient: forward + backward of the target (minus foil) logit to the token embeddings."""
    import torch

    store = {}

    def leaf(x, hook):
        store["e"] = x.detach().requires_grad_(True)
        return store["e"]

    with torch.enable_grad():
        logits = model.run_with_hooks(enc.tokens, fwd_hooks=[("hook_embed", leaf)])
        value = logits[0, -1, enc.target_id]
        if enc.foil_id is not None:
            value = value - logits[0, -1, enc.foil_id]
        value.backward()
    return (store["e"].grad * store["e"]).sum(-1)


def long_prompt(model, n_tokens: int) -> str:
    """A prompt of exactly n_tokens tokens (the LONG text repeated and cut)."""
    ids = model.to_tokens((LONG + " ") * (n_tokens // 60 + 2))[0, :n_tokens].tolist()
    return model.decode(ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--patching", action="store_true", help="also time activation patching over all heads")
    ap.add_argument("--edge-tokens", type=int, default=200, help="prompt length of the edge-memory check")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    import workbench as wb
    from attribution import get_method
    from attribution.dpa import COMPLETE, dpa_all

    torch.set_num_threads(args.threads)
    model = wb.load(args.model)
    rows = []
    prompts = list(PROMPTS) + [(long_prompt(model, args.edge_tokens), None, None)]
    for prompt, target, foil in prompts:
        if target is None:
            target = model.top_predictions(prompt, 1)[0][0]
        enc = model.encode(prompt, target, foil)
        row = {"tokens": enc.seq_len, "target": target, "foil": foil}
        jobs = {"gradient_fb": (gradient_fb, (model, enc))}
        for level in ("token", "head", "neuron", "qk"):
            jobs[f"dpa_{level}"] = (get_method("dpa", level)[1], (model, enc, level))
        jobs["dpa_all_levels"] = (dpa_all, (model, enc))
        for method, level in (("gradient", "token"), ("atp", "head"), ("atp", "neuron")):
            try:  # the baselines live elsewhere: report a missing one, do not fail
                jobs[f"{method}_{level}"] = (get_method(method, level)[1], (model, enc, level))
            except Exception as exc:
                row[f"{method}_{level}_error"] = f"{type(exc).__name__}: {exc}"
        timings = timed_round_robin(jobs, args.reps)
        if args.patching and enc.seq_len <= 20:
            fn = get_method("activation_patching", "head")[1]
            timings.update(timed_round_robin({"activation_patching_head": (fn, (model, enc, "head"))}, 0))
        row.update(timings)
        g_cpu = timings["gradient_fb"]["cpu"]
        ratios = {f"{k}/gradient_fb": timings[k]["cpu"] / g_cpu for k in timings if k.startswith("dpa")}
        if "gradient_token" in timings:
            ratios["dpa_token/gradient_token"] = (timings["dpa_token"]["cpu"]
                                                  / timings["gradient_token"]["cpu"])
        for level in ("head", "neuron"):
            if f"atp_{level}" in timings:
                ratios[f"dpa_{level}/atp_{level}"] = (timings[f"dpa_{level}"]["cpu"]
                                                      / timings[f"atp_{level}"]["cpu"])
        if "activation_patching_head" in timings:
            ratios["activation_patching_head/dpa_head"] = (timings["activation_patching_head"]["cpu"]
                                                           / timings["dpa_head"]["cpu"])
        row["ratios"] = ratios
        complete = dpa_all(model, enc, levels=("token",), **COMPLETE)
        default = dpa_all(model, enc, levels=("token",))
        row["completeness_error"] = complete.completeness_error()
        row["default_weights_gap"] = default.completeness_error()
        row["target_logit"] = complete.target_logit
        rows.append(row)
        if not args.json:
            print(f"\n{enc.seq_len} tokens, target {target!r}" + (f" vs {foil!r}" if foil else ""))
            for key, t in timings.items():
                print(f"  {key:26s} {t['cpu']:8.3f} s cpu (median {t['cpu_median']:.3f}) "
                      f"{t['wall']:8.3f} s wall")
            for key, val in ratios.items():
                print(f"  ratio {key:34s} {val:7.3f}")
            print(f"  completeness error (v=1, q=k=0, gate+up=1): {row['completeness_error']:.2e} "
                  f"(logit {row['target_logit']:.3f})")
    # memory of the longest prompt with all levels including edges
    enc = model.encode(prompts[-1][0], rows[-1]["target"])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    trace = dpa_all(model, enc)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mem = {"tokens": enc.seq_len, "edge_shape": list(trace["qk"].shape),  # the qk level (query-key pairs)
           "edge_mib": trace["qk"].numel() * 4 / 2**20, "peak_rss_gib": peak / 2**20,
           "peak_rss_before_gib": before / 2**20}
    out = {"model": args.model, "threads": args.threads, "reps": args.reps, "prompts": rows,
           "edge_memory": mem}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"\nedge level at {mem['tokens']} tokens: tensor {mem['edge_shape']} = "
              f"{mem['edge_mib']:.0f} MiB; process peak RSS {mem['peak_rss_gib']:.2f} GiB")


if __name__ == "__main__":
    main()
