"""``workbench bench circuits``: the circuit benchmark (MIB's CPR and CMD) of every method on every task.

Runs as a job (``workbench jobs list/show/cancel``; workbench/scheduler/kind_bench.py): in this process, or with
``--workers N`` over N Ray workers that share out the (task, method) cells, each loading the model once.
Saves a run (which also keeps every cell's edge scores, for the app's Circuit benchmark page) and, where
``--out FILE.md`` says, the results document (Markdown and its JSON): never by default, so a run cannot write
over the committed results/circuits/bench_<model>.md. Bad input (an unknown task or method, an empty or
repeated list item, a vision model, an --out that cannot be written, a split too small, a task without
counterfactuals) is one line and exit 2, before any job starts or anything is saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from core.options import nonneg_int, positive_int
from workbench.commands.common import JSON_OPTION, emit, result_console
from workbench.commands.jobs import RAY_ADDRESS_OPTION, workers_option

# The defaults: 5 tasks x these 4 methods at edge level took 33 min at 12 test prompts with --workers 3 on a shared
# 2-core machine (results/circuits/bench_smollm2-135m.md); at today's 48, the per-cell seconds of
# results/circuits/bench_mib_smollm2-135m.md (64 prompts, alone) scale to about 25 min (derived, not timed).
DEFAULT_METHODS = ["random", "eap", "eap_ig", "dpa"]
DEFAULT_TASKS = ["ioi", "facts", "add", "greater_than", "induction"]


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Benchmarks.", no_args_is_help=True)
    group.command("circuits")(circuits)
    group.command("mib-submission")(mib_submission)
    app.add_typer(group, name="bench")


def circuits(
    model: str = typer.Option("smollm2-135m", "--model", help="The model."),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated tasks (default: ioi, facts, add, "
                              "greater_than, induction); ioi is MIB's S2 -> IO counterfactual, "
                              "ioi:counterfactual=abc MIB's ABC kind, ioi:counterfactual=names both names "
                              "replaced. A FILE.jsonl is a custom task (rows {prompt, corrupt, target, foil?} or "
                              "{..., good, bad}): split by its rows' `split` field when every row has one, "
                              "otherwise shuffled with --seed and split 3/8 train, 1/8 validation, 1/2 test; "
                              "filtered like the built-in tasks (kept where the model's top-1 answer is the "
                              "target and the counterfactual changes it) unless --no-filter; named by the "
                              "file's stem in the tables."),
    methods: str = typer.Option(None, "--methods", help="Comma-separated methods (default: random, eap, "
                                "eap_ig, dpa; activation_patching: exact, node level and a sample of edges); "
                                "NAME:key=value:key=value is a variant with parameters set (dpa:w_v=0.7)."),
    levels: str = typer.Option(None, "--levels", help="edge, node or edge,node (default: edge)."),
    n_train: int = typer.Option(16, "--n-train", help="Train prompts per task (scoring).", callback=positive_int),
    n_test: int = typer.Option(48, "--n-test", callback=positive_int,
                                help="Test prompts per task (curves), at most: the built-in tasks hold 64; 48 "
                                     "keeps the seven-method leaderboard within 60 min on 2 cores."),
    n_patch: int = typer.Option(4, "--n-patch", help="Prompts for node-level activation patching.",
                                callback=positive_int),
    patch_sample: int = typer.Option(64, "--patch-sample", help="Edges activation patching scores exactly at "
                                     "edge level (on the train prompts; one forward each), to check every "
                                     "method's scores against.", callback=nonneg_int),
    selection: str = typer.Option("topk", "--selection", help="topk, greedy, bootstrap or positive_ratio."),
    eval_split: str = typer.Option("test", "--eval-split", help="Where the curves are measured: test (report) "
                                   "or validation (choose variants; --n-test caps its prompts)."),
    boot: int = typer.Option(1000, "--boot", help="Bootstrap resamples for the intervals.", callback=positive_int),
    batch_size: int = typer.Option(8, "--batch-size", help="Prompts per forward.", callback=positive_int),
    filter_rows: bool = typer.Option(True, "--filter/--no-filter", help="Filter a custom task file's rows "
                                     "as the built-in tasks are (--no-filter: use them as given)."),
    random_seeds: int = typer.Option(5, "--random-seeds", help="Draws of the random baseline, its figures "
                                     "their mean (1-100); grid sizes that prune to no edge in every draw (most "
                                     "node-level sizes) are counted in the tables as 'N sizes empty', or "
                                     "'empty' when all are, not passed off as a circuit.",
                                     callback=positive_int),
    seed: int = typer.Option(0, "--seed", help="Seed of the random baseline's first draw and of a custom "
                             "task file's shuffle.", callback=nonneg_int),
    workers: int = workers_option("the (task, method) cells"),
    ray_address: str = RAY_ADDRESS_OPTION,
    out: Path = typer.Option(None, "--out", help="Results document (.md; its .json beside it), e.g. "
                             "results/circuits/bench_<model>.md. Without it no document is written (the run "
                             "keeps the result)."),
    save_run: bool = typer.Option(True, "--save-run/--no-save-run", help="Also save a run to the store."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Every method on every task: circuits scored on train, MIB's CPR/CMD with intervals on test."""
    from core.errors import RangeError
    from core.options import check_output, split_list

    if batch_size < 1:
        raise RangeError(f"--batch-size must be at least 1 (got {batch_size})")
    # lists first (an empty or repeated item is refused, never read as the defaults), then the output, then
    # the model's kind: everything the user can get wrong is refused before any work starts
    task_list = split_list("--tasks", tasks, DEFAULT_TASKS)
    method_list = split_list("--methods", methods, DEFAULT_METHODS)
    level_list = split_list("--levels", levels, ["edge"])
    if out is not None and out.suffix != ".md":
        raise RangeError(f"--out must name a .md file (got {out})")
    check_output("--out", out)
    check_output("--out", out.with_suffix(".json") if out is not None else None)
    if out is None and not save_run:
        raise RangeError("--no-save-run without --out would keep nothing: give --out FILE.md")
    from circuits.bench.report import leaderboard, write_document
    from circuits.bench.runner import check_model_kind, check_task_rows, load_rows
    from core.errors import PromptError
    from core.models.zoo import resolve
    from core.prompt_files import check_input_file
    from workbench.commands.jobs import run_job
    from workbench.scheduler.specs import BenchCircuitsSpec, bench_config

    for t in task_list:  # a file refused as typed (not by the absolute path it is stored under)
        if t.endswith(".jsonl"):
            check_input_file(t, "task file", PromptError)
    check_model_kind(resolve(model).kind, model)
    # a task file is named by its absolute path: a Ray worker's working directory is not this one
    names = [str(Path(t).resolve()) if t.endswith(".jsonl") else t for t in task_list]
    typed = dict(zip(names, task_list, strict=True))
    spec = BenchCircuitsSpec(model=model, tasks=names, methods=method_list,
                             levels=level_list, n_train=n_train, n_test=n_test, n_patch=n_patch,
                             patch_sample=patch_sample,
                             selection=selection, eval_split=eval_split, n_boot=boot,
                             batch_size=batch_size, filter_rows=filter_rows, random_seeds=random_seeds,
                             seed=seed)  # checks the config
    cfg = bench_config(spec.to_dict())
    for task in cfg.tasks:  # every stored task's rows are checked before the job starts: bad input costs nothing
        try:
            rows, _, source = load_rows(cfg.model, task, cfg.seed)
            if source != "built":
                check_task_rows(task, rows, cfg)
        except PromptError as exc:  # "FILE:N: why" names the file as the user typed it
            raise PromptError(str(exc).replace(task, typed.get(task, task))) from None
    job, res = run_job(spec, workers, ray_address, save=save_run)
    result = res.result
    # only where --out says: a run without it never writes over the committed results/circuits/bench_<model>.md
    md, js = write_document(result, out) if out is not None else (None, None)
    summary: dict[str, Any] = {"model": result["model"], "document": str(md) if md else None,
                               "json": str(js) if js else None,
                               "seconds": result["seconds"], "job_id": job.id, **leaderboard(result)}
    if save_run:
        summary["run"] = job.run_id
    emit(summary, as_json, _human)


def _human(r: dict[str, Any]) -> None:
    c = result_console()
    c.print(f"circuit benchmark on {r['model']}: {r['seconds'] / 60:.1f} min; "
            + (f"document {r['document']}" if r["document"] else "no document (give --out FILE.md)")
            + (f"; run {r['run']}" if r.get("run") else ""))
    for row in r["rows"]:  # two lines a cell, each within 80 columns (a file or a pipe wraps nothing then)
        c.print(f"  {row['task']} x {row['method']}, {row['level']} level ({row['seconds']:.1f} s)", soft_wrap=True)
        c.print(f"      CPR {row['cpr']:.3f} [{row['cpr_lo']:.2f}, {row['cpr_hi']:.2f}]  CMD {row['cmd']:.3f} "
                f"[{row['cmd_lo']:.2f}, {row['cmd_hi']:.2f}]", soft_wrap=True)


def mib_submission(
    run: str = typer.Argument(..., help="A bench run's id, or a unique prefix of one (`workbench runs list`)."),
    out: Path = typer.Option(..., "--out", help="The folder to write into (created; must not exist yet)."),
    circuits: bool = typer.Option(False, "--circuits", help="Write the 9 binary circuits edges_P.json (at most "
                                  "P = 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50 % of the edges, top signed scores, "
                                  "pruned to connected edges) instead of one importances.json of every edge."),
    as_json: bool = JSON_OPTION,
) -> None:
    """A stored `bench circuits` run's edge scores in MIB's circuit-track submission layout:
    OUT/METHOD/TASK_MODEL/importances.json (EAP-IG graph JSON), or with --circuits its 9 circuits; MIB's task
    names for ioi, mcqa, add (arithmetic-addition) and sub (arithmetic-subtraction), the workbench's own
    name otherwise. Methods without edge scores (node-level patching) are skipped."""
    from circuits.bench.submission import submission
    from core.errors import ExportError
    from core.options import output_problem
    from core.store import RunStore

    if out.exists() or out.is_symlink():
        raise ExportError(f"--out {out} already exists; choose a new folder (nothing is written over)")
    why = output_problem(out, kind="dir")
    if why is not None:
        raise ExportError(f"--out {out} {why}")
    found = RunStore().resolve(run)
    if found.kind != "bench":
        raise ExportError(f"run {found.id} is a {found.kind} run; mib-submission reads a `bench circuits` run")
    written = submission(found, out, circuits=circuits)
    summary = {"run": found.id, "model": found.meta.get("model"), "out": str(out), "files": written,
               "layout": "circuits" if circuits else "importances"}
    emit(summary, as_json, lambda r: result_console().print(
        f"run {r['run']} ({r['model']}) in MIB's submission layout: {len(r['files'])} files under {r['out']}"))
