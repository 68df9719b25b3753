"""The issue's faithfulness benchmark on smollm2-135m (or any zoo LLM), in one process so timings compare.

    python scripts/bench_faithfulness.py [--parts token,head,neuron,memory] [--n-token 50] [--n-head 20]
        [--n-neuron 5] [--threads 1] [--out bench.json]

token:  IOI and facts, first n each: dpa, gradient, gradient_norm, input_x_gradient, integrated_gradients,
        rollout, random. The issue's line names gradient (the DPA paper's signed baseline); gradient_norm (the
        saliency map) is reported beside it, outside the line.
        IOI explains the logit difference to the subject name (the IOI literature's metric); factual recall
        explains the target logit alone (the paper's Known-1000 setting; the facts file's foils are arbitrary
        counterfactuals kept for atp_foil). Each part runs once per ranking in --ranks (signed, abs).
head:   IOI, first n: dpa, atp, attention_last, attention_mean, gradient, gradient_norm, random,
        activation_patching
        (Spearman and recall@10 against zero-ablation patching of the logit difference).
neuron: IOI, first n: dpa, atp, random (cost of dense neuron scores).
paper:  the issue's reference setting: IOI and facts, first n-paper (20), grid 0.1 ... 1.0 (the paper
        scripts', without p = 0), signed ranking; facts with and without their foils. Only to compare with
        the reference implementation's figures: this grid hands random about +9.
pair:   IOI, first n-pair (100): dpa and atp alone at head level, under each ranking, for the paired
        per-prompt difference (the paper's claim that DPA beats AtP at component level) with more prompts
        than the head part, whose activation patching costs about 10 s per prompt.
memory: DPA at edge level on a 200-token prompt, peak resident memory of a fresh process.
timing: IOI, first n-timing: DPA head scores vs activation patching over all heads, with and without
        starting each patched forward at the ablated layer (truncate) - the plain cost is one full forward
        per head. DPA is timed one prompt at a time and batched (--dpa-batch prompts per pass, per-prompt
        seconds over the first max(n-timing, dpa-batch) IOI prompts), as patching batches its forwards.
Every part saves a "faithfulness" run; the summary (figures, ratios, pass/fail of each "Done when" check)
prints as markdown and, with --out, as JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "data" / "prompts"
TOKEN_METHODS = ["dpa", "gradient", "gradient_norm", "input_x_gradient", "integrated_gradients", "rollout", "random"]
HEAD_METHODS = ["dpa", "atp", "attention_last", "attention_mean", "gradient", "gradient_norm", "random",
                "activation_patching"]
NEURON_METHODS = ["dpa", "atp", "random"]
PAPER_METHODS = ["dpa", "integrated_gradients", "input_x_gradient", "gradient", "gradient_norm", "random"]
PAPER_GRID = [round(i / 10, 1) for i in range(1, 11)]


def load_rows(name: str, n: int) -> list[dict]:
    rows = [json.loads(line) for line in (PROMPTS / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    return rows[:n]


def warm_up(model, rows, methods, level) -> None:
    """One untimed call per method, so one-off costs (allocations, lazy imports) do not land in a row."""
    from attribution.faithfulness import resolve_method

    enc = model.encode(rows[0]["prompt"], rows[0]["target"], rows[0].get("foil"))
    for m in methods:
        _, call_level, fn = resolve_method(m, level)
        if m != "activation_patching":
            fn(model, enc, call_level)


def run_part(model, rows, methods, level, label, log, rank="signed", use_foil=True, grid=None) -> dict:
    from attribution.faithfulness import evaluate

    warm_up(model, rows, methods, level)
    started = time.time()
    done = [0]

    def step():
        done[0] += 1
        print(f"  {label}: {done[0]}/{len(rows)} ({time.time() - started:.0f} s)", file=sys.stderr,
              flush=True)

    res = evaluate(model, rows, methods, level=level, on_step=step, rank=rank, use_foil=use_foil, grid=grid)
    res.args.update(benchmark=label)
    run = res.save()
    log.append(f"### {label}\n\n{res.markdown()}\n\n(run {run.id}, {time.time() - started:.0f} s)\n")
    out = res.to_json()
    out["run_id"] = run.id
    totals: dict[str, list[float]] = {}
    for row in res.per_example:
        totals.setdefault(row["method"], []).append(row["recover_auc"] - row["disrupt_auc"])
    out["example_totals"] = totals
    out["wall_seconds"] = time.time() - started
    return out


def memory_check(model_name: str, n_tokens: int = 200) -> dict:
    code = f"""
import resource, time, torch
torch.set_num_threads(1)
from core.models.zoo import load
from attribution import attribute
m = load({model_name!r})
words = (" the cat sat on a mat and then it ran to the door") * 40
ids = m.to_tokens(words)[0, :{n_tokens - 1}].tolist()
prompt = m.decode(ids) + " When Mary and John went to the store, John gave a drink to"
enc = m.encode(prompt, " Mary", " John")
t = time.perf_counter()
res = attribute(m, prompt, " Mary", " John", method="dpa", level="edge")
print(enc.seq_len, tuple(res.scores.shape), time.perf_counter() - t,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"ok": False, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    parts = proc.stdout.strip().splitlines()[-1].split()
    seq, secs, gib = int(parts[0]), float(parts[-2]), float(parts[-1])
    return {"ok": gib < 24, "tokens": seq, "edge_seconds": secs, "peak_rss_gib": gib, "limit_gib": 24}


def patching_timing(model, rows, batch_rows, dpa_batch_size) -> dict:
    """Seconds per example: DPA head scores (alone and batched over prompts) vs patching every head
    (truncated and plain forwards, batched, and one forward at a time)."""
    from attribution.dpa import dpa_batch
    from attribution.faithfulness import resolve_method
    from attribution.methods import as_scored

    _, _, dpa = resolve_method("dpa", "head")
    _, _, patch = resolve_method("activation_patching", "head")
    out = {"dpa": [], "patching_truncated": [], "patching_plain": [], "patching_unbatched": []}
    warm = model.encode(rows[0]["prompt"], rows[0]["target"], rows[0].get("foil"))
    dpa(model, warm, "head")
    for row in rows:
        enc = model.encode(row["prompt"], row["target"], row.get("foil"))
        for key, fn, kwargs in (("dpa", dpa, {}), ("patching_truncated", patch, {"truncate": True}),
                                ("patching_plain", patch, {"truncate": False}),
                                ("patching_unbatched", patch, {"truncate": False, "batch_size": 1})):
            started = time.perf_counter()
            scores = as_scored(fn(model, enc, "head", **kwargs)).scores  # a method may return a Scored
            out[key].append(time.perf_counter() - started)
            if key == "patching_truncated":
                first = scores
            if key == "patching_plain":
                out.setdefault("max_abs_diff", []).append(float((scores - first).abs().max()))
    encs = [model.encode(r["prompt"], r["target"], r.get("foil")) for r in batch_rows]
    dpa_batch(model, encs[:dpa_batch_size], levels=("head",), batch_size=dpa_batch_size)  # warm
    started = time.perf_counter()
    dpa_batch(model, encs, levels=("head",), batch_size=dpa_batch_size)
    batched = (time.perf_counter() - started) / len(encs)
    mean = {k: sum(v) / len(v) for k, v in out.items()}
    mean.update(dpa_batched=batched, dpa_batch_size=dpa_batch_size, dpa_batch_prompts=len(encs))
    for kind in ("truncated", "plain", "unbatched"):
        mean[f"ratio_{kind}"] = mean[f"patching_{kind}"] / mean["dpa"]
        mean[f"ratio_{kind}_vs_batched"] = mean[f"patching_{kind}"] / batched
    mean["n"] = len(rows)
    return mean


def paired(part: dict, a: str, b: str) -> str:
    """Method a against b, prompt by prompt: mean difference of totals, its standard error, wins."""
    m = part["methods"]
    diffs = [x - y for x, y in zip(part["example_totals"][a], part["example_totals"][b], strict=True)]
    mean = sum(diffs) / len(diffs)
    sd = (sum((x - mean) ** 2 for x in diffs) / max(1, len(diffs) - 1)) ** 0.5
    se = sd / len(diffs) ** 0.5
    return (f"{a} total {m[a]['total']:.2f} vs {b} {m[b]['total']:.2f} over {len(diffs)} prompts: paired "
            f"difference {mean:+.2f} (sd {sd:.2f}, standard error {se:.2f}, {mean / se if se else 0:+.1f} SE), "
            f"{a} higher on {sum(x > 0 for x in diffs)} of {len(diffs)} prompts")


def checks(summary: dict) -> list[str]:
    """The issue's "Done when" lines, each with the measured figures and PASS / FAIL."""
    lines = []

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    for key in [k for k in summary if k.startswith("token_")]:
        part, name = summary[key], key[len("token_"):]
        m = part["methods"]
        dpa = m["dpa"]["total"]
        for other in ("gradient", "input_x_gradient", "integrated_gradients", "rollout"):
            lines.append(f"token {name}: DPA total {dpa:.2f} > {other} {m[other]['total']:.2f}: "
                         f"{verdict(dpa > m[other]['total'])}")
        norm = m["gradient_norm"]["total"]
        lines.append(f"token {name}: (not a Done-when line) DPA total {dpa:.2f} vs gradient_norm {norm:.2f}: "
                     f"{'DPA ahead' if dpa > norm else 'DPA behind'}")
        lines.append(f"token {name}: random total {m['random']['total']:.2f} within +-5: "
                     f"{verdict(abs(m['random']['total']) <= 5)}")
        ratio = m["dpa"]["attribution_seconds"] / m["gradient"]["attribution_seconds"]
        lines.append(f"token {name}: DPA / gradient time {ratio:.2f}x (<= 1x): {verdict(ratio <= 1)}")
    for key in [k for k in summary if k.startswith("pair_ioi")]:
        lines.append(f"{key}: {paired(summary[key], 'dpa', 'atp')}")
    for key in [k for k in summary if k.startswith("head_ioi")]:
        head, name = summary[key], key
        m = head["methods"]
        for k in ("dpa", "atp", "attention_last", "attention_mean", "gradient", "gradient_norm", "random"):
            lines.append(f"{name}: {k}: disrupt {m[k]['disrupt_auc']:.2f} "
                         f"recover {m[k]['recover_auc']:.2f} "
                         f"total {m[k]['total']:.2f} spearman {m[k].get('spearman')} "
                         f"recall@10 {m[k].get('recall_at_10')}")
        lines.append(f"{name}: {paired(head, 'dpa', 'atp')}")
        r = m["dpa"]["attribution_seconds"] / m["atp"]["attribution_seconds"]
        lines.append(f"{name}: DPA / AtP time {r:.2f}x (<= 1x): {verdict(r <= 1)}")
        p = m["activation_patching"]["attribution_seconds"] / m["dpa"]["attribution_seconds"]
        # DPA here runs one prompt per pass while patching batches 32 forwards: the cost line is judged
        # by the timing part, which also batches DPA's prompts; this ratio is the unbatched one.
        lines.append(f"{name}: activation patching (batched, truncated) / DPA one prompt per pass {p:.0f}x "
                     f"(the >= 50x line is judged by the timing part)")
    for key in [k for k in summary if k.startswith("paper_")]:
        m = summary[key]["methods"]
        lines.append(f"{key} (grid 0.1..1, signed; reference: IOI DPA 11.5, IG 8.2, ixg 7.7; facts DPA 6.7, "
                     f"IG 2.5, ixg 1.9): " + ", ".join(f"{k} {v['total']:.2f}" for k, v in m.items()))
    neuron = summary.get("neuron_ioi")
    if neuron:
        m = neuron["methods"]
        r = m["dpa"]["attribution_seconds"] / m["atp"]["attribution_seconds"]
        lines.append(f"neuron ioi: DPA / AtP time {r:.2f}x (<= 1x): {verdict(r <= 1)}; totals DPA "
                     f"{m['dpa']['total']:.2f}, AtP {m['atp']['total']:.2f}, "
                     f"random {m['random']['total']:.2f}")
    tim = summary.get("timing")
    if tim:
        lines.append(f"timing ({tim['n']} IOI prompts): DPA head {tim['dpa']:.2f} s; patching all heads "
                     f"{tim['patching_truncated']:.1f} s truncated ({tim['ratio_truncated']:.0f}x), "
                     f"{tim['patching_plain']:.1f} s plain batched ({tim['ratio_plain']:.0f}x: "
                     f"{verdict(tim['ratio_plain'] >= 50)} at >= 50x), {tim['patching_unbatched']:.1f} s one "
                     f"forward at a time ({tim['ratio_unbatched']:.0f}x: {verdict(tim['ratio_unbatched'] >= 50)})")
        lines.append(f"timing: DPA head batched {tim['dpa_batch_size']} prompts per pass "
                     f"({tim['dpa_batch_prompts']} prompts) {tim['dpa_batched']:.3f} s per prompt; patching all "
                     f"heads / batched DPA: truncated {tim['ratio_truncated_vs_batched']:.0f}x "
                     f"({verdict(tim['ratio_truncated_vs_batched'] >= 50)} at >= 50x), plain batched "
                     f"{tim['ratio_plain_vs_batched']:.0f}x ({verdict(tim['ratio_plain_vs_batched'] >= 50)}), "
                     f"one at a time {tim['ratio_unbatched_vs_batched']:.0f}x "
                     f"({verdict(tim['ratio_unbatched_vs_batched'] >= 50)})")
    mem = summary.get("memory")
    if mem:
        lines.append(f"memory: {json.dumps(mem)}: {verdict(mem.get('ok', False))}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--parts", default="token,head,neuron,memory")
    parser.add_argument("--n-token", type=int, default=50)
    parser.add_argument("--n-head", type=int, default=20)
    parser.add_argument("--n-neuron", type=int, default=5)
    parser.add_argument("--n-timing", type=int, default=3)
    parser.add_argument("--n-paper", type=int, default=20)
    parser.add_argument("--n-pair", type=int, default=100)
    parser.add_argument("--dpa-batch", type=int, default=16, help="Prompts per batched DPA pass (timing).")
    parser.add_argument("--sets", default="ioi:foil,facts:nofoil",
                        help="Prompt sets for the token part, each SET:foil or SET:nofoil.")
    parser.add_argument("--ranks", default="signed,abs", help="Rankings to evaluate: signed, abs or both.")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="Write the summary JSON here.")
    args = parser.parse_args()
    parts = args.parts.split(",")

    import torch

    from core.models.zoo import load

    torch.set_num_threads(args.threads)
    model = load(args.model)
    summary: dict = {"model": args.model, "threads": args.threads}
    log: list[str] = []
    ranks = args.ranks.split(",")
    if "token" in parts:
        for item in args.sets.split(","):
            name, _, foil = item.partition(":")
            for rank in ranks:
                label = f"token_{name}_{rank}"
                summary[label] = run_part(model, load_rows(name, args.n_token), TOKEN_METHODS, "token", label,
                                          log, rank=rank, use_foil=foil != "nofoil")
    if "head" in parts:
        for rank in ranks:
            summary[f"head_ioi_{rank}"] = run_part(model, load_rows("ioi", args.n_head), HEAD_METHODS, "head",
                                                   f"head_ioi_{rank}", log, rank=rank)
    if "neuron" in parts:
        summary["neuron_ioi"] = run_part(model, load_rows("ioi", args.n_neuron), NEURON_METHODS, "neuron",
                                         "neuron_ioi", log)
    if "pair" in parts:
        for rank in ranks:
            summary[f"pair_ioi_{rank}"] = run_part(model, load_rows("ioi", args.n_pair), ["dpa", "atp"], "head",
                                                   f"pair_ioi_{rank}", log, rank=rank)
    if "paper" in parts:
        for name, foil in (("ioi", True), ("facts", False), ("facts", True)):
            label = f"paper_{name}_{'foil' if foil else 'nofoil'}"
            summary[label] = run_part(model, load_rows(name, args.n_paper), PAPER_METHODS, "token", label, log,
                                      use_foil=foil, grid=PAPER_GRID)
    if "memory" in parts:
        summary["memory"] = memory_check(args.model)
    if "timing" in parts:
        summary["timing"] = patching_timing(model, load_rows("ioi", args.n_timing),
                                            load_rows("ioi", max(args.n_timing, args.dpa_batch)), args.dpa_batch)
    summary["checks"] = checks(summary)
    summary["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print("\n".join(log))
    print("\n".join(f"- {line}" for line in summary["checks"]))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
