"""``workbench bench circuits``: the circuit benchmark (MIB's CPR and CMD) of every method on every task.

Runs in this process with a progress bar (``--workers N`` runs tasks in N processes, each loading the
model). Writes the results document (Markdown and its JSON) and a run. Bad input (an unknown task or
method, a split too small, a task without counterfactuals) is one line and exit 2, before anything runs
or is saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from workbench.cli import JSON_OPTION, console, emit

# The defaults measured: 5 tasks x these 4 methods at edge level, 16 train / 12 test prompts, took 33 min with
# --workers 3 on the shared 2-core machine (results/circuits/bench_smollm2-135m.md).
DEFAULT_METHODS = ["random", "eap", "eap_ig", "dpa"]


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Benchmarks.", no_args_is_help=True)
    group.command("circuits")(circuits)
    app.add_typer(group, name="bench")


def _list(text: str | None, default: list[str]) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()] if text else list(default)


def circuits(
    model: str = typer.Option("smollm2-135m", "--model", help="The model."),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated tasks (default: ioi, facts, add, "
                              "greater_than, induction); a .jsonl path is a custom task."),
    methods: str = typer.Option(None, "--methods", help="Comma-separated methods (default: random, eap, "
                                "eap_ig, dpa; activation_patching is node level); NAME:key=value:key=value "
                                "is a variant with parameters set (dpa:w_v=0.7)."),
    levels: str = typer.Option("edge", "--levels", help="edge, node or edge,node."),
    n_train: int = typer.Option(16, "--n-train", help="Train prompts per task (scoring)."),
    n_test: int = typer.Option(12, "--n-test", help="Test prompts per task (curves)."),
    n_patch: int = typer.Option(4, "--n-patch", help="Prompts for node-level activation patching."),
    selection: str = typer.Option("topk", "--selection", help="topk, greedy, bootstrap or positive_ratio."),
    eval_split: str = typer.Option("test", "--eval-split", help="Where the curves are measured: test (report) "
                                   "or validation (choose variants; --n-test caps its prompts)."),
    boot: int = typer.Option(1000, "--boot", help="Bootstrap resamples for the intervals."),
    batch_size: int = typer.Option(8, "--batch-size", help="Prompts per forward."),
    workers: int = typer.Option(1, "--workers", help="Processes over tasks (each loads the model)."),
    out: Path = typer.Option(None, "--out", help="Results document (.md; its .json beside it). Default: "
                             "results/circuits/bench_<model>.md"),
    save_run: bool = typer.Option(True, "--save-run/--no-save-run", help="Also save a run to the store."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Every method on every task: circuits scored on train, MIB's CPR/CMD with intervals on test."""
    from circuits.bench.report import leaderboard, write_document
    from circuits.bench.runner import ROOT, BenchConfig, check_config, run
    from workbench.errors import RangeError

    if workers < 1 or batch_size < 1:
        raise RangeError(f"--workers and --batch-size must be at least 1 (got {workers}, {batch_size})")
    cfg = BenchConfig(model=model, tasks=_list(tasks, ["ioi", "facts", "add", "greater_than", "induction"]),
                      methods=_list(methods, DEFAULT_METHODS), levels=_list(levels, ["edge"]),
                      n_train=n_train, n_test=n_test, n_patch=n_patch, selection=selection, n_boot=boot,
                      batch_size=batch_size, eval_split=eval_split)
    check_config(cfg)
    if out is not None and out.suffix != ".md":
        raise RangeError(f"--out must name a .md file (got {out})")
    result = _run(cfg, workers) if workers > 1 else _run_here(cfg, run)
    path = out or ROOT / "results" / "circuits" / f"bench_{cfg.model.split('/')[-1]}.md"
    md, js = write_document(result, path)
    summary: dict[str, Any] = {"model": result["model"], "document": str(md), "json": str(js),
                               "seconds": result["seconds"], **leaderboard(result)}
    if save_run:
        summary["run"] = _save(result, summary)
    emit(summary, as_json, _human)


def _run_here(cfg: Any, run: Any) -> dict[str, Any]:
    import time

    from circuits.bench.runner import total_steps
    from workbench.cli import progress

    started = time.perf_counter()
    c = console()

    def step(what: str) -> None:  # a line per step too: the bar alone leaves no trace in a log file
        bar.update(task, advance=1, description=what)
        c.print(f"{time.perf_counter() - started:7.0f} s  done: {what}")

    with progress() as bar:
        task = bar.add_task("bench circuits", total=total_steps(cfg))
        return run(cfg, on_step=step)


def _one_task(cfg_dict: dict[str, Any], task: str) -> dict[str, Any]:
    import torch

    import workbench as wb
    from circuits.bench.runner import BenchConfig, run_task

    torch.set_num_threads(1)
    import sys
    import time

    cfg = BenchConfig(**cfg_dict)
    started = time.perf_counter()
    return run_task(wb.load(cfg.model), task, cfg, on_step=lambda what: print(
        f"{time.perf_counter() - started:7.0f} s  done: {what}", file=sys.stderr, flush=True))


def _run(cfg: Any, workers: int) -> dict[str, Any]:
    """Tasks in parallel processes; their rows are checked here first (bad input costs nothing)."""
    import time
    from concurrent.futures import ProcessPoolExecutor
    from dataclasses import asdict

    from circuits.bench.runner import check_task_rows, load_rows
    from workbench.cli import progress

    for task in cfg.tasks:
        rows, _, source = load_rows(cfg.model, task)
        if source != "built":
            check_task_rows(task, rows, cfg)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool, progress() as bar:
        bar_task = bar.add_task("bench circuits (tasks)", total=len(cfg.tasks))
        futures = [pool.submit(_one_task, asdict(cfg), t) for t in cfg.tasks]
        results = []
        for f in futures:
            results.append(f.result())
            bar.update(bar_task, advance=1)
    return {"config": asdict(cfg), "model": cfg.model, "tasks": results, "seconds": time.perf_counter() - started}


def _save(result: dict[str, Any], summary: dict[str, Any]) -> str:
    import json

    from circuits.bench.report import markdown
    from workbench.store import RunDraft, RunStore

    run = RunStore().save(RunDraft(kind="bench", model=result["model"], method="circuits",
                                   args=result["config"], timings={"total": result["seconds"]},
                                   result={"rows": summary["rows"]},
                                   files={"results.json": json.dumps(result, allow_nan=False),
                                          "results.md": markdown(result)}))
    return run.id


def _human(r: dict[str, Any]) -> None:
    c = console()
    c.print(f"circuit benchmark on {r['model']}: {r['seconds'] / 60:.1f} min; document {r['document']}"
            + (f"; run {r['run']}" if r.get("run") else ""))
    for row in r["rows"]:
        c.print(f"  {row['task']:>13} {row['method']:>20} {row['level']:>4}  CPR {row['cpr']:.3f} "
                f"[{row['cpr_lo']:.2f}, {row['cpr_hi']:.2f}]  CMD {row['cmd']:.3f} "
                f"[{row['cmd_lo']:.2f}, {row['cmd_hi']:.2f}]  {row['seconds']:.1f} s")
