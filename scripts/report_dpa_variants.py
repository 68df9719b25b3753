"""The DPA-variants document (issue 25 item 4): variants chosen on the validation split, reported on test.

Reads, per model, the validation run (``workbench bench circuits --eval-split validation``, its JSON under
results/circuits/dpa_variants/) and the model's leaderboard run on test (results/circuits/bench_<model>.json),
and writes results/circuits/bench_dpa_variants.md: validation tables with each variant's rank, the choice (the
best mean rank over every task of both models, CPR and CMD counted alike), the test tables of every DPA variant
the leaderboard ran, and whether the rule for changing the default holds (a variant better than ``dpa`` on both
CPR and CMD in a majority of the tasks of each model, on test).

    python scripts/report_dpa_variants.py --models smollm2-135m,gemma3-270m [--reading FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from circuits.bench.report import best_per_task  # noqa: E402
from core.errors import OutputError  # noqa: E402
from core.store import write_atomic  # noqa: E402

RESULTS = ROOT / "results" / "circuits"


def is_dpa(method: str) -> bool:
    return method.split(":")[0] in ("dpa", "dpa_norm", "dpa_cf")


def cells(result: dict) -> dict[tuple[str, str], dict]:
    """(task, method) -> the edge level's figures."""
    return {(t["task"], m): r["levels"]["edge"] for t in result["tasks"] for m, r in t["methods"].items()
            if "edge" in r["levels"]}


def ranks(result: dict, methods: list[str]) -> dict[str, float]:
    """Each method's mean rank over the tasks (1 best), CPR (high) and CMD (low) counted alike."""
    got = cells(result)
    tasks = [t["task"] for t in result["tasks"]]
    total = {m: 0.0 for m in methods}
    for task in tasks:
        for key, sign in (("cpr", -1), ("cmd", 1)):
            order = sorted(methods, key=lambda m: sign * got[(task, m)][key])
            for i, m in enumerate(order, 1):
                total[m] += i
    return {m: total[m] / (2 * len(tasks)) for m in methods}


def variants_differ(val: dict[str, dict]) -> str | None:
    """Why the models' validation runs cannot be ranked together (None when they can): the choice is a mean rank
    over every model, so each run must hold the same variants."""
    first, *rest = val
    want = list(val[first]["config"]["methods"])
    for model in rest:
        have = set(val[model]["config"]["methods"])
        lacks, extra = set(want) - have, have - set(want)
        if lacks or extra:
            short, other, missing = (model, first, lacks) if lacks else (first, model, extra)
            return (f"validation_{short}.json lacks {', '.join(sorted(missing))}, which validation_{other}.json "
                    f"ran: rerun it with the same --methods")
    return None


def fmt(lv: dict | None) -> str:
    if lv is None:
        return "-"
    return (f"{lv['cpr']:.3f} [{lv['cpr_ci'][0]:.2f}, {lv['cpr_ci'][1]:.2f}] / "
            f"{lv['cmd']:.3f} [{lv['cmd_ci'][0]:.2f}, {lv['cmd_ci'][1]:.2f}]")


def table(result: dict, methods: list[str], extra: dict[str, str] | None = None) -> list[str]:
    got = cells(result)
    tasks = [t["task"] for t in result["tasks"]]
    head = "| variant | " + " | ".join(tasks) + (" | " + " | ".join(extra) if extra else "") + " |"
    lines = [head, "|---" * (len(tasks) + 1 + len(extra or {})) + "|"]
    for m in methods:
        row = [fmt(got.get((t, m))) for t in tasks]
        if extra:
            row += [extra[k].get(m, "-") for k in extra]
        lines.append(f"| `{m}` | " + " | ".join(row) + " |")
    return lines


def wins(result: dict, method: str, base: str = "dpa") -> tuple[int, int, int]:
    """Tasks where ``method`` beats ``base`` on CPR, on CMD, on both (point estimates)."""
    got = cells(result)
    cpr = cmd = both = 0
    for t in result["tasks"]:
        a, b = got.get((t["task"], method)), got.get((t["task"], base))
        if a is None or b is None:
            continue
        c1, c2 = a["cpr"] > b["cpr"], a["cmd"] < b["cmd"]
        cpr, cmd, both = cpr + c1, cmd + c2, both + (c1 and c2)
    return cpr, cmd, both


def goal_lines(test: dict[str, dict]) -> list[str]:
    """The issue's goal on the test leaderboards: cells (task x model) where a DPA variant has the best CPR, the
    best CMD, both; and each DPA variant's scoring seconds over EAP-IG's (all tasks summed)."""
    lines = ["## The goal: a DPA variant best on CPR and CMD in a majority of cells at <= 1/5 of EAP-IG's cost", "",
             "| model | task | best CPR | best CMD | a DPA variant best on both |", "|---|---|---|---|---|"]
    n = cpr = cmd = both = split = 0
    for model, r in test.items():
        for task, b in best_per_task(r, "edge").items():
            c1, c2 = is_dpa(b["cpr"]["method"]), is_dpa(b["cmd"]["method"])
            same = c1 and b["cpr"]["method"] == b["cmd"]["method"]
            n, cpr, cmd, both, split = n + 1, cpr + c1, cmd + c2, both + same, split + (c1 and c2 and not same)
            said = "yes" if same else "two variants" if c1 and c2 else "no"
            lines.append(f"| {model} | {task} | {b['cpr']['method']}{' *' if b['cpr']['clear'] else ''} | "
                         f"{b['cmd']['method']}{' *' if b['cmd']['clear'] else ''} | {said} |")
    lines += ["", f"(* interval clear of the runner-up's.) A DPA variant is best on CPR in {cpr} of {n} cells, on CMD "
              f"in {cmd}; the same variant on both in {both} (two different variants in {split} more); the goal "
              f"needs one variant best on both in more than {n // 2}.", ""]
    for model, r in test.items():
        secs = {m: sum(t["methods"][m]["seconds"] for t in r["tasks"]) for m in r["config"]["methods"]
                if all(m in t["methods"] for t in r["tasks"])}
        if "eap_ig" in secs and secs["eap_ig"] > 0:
            lines.append(f"- {model}, scoring seconds over all tasks, as a fraction of EAP-IG's ({secs['eap_ig']:.0f} "
                         "s): " + ", ".join(f"`{m}` {secs[m] / secs['eap_ig']:.2f}" for m in secs if is_dpa(m)) + ".")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--reading", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_dpa_variants.md")
    args = ap.parse_args()
    models = args.models.split(",")
    val = {m: json.loads((RESULTS / "dpa_variants" / f"validation_{m}.json").read_text()) for m in models}
    test = {m: json.loads((RESULTS / f"bench_{m}.json").read_text()) for m in models}
    if why := variants_differ(val):
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)

    lines = ["# DPA variants on the circuit benchmark: chosen on validation, reported on test", "",
             "Issue 25 item 4. Generated by `scripts/report_dpa_variants.py` from the validation runs "
             "(results/circuits/dpa_variants/validation_<model>.{md,json}) and each model's leaderboard on test "
             "(results/circuits/bench_<model>.{md,json}). Cells: CPR [95% interval] / CMD [95% interval], edge "
             "level, MIB's grid, `topk`; circuits scored on the 16 train prompts of each task.", "",
             "| variant | what changes against `dpa` |", "| --- | --- |",
             "| `dpa` | the default: norm scales frozen, path weights q 0.25, k 0.25, v 0.5, gate 0.5, up 0.5 |",
             "| `dpa_norm` | norm-aware: the target goes through each RMSNorm's (LayerNorm's) exact Jacobian "
             "transpose instead of a frozen scale |",
             "| `dpa_cf` | counterfactual-aware: each receiver's target is the mean of DPA's targets on the clean "
             "and the counterfactual run |",
             "| `dpa:w_q=0:w_k=0:w_v=1` | the path weights of DPA's exact linearisation (no query/key paths) |",
             "| `dpa:w_q=1:w_k=1:w_v=1:w_gate=1:w_up=1` | every path at weight 1 (the frozen-norm gradient) |",
             "| `dpa_norm:w_q=0:w_k=0:w_v=1` | both: norm-aware with the exact-linearisation weights |", ""]
    methods = list(val[models[0]]["config"]["methods"])
    mean_rank = {m: 0.0 for m in methods}
    for model in models:
        r = val[model]
        rk = ranks(r, methods)
        for m in methods:
            mean_rank[m] += rk[m] / len(models)
        n = r["tasks"][0]["n_test"]
        lines += [f"## Validation: {model} ({n} validation prompts per task; whole run {r['seconds'] / 60:.1f} min)",
                  ""]
        lines += table(r, methods, {"mean rank": {m: f"{rk[m]:.2f}" for m in methods}})
        lines.append("")
    chosen = min((m for m in methods if m != "dpa"), key=lambda m: mean_rank[m])
    lines += ["## The choice", "", "Mean rank over every task of both models (1 is best; CPR and CMD counted "
              "alike): " + ", ".join(f"`{m}` {mean_rank[m]:.2f}" for m in sorted(methods, key=mean_rank.get)) + ".",
              "", f"Chosen on validation: **`{chosen}`**.", ""]
    verdicts = []
    for model in models:
        r = test[model]
        ran = [m for m in r["config"]["methods"] if is_dpa(m)]
        lines += [f"## Test: {model} (the leaderboard run; {r['tasks'][0]['n_test']} test prompts per task)", ""]
        lines += table(r, ran + (["eap_ig"] if "eap_ig" in r["config"]["methods"] else []))
        n_tasks = len(r["tasks"])
        lines += ["", "Against `dpa` on test (tasks better on CPR, on CMD, on both; of " + str(n_tasks) + "): " +
                  ", ".join(f"`{m}` {'/'.join(map(str, wins(r, m)))}" for m in ran if m != "dpa") + ".", ""]
        if chosen in ran:
            verdicts.append(wins(r, chosen)[2] > n_tasks / 2)
        else:
            verdicts.append(None)
    if all(v is True for v in verdicts):
        verdict = f"`{chosen}` beats `dpa` on both metrics in a majority of tasks on every model: the default changes."
    elif any(v is None for v in verdicts):
        verdict = f"`{chosen}` was not run on test for every model: the default stays `dpa`."
    else:
        verdict = (f"`{chosen}` does not beat `dpa` on both metrics in a majority of tasks on every model: the "
                   "default stays `dpa`.")
    lines += ["## The rule for the default", "", verdict, ""]
    lines += goal_lines(test)
    if args.reading:
        lines += ["## Reading", "", args.reading.read_text().strip(), ""]
    write_atomic(args.out, "\n".join(lines), "the variants report", OutputError)
    print(args.out, "chosen:", chosen, "verdicts:", verdicts)


if __name__ == "__main__":
    main()
