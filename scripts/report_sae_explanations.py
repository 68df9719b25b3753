"""The stored feature explanations of the shipped smollm2-135m dictionaries (and MLP neurons): per dictionary, the
median and mean simulation score over its scored features, how many score above 0.5, which kinds of rule won, the
build time recorded in the files; then, on the IOI prompt, where the name features rank under each ranking of the
SAE page (activation, activation ÷ held-out max, informative).

    nice -n 10 .venv/bin/python scripts/report_sae_explanations.py [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from pathlib import Path

IOI = "When Mary and John went to the store, John gave a drink to"


def kind(rule: dict | None) -> str:
    if not rule:
        return "none"
    t = rule["token"]["kind"] + ("+context" if rule.get("context") else "")
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/attribution/sae_explanations_smollm2.md")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    import workbench as wb
    from attribution.sae.explanation_store import load_explanations
    from attribution.sae.explore import RANKS, prompt_features
    from attribution.sae.units import neurons_root, open_dictionary

    dirs = sorted(Path("data/saes").iterdir()) + sorted(neurons_root().glob("smollm2-135m-L*-neurons"))
    lines = ["| dictionary | scored | median | mean | > 0.5 | rules: category / tokens / any+context / with context"
             " | forward s | explain s |", "|---|---|---|---|---|---|---|---|"]
    for d in dirs:
        data = load_explanations(d)
        if data is None:
            continue
        scores = [f["score"] for f in data["features"] if f["score"] is not None]
        kinds = Counter(kind(f["rule"]) for f in data["features"] if f["rule"])
        ctx = sum(v for k, v in kinds.items() if k.endswith("+context"))
        lines.append(f"| {d.name} | {len(scores)} | {statistics.median(scores):.3f} | {statistics.mean(scores):.3f} | "
                     f"{sum(s > 0.5 for s in scores)} | {kinds['category'] + kinds['category+context']} / "
                     f"{kinds['tokens'] + kinds['tokens+context']} / {kinds['any+context']} / {ctx} | "
                     f"{data.get('forward_seconds')} | {data.get('explain_seconds')} |")
    m = wb.load("smollm2-135m")
    lines += ["", f"IOI prompt {IOI!r}, position 0 left out: ranks of the features whose explanation starts with "
              "'first names' (f2231 of the layer-6 SAE is the issue's name feature).", "",
              "| dictionary | name features | " + " | ".join(RANKS) + " |", "|---|---|" + "---|" * len(RANKS)]
    for d in sorted(Path("data/saes").iterdir()):
        dic = open_dictionary(d)
        from attribution.sae.explore import open_dashboards

        db = open_dashboards(dic)
        if db.explanations is None:
            continue
        names = {f for f, e in enumerate(db.explanations) if e["text"].startswith("first names")}
        if "L6-resid" in d.name:
            names.add(2231)  # the name feature, whatever its explanation
        ranks = {}
        for r in RANKS:
            rows = prompt_features(m, dic, IOI, db, rank=r, top=db.n_units)["rows"]
            ranks[r] = [i + 1 for i, row in enumerate(rows) if row["feature"] in names][:3]
        shown = sorted(names & {row["feature"] for row in prompt_features(m, dic, IOI, db, top=30)["rows"]})
        lines.append(f"| {d.name} | {shown or '-'} | " + " | ".join(str(ranks[r]) for r in RANKS) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
