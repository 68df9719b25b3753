"""The benchmark's results document: leaderboard tables (tasks x methods) of CPR, CMD, intervals and
seconds per level, the settings they were measured under, and the raw figures as JSON beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from circuits.bench.goal import goal_lines
from core.errors import OutputError
from core.store import write_atomic

# What each task stands for in MIB's circuit-localization track (tasks mib-bench/ioi, copycolors_mcqa,
# arithmetic_addition/_subtraction, arc_easy/_challenge), what matches and where it departs. Every task is
# rebuilt per model here (no data set comes from a hub), so none uses MIB's rows.
MIB_TASKS: dict[str, tuple[str, str, str]] = {  # task -> (MIB's task, what matches, where it departs)
    "ioi": ("IOI (mib-bench/ioi)",
            "Wang et al.'s templates; MIB's default counterfactual, the S2 -> IO flip (the subject's second mention "
            "becomes the indirect object, so the answer flips); metric IO - S logit difference; CPR/CMD as MIB's",
            "our own 5 templates and 22 names, rows kept only where the model answers top-1; "
            "ioi:counterfactual=abc is MIB's ABC kind; ioi:counterfactual=names (both names replaced) is the "
            "workbench's older counterfactual, the one the leaderboards shipped before issue 39 used"),
    "mcqa": ("MCQA (mib-bench/copycolors_mcqa)",
             "copy-colours questions with lettered options; the counterfactual permutes the options so the answer "
             "letter changes; metric clean - counterfactual letter logit difference",
             "2 options and one solved example, not MIB's 4 options zero-shot (small models answer no letter "
             "without the example); our own colours and objects"),
    "add": ("Arithmetic, addition (mib-bench/arithmetic_addition)",
            "two operands; the counterfactual changes an operand so the answer changes; logit difference",
            "two-digit operands with one solved example, the first digit of the result only (digits are single "
            "tokens here); MIB scores Llama-3 on its own operand ranges"),
    "sub": ("Arithmetic, subtraction (mib-bench/arithmetic_subtraction)", "as add", "as add"),
    "greater_than": ("none: Hanna et al. 2023's greater-than (EAP-IG's task), not an MIB task",
                     "Hanna et al.'s template and its 01 counterfactual; probability mass above minus below",
                     "the decade is the next token (digit tokenizers); not in MIB's track"),
    "facts": ("none: the workbench's own factual recall", "-", "not an MIB task"),
    "induction": ("none: the workbench's own induction on random word sequences", "-", "not an MIB task"),
}


def mib_lines(tasks: list[str]) -> list[str]:
    """The document's task-by-task correspondence with MIB, for the tasks of the run (a custom file: its own)."""
    lines = ["", "## Tasks and MIB", "",
             "What each task stands for in MIB's circuit-localization track, what matches MIB's definition and where "
             "it departs (MIB's ARC-Easy / ARC-Challenge are not built here).", "",
             "| task | MIB's task | matches | departs |", "|---|---|---|---|"]
    for task in tasks:
        mib_task, same, differs = MIB_TASKS.get(task.split(":")[0], ("none: a custom task file", "-", "-"))
        lines.append(f"| {task} | {mib_task} | {same} | {differs} |")
    return lines


def _cell(level: dict[str, Any] | None, key: str) -> str:
    """A figure with its interval; a curve whose every size below the full one pruned to no edge is said
    ("empty"), not scored, and one with some empty sizes says how many."""
    if not level:
        return "-"
    empty, below = empty_of(level, key)
    if below and empty == below:
        return f"empty ({empty}/{below} sizes)"
    lo, hi = level[f"{key}_ci"]
    return f"{level[key]:.3f} [{lo:.2f}, {hi:.2f}]" + (f" ({empty} sizes empty)" if empty else "")


def empty_of(level: dict[str, Any], key: str) -> tuple[int, int]:
    """(sizes below the full one that pruned to no edge, sizes below the full one) of one curve."""
    fractions = level.get("curves", {}).get(key, {}).get("fractions", [])
    return int(level.get("empty", {}).get(key, 0)), sum(1 for f in fractions if f < 1.0)


def leaderboard(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Flat rows {task, method, level, cpr, cpr_lo, cpr_hi, cmd, cmd_lo, cmd_hi, seconds, eval_seconds}."""
    rows = []
    for t in result["tasks"]:
        for method, res in t["methods"].items():
            for level, lv in res["levels"].items():
                rows.append({"task": t["task"], "method": method, "level": level, "cpr": lv["cpr"],
                             "cpr_lo": lv["cpr_ci"][0], "cpr_hi": lv["cpr_ci"][1], "cmd": lv["cmd"],
                             "cmd_lo": lv["cmd_ci"][0], "cmd_hi": lv["cmd_ci"][1], "seconds": res["seconds"],
                             "eval_seconds": lv["eval_seconds"], "empty_cpr": empty_of(lv, "cpr")[0],
                             "empty_cmd": empty_of(lv, "cmd")[0]})
    return {"rows": rows}


def markdown(result: dict[str, Any], reading: str = "") -> str:
    cfg = result["config"]
    tasks = [t.get("label", t["task"]) for t in result["tasks"]]
    methods = cfg["methods"]
    split = cfg.get("eval_split", "test")  # where the curves were measured (validation: choosing variants)
    lines = [f"# Circuit benchmark (MIB metrics) on {result['model']}", "",
             "Generated by `workbench bench circuits` (circuits/bench/). CPR: area under the normalised "
             "faithfulness curve over MIB's grid of circuit sizes (0.1% ... 100% of the edges or nodes), signed "
             "scores, higher is better (a perfect curve gives 0.999). CMD: area between the curve and 1, |scores|, "
             f"lower is better. Brackets: 95% percentile bootstrap interval over the {split} prompts. Circuits are "
             f"scored on the train split and evaluated on the {split} split with counterfactual (patching) ablation.",
             "",
             f"Settings: {cfg['n_train']} train prompts per task (node-level activation patching: "
             f"{cfg['n_patch']}), {cfg['n_test']} {split} prompts (at most), selection `{cfg['selection']}`, "
             f"{cfg['n_boot']} bootstrap resamples, batch size {cfg['batch_size']}, random baseline the mean of "
             f"{cfg.get('random_seeds', 1)} draw{'s' if cfg.get('random_seeds', 1) != 1 else ''}; whole run "
             f"{result['seconds'] / 60:.1f} min.", ""]
    lines += ["Rows: the task's rows per split (train / validation / test; a custom file's after the filter); "
              f"train and {split}: the prompts this run used.", "",
              f"| task | metric | source | rows | train | {split} | m(full) | m(empty) |",
              "|---|---|---|---|---|---|---|---|"]
    for t in result["tasks"]:
        rows = t.get("rows")
        held = " / ".join(str(rows.get(s, 0)) for s in ("train", "validation", "test")) if rows else "-"
        lines.append(f"| {t.get('label', t['task'])} | {t['metric']} | {t['source']} | {held} | {t['n_train']} | "
                     f"{t['n_test']} | {t['m_full']:.3f} | {t['m_empty']:.3f} |")
    for level in cfg["levels"]:
        for key, title in (("cpr", "CPR (higher is better)"), ("cmd", "CMD (lower is better)")):
            lines += ["", f"## {level.capitalize()} level: {title}", "",
                      "| method | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
            for m in methods:
                cells = [_cell(t["methods"].get(m, {}).get("levels", {}).get(level), key) for t in result["tasks"]]
                if all(c == "-" for c in cells):
                    continue
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += width_lines(result)
    lines += mib_lines(tasks)
    for level in cfg["levels"]:
        lines += _best_lines(result, level)
    lines += goal_lines(result)
    lines += _agreement_lines(result, methods, tasks)
    lines += ["", "## Seconds (scoring on train; evaluation of all curves in parentheses)", "",
              "| method | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for m in methods:
        cells = []
        for t in result["tasks"]:
            res = t["methods"].get(m)
            if res is None:
                cells.append("-")
                continue
            ev = sum(lv["eval_seconds"] for lv in res["levels"].values())
            cells.append(f"{res['seconds']:.1f} ({ev:.0f})")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    if reading:
        lines += ["", "## Reading", "", reading.strip()]
    return "\n".join(lines) + "\n"


def interval_widths(result: dict[str, Any], level: str, key: str) -> list[list[float]]:
    """Per task, the widths (hi - lo) of every method's 95% interval of CPR or CMD at one level."""
    return [[lv[f"{key}_ci"][1] - lv[f"{key}_ci"][0] for res in t["methods"].values()
             if (lv := res.get("levels", {}).get(level)) is not None] for t in result["tasks"]]


def width_lines(result: dict[str, Any]) -> list[str]:
    """How wide the intervals are: per task and (level, metric), the median width over methods (the widest)."""
    tasks = [t.get("label", t["task"]) for t in result["tasks"]]
    lines = ["", "## Interval widths (95% bootstrap interval hi - lo: median over methods, widest in parentheses)",
             "", "| level, metric | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for level in result["config"]["levels"]:
        for key in ("cpr", "cmd"):
            cells = []
            for widths in interval_widths(result, level, key):
                w = sorted(widths)
                cells.append(f"{w[len(w) // 2]:.3f} ({w[-1]:.3f})" if w else "-")
            lines.append(f"| {level} {key.upper()} | " + " | ".join(cells) + " |")
    return lines


def best_per_task(result: dict[str, Any], level: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Per task, the best method by CPR (highest) and by CMD (lowest) at ``level``, random aside: {task: {"cpr":
    {method, value, runner_up, clear}}}; clear: its interval does not overlap the runner-up's."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for t in result["tasks"]:
        got = {m: r["levels"][level] for m, r in t["methods"].items() if m != "random" and level in r["levels"]}
        if not got:
            continue
        out[t["task"]] = {}
        for key, sign in (("cpr", -1), ("cmd", 1)):
            order = sorted(got, key=lambda m: sign * got[m][key])
            best = order[0]
            second = order[1] if len(order) > 1 else None
            lo, hi = got[best][f"{key}_ci"]
            clear = second is not None and (lo > got[second][f"{key}_ci"][1] if key == "cpr"
                                             else hi < got[second][f"{key}_ci"][0])
            out[t["task"]][key] = {"method": best, "value": got[best][key], "runner_up": second, "clear": clear}
    return out


def _best_lines(result: dict[str, Any], level: str) -> list[str]:
    best = best_per_task(result, level)
    if not best:
        return []
    lines = ["", f"## {level.capitalize()} level: best per task (random aside; * interval clear of the runner-up's)",
             "", "| task | best CPR | runner-up | best CMD | runner-up |", "|---|---|---|---|---|"]
    for task, b in best.items():
        cpr, cmd = b["cpr"], b["cmd"]
        lines.append(f"| {task} | {cpr['method']} {cpr['value']:.3f}{' *' if cpr['clear'] else ''} | "
                     f"{cpr['runner_up'] or '-'} | {cmd['method']} {cmd['value']:.3f}{' *' if cmd['clear'] else ''} | "
                     f"{cmd['runner_up'] or '-'} |")
    return lines


def agreement_cells(result: dict[str, Any]) -> dict[str, dict[str, str]]:
    """{method: {task: "Spearman / Pearson"}} of the tasks that patched a sample of edges, methods in the config's
    order (the document's table and the app's)."""
    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    found = {t["task"]: t["patching_agreement"] for t in result["tasks"] if t.get("patching_agreement")}
    out: dict[str, dict[str, str]] = {}
    for m in result["config"]["methods"]:
        row = {task: fmt(a["methods"][m]["spearman"]) + " / " + fmt(a["methods"][m]["pearson"])
               for task, a in found.items() if m in a["methods"]}
        if row:
            out[m] = row
    return out


def _agreement_lines(result: dict[str, Any], methods: list[str], tasks: list[str]) -> list[str]:
    """The table of each method's agreement with activation patching on a sample of edges (when one ran)."""
    cells = agreement_cells(result)
    if not cells:
        return []
    found = [t["patching_agreement"] for t in result["tasks"] if t.get("patching_agreement")]
    sizes = sorted({f"{a['n_edges']} edges, {a['n_prompts']} prompts" for a in found})
    lines = ["", "## Edge level: agreement with activation patching on a sample (Spearman / Pearson)", "",
             f"Exact single-edge patching effects of a seeded random sample ({'; '.join(sizes)}: the train prompts "
             "the methods scored), against each method's edge scores on the same edges. A uniform sample is mostly "
             "edges with tiny effects: Spearman reads the ordering of that bulk, Pearson the few heavy edges.", "",
             "| method | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for m, row in cells.items():
        lines.append(f"| {m} | " + " | ".join(row.get(t, "-") for t in tasks) + " |")
    return lines


def write_document(result: dict[str, Any], path: Path, reading: str = "") -> tuple[Path, Path]:
    """The Markdown document at ``path`` and its JSON (same stem) beside it."""
    path = Path(path)
    json_path = path.with_suffix(".json")
    # the store's writer: the umask's modes (not mkstemp's 0600), no temporary left, a one-line OutputError
    write_atomic(json_path, json.dumps(result, indent=1, allow_nan=False), "the benchmark's JSON", OutputError)
    write_atomic(path, markdown(result, reading), "the benchmark document", OutputError)
    return path, json_path
