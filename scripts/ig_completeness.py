"""Integrated gradients' completeness on a real model: does sum(scores) reach f(input) - f(baseline)?

    nice -n 19 .venv/bin/python scripts/ig_completeness.py [--model smollm2-135m] [--steps 20,100,300]
        [--out results/attribution/ig_completeness_smollm2.md]

For each prompt (a fact without a foil, facts and IOI prompts with their foils), each baseline (with its
quadrature schedule) and each number of steps: the convergence delta (Captum's: sum of attributions -
(f(input) - f(baseline))) and the relative gap |delta| / |f(input) - f(baseline)|. Writes a markdown
report (per-prompt table and a summary: median relative gap and how many converge within 10%) and the
raw rows as JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

PROMPTS = [("The capital of France is", " Paris", None)]
VARIANTS = [  # (label, params)
    ("zero", {"baseline": "zero"}),
    ("zero-cubic", {"baseline": "zero", "schedule": "cubic"}),
    ("mean", {"baseline": "mean"}),
    ("bos", {"baseline": "bos"}),
    ("zero, first kept", {"baseline": "zero", "keep_first": True}),
    ("mean, first kept", {"baseline": "mean", "keep_first": True}),
]
TOL = 0.1


def prompt_rows(n_facts: int, n_ioi: int) -> list[tuple[str, str, str | None]]:
    rows = list(PROMPTS)
    for name, n in (("facts", n_facts), ("ioi", n_ioi)):
        lines = Path(f"data/prompts/{name}.jsonl").read_text().splitlines()[:n]
        rows += [(r["prompt"], r["target"], r.get("foil")) for r in map(json.loads, lines)]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", default="20,100,300")
    ap.add_argument("--n-facts", type=int, default=2, help="prompts from data/prompts/facts.jsonl")
    ap.add_argument("--n-ioi", type=int, default=0, help="prompts from data/prompts/ioi.jsonl")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default=";".join(label for label, _ in VARIANTS),
                    help="baselines to run: labels of VARIANTS, ';'-separated (to split the work)")
    ap.add_argument("--rows", default=None, help="write the raw rows here (JSON) instead of the report")
    ap.add_argument("--merge", default=None, help="comma-separated --rows files: write the report from them")
    ap.add_argument("--out", default="results/attribution/ig_completeness_smollm2.md")
    args = ap.parse_args()
    steps_list = [int(s) for s in args.steps.split(",")]
    if args.merge:
        merged = {(r["prompt"], r["baseline"], r["steps"]): r for f in args.merge.split(",")
                  for r in json.loads(Path(f).read_text())}  # a row run twice: the later file's
        rows = list(merged.values())
        write(Path(args.out), rows, steps_list, args.model, sum(r.get("seconds", 0) for r in rows))
        return

    import torch

    import workbench as wb
    from attribution.baselines.integrated_gradients import ig_completeness

    torch.set_num_threads(args.threads)
    model = wb.load(args.model)
    chosen = args.variants.split(";")
    rows = []
    encs = [(row, model.encode(*row)) for row in prompt_rows(args.n_facts, args.n_ioi)]
    variants = dict(VARIANTS)
    for steps in steps_list:  # every prompt and baseline at few steps first, the long runs last
        for (prompt, target, foil), enc in encs:
            for label in chosen:
                params = variants[label]
                started = time.process_time()
                rep = ig_completeness(model, enc, steps=steps, internal_batch_size=50, **params)
                rel = abs(rep["delta"]) / abs(rep["expected"]) if rep["expected"] else float("inf")
                rows.append({"prompt": prompt, "target": target, "foil": foil, "baseline": label, "steps": steps,
                             **rep, "relative_gap": rel, "seconds": time.process_time() - started})
                print(json.dumps(rows[-1]), flush=True)
                if args.rows:  # after every row: a long run that is stopped keeps what it measured
                    Path(args.rows).write_text(json.dumps(rows, indent=1) + "\n")
    if not args.rows:
        write(Path(args.out), rows, steps_list, model.name, sum(r["seconds"] for r in rows))


def write(out: Path, rows: list[dict], steps_list: list[int], model: str, seconds: float) -> None:
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    out.write_text(report(model, rows, steps_list, seconds))


def report(model: str, rows: list[dict], steps_list: list[int], seconds: float) -> str:
    order = [label for label, _ in VARIANTS]
    labels = sorted(dict.fromkeys(r["baseline"] for r in rows), key=lambda x: order.index(x) if x in order else 99)
    prompts = list(dict.fromkeys((r["prompt"], r["target"], r["foil"]) for r in rows))
    at = {(r["prompt"], r["baseline"], r["steps"]): r for r in rows}
    lines = [f"# Integrated gradients: completeness on {model}", "",
             "Produced by `scripts/ig_completeness.py` "
             f"({len(prompts)} prompts, {len(labels)} baselines, steps {', '.join(map(str, steps_list))}; "
             f"{seconds / 60:.0f} CPU minutes). Gap = Captum's convergence delta, "
             "sum(scores) - (f(input) - f(baseline)), in logits of the metric (target, or target - foil); "
             f"converged = |gap| <= {TOL:.0%} of |f(input) - f(baseline)|, the threshold at which "
             "`attribute` warns and faithfulness tables count an example as unconverged.", "",
             "## Summary: median |gap| / |f(input) - f(baseline)| (prompts within 10% / prompts run)", "",
             "| baseline | " + " | ".join(f"{s} steps" for s in steps_list) + " |",
             "|---|" + "---|" * len(steps_list)]
    for label in labels:
        cells = []
        for s in steps_list:
            rel = [at[(p[0], label, s)]["relative_gap"] for p in prompts if (p[0], label, s) in at]
            if not rel:
                cells.append("-")
                continue
            ok = sum(r <= TOL for r in rel)
            cells.append(f"{statistics.median(rel):.3f} ({ok}/{len(rel)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "## Per prompt: f(input) - f(baseline), then the gap at each number of steps", "",
              "| prompt | target / foil | baseline | f(x) - f(b) | "
              + " | ".join(f"gap @{s}" for s in steps_list) + " |",
              "|---|---|---|---|" + "---|" * len(steps_list)]
    for prompt, target, foil in prompts:
        for label in labels:
            if (prompt, label, steps_list[0]) not in at:
                continue
            first = at[(prompt, label, steps_list[0])]
            gaps = [f"{at[(prompt, label, s)]['delta']:+.2f}" if (prompt, label, s) in at else "-" for s in steps_list]
            short = prompt if len(prompt) <= 40 else prompt[:37] + "..."
            lines.append(f"| {short} | {target!r} / {foil!r} | {label} | {first['expected']:.2f} | "
                         + " | ".join(gaps) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
