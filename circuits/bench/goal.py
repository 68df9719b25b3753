"""Issue 39's goal read off one benchmark result: per task, is a DPA variant best or tied best by intervals on
both CPR and CMD, at no more than a third of EAP-IG's scoring time in the same run?

"Tied best by intervals": the variant's 95% interval overlaps the best method's (random aside). Cost is the
scoring time on train (finding the circuit); evaluating the curves costs every method the same and is left out.
"""

from __future__ import annotations

from typing import Any

COST_LIMIT = 1 / 3  # the goal's ceiling on a DPA variant's scoring time, as a fraction of EAP-IG's


def is_dpa(method: str) -> bool:
    """dpa itself and its variants (dpa_cf, dpa_path:steps=16, dpa:w_v=0.7, ...)."""
    return method == "dpa" or method.startswith(("dpa_", "dpa:"))


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def dpa_goal(result: dict[str, Any], level: str) -> dict[str, dict[str, Any]]:
    """{task: {"cpr": [variants best or tied], "cmd": [...], "both": [...], "cost": {variant: scoring time /
    EAP-IG's}, "met": [variants on both within the cost limit]}} for the tasks where EAP-IG and a DPA variant ran
    at ``level``."""
    out: dict[str, dict[str, Any]] = {}
    for t in result["tasks"]:
        got = {m: r for m, r in t["methods"].items() if m != "random" and level in r.get("levels", {})}
        variants = [m for m in got if is_dpa(m)]
        if "eap_ig" not in got or not variants:
            continue
        row: dict[str, Any] = {}
        for key, sign in (("cpr", -1), ("cmd", 1)):
            best = min(got, key=lambda m: sign * got[m]["levels"][level][key])
            best_ci = got[best]["levels"][level][f"{key}_ci"]
            row[key] = [m for m in variants if m == best or _overlap(got[m]["levels"][level][f"{key}_ci"], best_ci)]
        ig_seconds = got["eap_ig"]["seconds"]
        row["cost"] = {m: got[m]["seconds"] / ig_seconds if ig_seconds > 0 else None for m in variants}
        row["both"] = [m for m in row["cpr"] if m in row["cmd"]]
        row["met"] = [m for m in row["both"] if row["cost"][m] is not None and row["cost"][m] <= COST_LIMIT]
        out[t.get("label", t["task"])] = row
    return out


def goal_lines(result: dict[str, Any]) -> list[str]:
    """The document's section: one table per level where the goal can be read."""
    lines: list[str] = []
    for level in result["config"]["levels"]:
        goal = dpa_goal(result, level)
        if not goal:
            continue
        lines += ["", f"## {level.capitalize()} level: the DPA goal (a DPA variant best, or tied best by intervals, "
                  f"on both CPR and CMD, at <= 1/3 of EAP-IG's scoring time)", "",
                  "| task | DPA variants best or tied on CPR | on CMD | scoring time / EAP-IG's | goal met by |",
                  "|---|---|---|---|---|"]
        for task, row in goal.items():
            cost = ", ".join(f"{m} {c:.2f}" if c is not None else f"{m} n/a" for m, c in row["cost"].items())
            lines.append(f"| {task} | {', '.join(row['cpr']) or '-'} | {', '.join(row['cmd']) or '-'} | {cost} | "
                         f"{', '.join(row['met']) or 'no'} |")
        lines += ["", goal_summary(goal)]
    return lines


def goal_summary(goal: dict[str, dict[str, Any]]) -> str:
    """One sentence: in how many tasks the goal is met, by any variant and by each variant on its own."""
    met = sum(bool(r["met"]) for r in goal.values())
    both = sum(bool(r["both"]) for r in goal.values())
    # Picking the variant per task after the fact flatters DPA; a variant fixed in advance is the fair count.
    fixed = ", ".join(f"{m} {n}" for m, n in met_by_variant(goal).items())
    return (f"Goal met in {met} of {len(goal)} tasks; a DPA variant best or tied on both metrics at any cost in "
            f"{both} of {len(goal)}. By one variant fixed in advance: {fixed}.")


def met_by_variant(goal: dict[str, dict[str, Any]]) -> dict[str, int]:
    """{variant: the number of tasks where that one variant meets the goal}, in the order the variants ran."""
    counts: dict[str, int] = {}
    for row in goal.values():
        for m in row["cost"]:
            counts[m] = counts.get(m, 0) + (m in row["met"])
    return counts
