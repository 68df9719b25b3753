"""Feature-level faithfulness of DPA vs gradient x activation vs random features on smollm2-135m.

    nice -n 19 python scripts/bench_feature_dpa.py [--n 50] [--saes PATH,PATH] [--grid 1,2,5,10,20,50]
        [--out results/attribution/feature_dpa_smollm2.md]

For each dictionary (default: every smollm2-135m dictionary under data/saes) and each prompt set (the first
N IOI prompts of data/prompts/ioi.jsonl and the first N factual prompts of data/prompts/facts.jsonl, with
their foils), the active (position, feature) pairs are ranked three ways and the top k ablated (the
activation minus their contributions: the error term is kept), one batched forward per prompt; the
table gives the mean target-minus-foil logit drop over the grid of k, normalised by the clean logit
difference, and the scoring cost per prompt (DPA: cached forward + top-down pass; gradient: forward +
backward; both score the same features). Position 0 (the attention sink) is never ablated.
Writes the Markdown table, a JSON twin and a plotly figure (HTML) next to it.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50, help="prompts per set")
    ap.add_argument("--saes", default="", help="dictionary paths, comma-separated (default: all of smollm2)")
    ap.add_argument("--grid", default="1,2,5,10,20,50")
    ap.add_argument("--sets", default="ioi,facts")
    ap.add_argument("--out", default=str(ROOT / "results/attribution/feature_dpa_smollm2.md"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--html", action="store_true", help="also write the curves as a plotly page beside --out "
                    "(not committed: the JSON twin holds the numbers)")
    ap.add_argument("--dpa", default="", help="DPA parameters, e.g. w_q=0,w_k=0,w_v=1 or act_mode=derivative "
                    "(default: the spec's)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import workbench as wb
    from attribution.features.faithfulness import METHODS, curve_figure, feature_curve
    from attribution.features.placement import load_dictionaries
    from attribution.sae.dictionary import list_dictionaries
    from core.prompt_files import read_prompts

    model = wb.load("smollm2-135m")
    if args.saes:  # in the order given
        dicts = load_dictionaries(args.saes)
    else:  # the middle layer's SAE and transcoder first: the table fills in as the run goes
        dicts = sorted(list_dictionaries(model="smollm2-135m"), key=lambda d: (abs((d.layer or 0) - 12), d.layer,
                                                                               d.is_transcoder))
    grid = tuple(int(k) for k in args.grid.split(","))
    dpa = {k: (v if k == "act_mode" else float(v)) for k, v in (kv.split("=") for kv in args.dpa.split(",") if kv)}
    sets = {name: read_prompts(str(ROOT / f"data/prompts/{name}.jsonl"), args.n) for name in args.sets.split(",")}
    started = time.perf_counter()
    results = []
    for d in dicts:
        for name, rows in sets.items():
            t0 = time.perf_counter()
            try:
                curve = feature_curve(model, rows, d, grid=grid, **dpa)
            except Exception as exc:  # one broken dictionary must not lose the others' rows
                print(f"{d.name} {name}: FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            print(f"{d.name} {name}: auc " + " ".join(f"{m} {curve.auc(m):.3f}" for m in METHODS)
                  + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
            results.append({"set": name, "kind": d.kind, "layer": d.layer,
                            "explained_variance": d.metrics.get("explained_variance"), **curve.to_json(),
                            "normalized": {m: curve.normalized(m) for m in METHODS}})
            _write(args, results, grid, time.perf_counter() - started, dicts)
    if results and args.html:
        from attribution.features.faithfulness import FeatureCurve

        curves = [FeatureCurve(r["dictionary"] + f" ({r['set']})", r["grid"], r["n_prompts"], r["clean"],
                               r["drop"], r["drop_sem"], r["seconds"], r["n_active"]) for r in results]
        curve_figure(curves).write_html(str(Path(args.out).with_suffix(".html")), include_plotlyjs="cdn")


def _write(args, results: list[dict], grid: tuple[int, ...], seconds: float, dicts) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(out.with_suffix(".json")).write_text(json.dumps(results, indent=1))
    lines = [
        "# Feature-level DPA: faithfulness and cost on smollm2-135m",
        "",
        f"`nice -n 19 python scripts/bench_feature_dpa.py --n {args.n} --grid {args.grid}"
        + (f" --dpa {args.dpa}" if args.dpa else "") + f"` ({platform.machine()}, "
        f"{args.threads} torch thread(s), shared machine; {seconds:.0f} s in all).",
        "",
        "Per dictionary and prompt set: the active (position, feature) pairs of each prompt (position 0 "
        "excluded) are ranked by feature-level DPA (act x decoder direction . DPA target vector at hook_out), "
        "by gradient x activation (act x decoder direction . gradient of the logit difference at hook_out) and "
        "at random; the top k are ablated (hook_out minus their contributions; the error term is kept). "
        "Cells: mean logit drop / mean clean logit difference (higher = the ranking found the features the "
        "answer depends on). AUC: mean over the grid. Cost: seconds per prompt to score the features.",
        "",
        "| dictionary | set | prompts | active pairs | clean diff | method | " + " | ".join(f"k={k}" for k in grid)
        + " | AUC | s/prompt |",
        "|---|---|---|---|---|---|" + "---|" * len(grid) + "---|---|",
    ]
    for r in results:
        for m in ("dpa", "gradient", "random"):
            cost = r["seconds"].get(m)
            lines.append(
                f"| {r['dictionary']} | {r['set']} | {r['n_prompts']} | {r['n_active']:.0f} | {r['clean']:.2f} "
                f"| {m} | "
                + " | ".join(f"{v:.3f}" for v in r["normalized"][m])
                + f" | **{r['auc'][m]:.3f}** | {'' if cost is None else f'{cost:.3f}'} |")
    lines += ["", f"Dictionaries: {', '.join(d.name for d in dicts)}.", ""]
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
