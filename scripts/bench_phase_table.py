"""Where a whole leaderboard's time went, from the JSON that `workbench bench circuits --json --out X.md` writes
beside its document (issue 51, item 5): per phase (task building, scoring, evaluation, random's draws), per method and
level, and dpa_path's scoring as a share of EAP-IG's, task by task. Given two JSONs (before, after) it puts them side
by side; the phases of one run add up to its wall time less what no unit counts (loading the model, the tables).

    python scripts/bench_phase_table.py AFTER.json [--before BEFORE.json] [--label-before X --label-after Y]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def phases(run: dict[str, Any]) -> dict[str, Any]:
    """Seconds per phase and per (method, phase) of one leaderboard run's JSON."""
    total: dict[str, float] = defaultdict(float)
    by_method: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    share: dict[str, float | None] = {}
    for task in run["tasks"]:
        total["task building"] += float(task.get("ends_seconds", 0.0))
        scoring = {}
        for method, cell in task["methods"].items():
            scoring[method] = float(cell.get("seconds", 0.0))
            phase = "random (draws' evaluation)" if method == "random" else "scoring"
            if method != "random":
                total["scoring"] += scoring[method]
                by_method[method]["scoring"] += scoring[method]
            for level, figures in cell.get("levels", {}).items():
                seconds = float(figures.get("eval_seconds", 0.0))
                key = phase if method == "random" else "evaluation"
                total[key] += seconds
                by_method[method][f"evaluation ({level})"] += seconds
        ig, path16 = scoring.get("eap_ig"), scoring.get("dpa_path:steps=16")
        share[task["label"]] = path16 / ig if ig and path16 is not None else None
    return {"total": dict(total), "by_method": {m: dict(v) for m, v in by_method.items()}, "share": share,
            "wall": float(run.get("seconds", 0.0))}


def _fmt(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:,.1f}"


def table(runs: dict[str, dict[str, Any]]) -> str:
    """Markdown: phases, methods, dpa_path's share of EAP-IG, for one or two runs (label -> run JSON)."""
    got = {label: phases(run) for label, run in runs.items()}
    labels = list(got)
    lines = ["| phase | " + " | ".join(f"{label} (s)" for label in labels) + " |",
             "|---|" + "---:|" * len(labels)]
    names = ["task building", "scoring", "evaluation", "random (draws' evaluation)"]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(_fmt(got[label]["total"].get(name, 0.0)) for label in labels) + " |")
    counted = {label: sum(got[label]["total"].values()) for label in labels}
    lines.append("| rest: wall less the phases (loading, tables; negative where phases overlap) | "
                 + " | ".join(_fmt(got[label]["wall"] - counted[label]) for label in labels) + " |")
    lines.append("| **whole run** | " + " | ".join(f"**{_fmt(got[label]['wall'])}**" for label in labels) + " |")
    ratio = [(got[lb]["total"].get("evaluation", 0.0) + got[lb]["total"].get("random (draws' evaluation)", 0.0))
             / max(got[lb]["total"].get("scoring", 0.0), 1e-9) for lb in labels]
    lines.append("| evaluation (with random's) / scoring | " + " | ".join(f"{r:.1f}" for r in ratio) + " |")
    lines += ["", "| method | phase | " + " | ".join(f"{label} (s)" for label in labels) + " |",
              "|---|---|" + "---:|" * len(labels)]
    methods = sorted({m for lb in labels for m in got[lb]["by_method"]} | {"random"},
                     key=lambda m: list(runs[labels[-1]]["config"]["methods"]).index(m)
                     if m in runs[labels[-1]]["config"]["methods"] else 99)
    for method in methods:
        keys = sorted({k for lb in labels for k in got[lb]["by_method"].get(method, {})})
        for key in keys:
            lines.append(f"| {method} | {key} | "
                         + " | ".join(_fmt(got[lb]["by_method"].get(method, {}).get(key)) for lb in labels) + " |")
    tasks = list(got[labels[-1]]["share"])
    lines += ["", "| dpa_path:steps=16 scoring / eap_ig scoring | " + " | ".join(tasks) + " | all |",
              "|---|" + "---:|" * (len(tasks) + 1)]
    for label in labels:
        run = runs[label]
        sums = [0.0, 0.0]
        for task in run["tasks"]:
            cells = task["methods"]
            if "eap_ig" in cells and "dpa_path:steps=16" in cells:
                sums[0] += float(cells["dpa_path:steps=16"]["seconds"])
                sums[1] += float(cells["eap_ig"]["seconds"])
        share = got[label]["share"]
        lines.append(f"| {label} | " + " | ".join("" if share.get(t) is None else f"{share[t]:.2f}" for t in tasks)
                     + f" | {sums[0] / sums[1]:.2f} |" if sums[1] else " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("after", type=Path)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--label-before", default="before")
    parser.add_argument("--label-after", default="after")
    args = parser.parse_args()
    runs = {}
    if args.before:
        runs[args.label_before] = json.loads(args.before.read_text())
    runs[args.label_after] = json.loads(args.after.read_text())
    print(table(runs))


if __name__ == "__main__":
    main()
