"""The circuit benchmark: every method on every task, scored on train, judged on test with MIB's metrics.

Per task: the rows of data/bench/<model>/<task>.jsonl (built by scripts/build_bench_tasks.py; built here
when absent), the first ``n_train`` of the train split for scoring and the first ``n_test`` of the test
split for the curves. Per method: edge scores on train (timed), then at each level the circuits of MIB's
grid (``metrics``) under the chosen selection, signed for CPR and by |score| for CMD, their per-prompt
metric on test (one masked forward per distinct circuit; m(full) and m(empty) once per task), and CPR,
CMD and bootstrap intervals. ``activation_patching`` is exact: at node level one forward per node; at edge
level (one forward per edge, 123,211 on smollm2) it patches a sample of edges and the other methods' edge
scores are checked against it (``agreement``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool, Float

from circuits.bench import metrics as mib
from circuits.bench import tasks as bench_tasks
from circuits.bench.agreement import attach, sample_patching
from circuits.bench.forward import TaskForwards, node_patching, prompt_metrics
from circuits.bench.prompts import task_prompts
from circuits.bench.select import SELECTIONS, select_edges
from circuits.bench.tasks import TASKS, build, is_task, keep_rows, parse_task, split_rows
from circuits.bench.variants import split_variant
from circuits.counterfactual import PromptSet
from circuits.edges import EDGE_METHODS, get_method
from circuits.graph import CircuitGraph
from circuits.intervene import References
from core.errors import MethodError, PromptError
from core.models import zoo
from core.paths import data_label, data_root
from core.prompt_files import check_input_file, read_prompts

METHODS = ("random", *EDGE_METHODS)  # the baseline, then every method of the edge-method table
NODE_ONLY = tuple(n for n, m in EDGE_METHODS.items() if m.exact)  # one forward per edge: node level only
EVAL_SPLITS = ("test", "validation")  # train is where circuits are found, so never where they are judged
MAX_RANDOM_SEEDS = 100  # each draw of the random baseline is one more evaluation of every curve
MIN_PROMPTS = 4  # the fewest prompts a split may give: fewer leave the bootstrap nothing to resample


@dataclass
class BenchConfig:
    model: str
    tasks: list[str]
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    levels: list[str] = field(default_factory=lambda: ["edge", "node"])
    n_train: int = 16
    n_test: int = 48  # the seven-method leaderboard on all 7 tasks fits 60 min on 2 cores (64: 67.1 min)
    n_patch: int = 4  # prompts for node-level activation patching (one forward per node and batch)
    selection: str = "topk"
    grid: list[float] = field(default_factory=lambda: list(mib.GRID))
    n_boot: int = 1000
    batch_size: int = 8
    seed: int = 0
    eval_split: str = "test"  # where the curves are measured: "validation" to choose variants, "test" to report
    patch_sample: int = 64  # edges activation patching scores exactly at edge level (0: none)
    filter_rows: bool = True  # a custom task file's rows kept only where the model answers them (as built-in tasks)
    random_seeds: int = 5  # the random baseline: its curves averaged over this many seeds


def pack(edge: Float[torch.Tensor, " edge"] | None) -> tuple[Float[torch.Tensor, " edge"] | None, float]:
    """Edge scores as float16 over their largest |score|, and that scale (1 for all-zero scores)."""
    if edge is None:
        return None, 1.0
    scale = float(edge.abs().max()) if edge.numel() else 0.0
    scale = scale if scale > 0 and math.isfinite(scale) else 1.0
    return torch.nan_to_num(edge.float() / scale).to(torch.float16), scale


def check_model_kind(kind: str, name: str) -> None:
    """The benchmark scores edges of a language model's residual graph on text tasks: a vision model is refused."""
    if kind == "vit":
        raise MethodError(f"{name} is a vision model: the circuit benchmark needs a language model (its tasks are "
                          "text prompts with counterfactuals, its graph the residual stream's heads and MLPs)")


def check_config(cfg: BenchConfig) -> None:
    """Everything that can be refused before a model is loaded."""
    for task in cfg.tasks:
        if is_task(task):
            parse_task(task)  # an unknown parameter or IOI counterfactual kind: one line
            continue
        if not Path(task).suffix == ".jsonl":
            raise MethodError(f"unknown task {task!r}; choose from {', '.join(TASKS)} (ioi:counterfactual="
                              "s2_io|abc|names) or give a .jsonl file")

        check_input_file(task, "task file", PromptError)  # missing, a directory, a pipe or a device
    for what, items in (("task", cfg.tasks), ("method", cfg.methods), ("level", cfg.levels)):
        if not items:
            raise MethodError(f"no {what}s given: name at least one")
        twice = sorted({x for x in items if items.count(x) > 1})
        if twice:  # the same cell twice would compute for minutes, then fail to save (shared tensors)
            raise MethodError(f"{what} {', '.join(twice)} named more than once")
    for m in cfg.methods:
        if split_variant(m)[0] not in METHODS:  # a variant NAME:key=value is checked here too
            raise MethodError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    for level in cfg.levels:
        if level not in mib.LEVELS:
            raise MethodError(f"unknown level {level!r}; choose from {', '.join(mib.LEVELS)}")
    if cfg.eval_split not in EVAL_SPLITS:
        raise MethodError(f"unknown evaluation split {cfg.eval_split!r}; choose from {', '.join(EVAL_SPLITS)}")
    if cfg.selection not in SELECTIONS:
        raise MethodError(f"unknown selection {cfg.selection!r}; choose from {', '.join(SELECTIONS)}")
    for name in ("n_train", "n_test", "n_patch"):
        if getattr(cfg, name) < MIN_PROMPTS:
            raise MethodError(f"{name.replace('_', '-')} must be at least {MIN_PROMPTS}")
    if not 1 <= cfg.random_seeds <= MAX_RANDOM_SEEDS:
        raise MethodError(f"random-seeds must be from 1 to {MAX_RANDOM_SEEDS} (got {cfg.random_seeds})")
    if cfg.patch_sample < 0:
        raise MethodError(f"patch-sample must be 0 (none) or a number of edges (got {cfg.patch_sample})")
    if cfg.n_boot < 10:
        raise MethodError("the bootstrap needs at least 10 resamples")
    mib.check_grid(cfg.grid)


def task_label(task: str) -> str:
    """A task's name in tables: a built-in task's spec (``ioi:counterfactual=abc``), a task file's stem."""
    return task if is_task(task) else Path(task).stem


def load_rows(model: str, task: str, seed: int = 0) -> tuple[list[dict], str, str]:
    """A task's rows, its metric and where they came from. A built-in task reads data/bench/<model>/<stem>.jsonl
    (``task_file_stem``: ``ioi.abc`` for ioi:counterfactual=abc), whose IOI rows must be the counterfactual kind
    asked for. A .jsonl path is a custom task: rows that all carry a ``split`` keep it, otherwise they are
    shuffled with ``seed`` and split 3/8, 1/8, 1/2 (train, validation, test); rows that claim an IOI
    counterfactual kind (``"counterfactual"``) must be of it. A row that is not: PromptError (one line)."""
    import random

    if is_task(task):
        name, params = parse_task(task)
        path = data_root() / "bench" / model / f"{bench_tasks.task_file_stem(task)}.jsonl"
        if path.is_file():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if name == "ioi":
                bench_tasks.check_claimed_kinds(rows, data_label(path), params["counterfactual"])
            return rows, TASKS[name].metric, data_label(path)
        return [], TASKS[name].metric, "built"

    rows = read_prompts(task, None)
    bench_tasks.check_claimed_kinds(rows, Path(task).name)
    if any("split" not in r for r in rows):
        order = list(range(len(rows)))
        random.Random(f"{Path(task).stem}-{seed}").shuffle(order)
        n = len(rows)
        cuts = (round(n * 3 / 8), round(n / 2))
        rows = [dict(rows[j], split="train" if i < cuts[0] else "validation" if i < cuts[1] else "test")
                for i, j in enumerate(order)]
    metric = "prob_diff" if all("good" in r for r in rows) else "logit_diff"
    return rows, metric, task


def check_task_rows(task: str, rows: list[dict], cfg: BenchConfig) -> tuple[list[dict], list[dict]]:
    """The train and test rows the run uses; a task without counterfactuals or a split too small for the
    bootstrap over its grid is refused (one line)."""
    missing = next((i for i, r in enumerate(rows, 1) if r.get("corrupt") is None), None)
    if missing is not None:
        need = [m for m in cfg.methods] or ["the evaluation"]
        raise PromptError(f"task {task} has no counterfactuals (row {missing} lacks \"corrupt\"); "
                          f"{', '.join(need)} and MIB's evaluation need them")
    train, test = split_rows(rows, "train")[: cfg.n_train], split_rows(rows, cfg.eval_split)[: cfg.n_test]
    for name, part in (("train", train), (cfg.eval_split, test)):
        if len(part) < MIN_PROMPTS:
            raise PromptError(f"task {task}: its {name} split has {len(part)} prompts; the bootstrap over "
                              f"MIB's grid needs at least {MIN_PROMPTS}")
    return train, test


def score_edges(model: Any, graph: CircuitGraph, method: str, prompts: Any, refs: References,
                seed: int) -> tuple[Float[torch.Tensor, " edge"], Float[torch.Tensor, "chunk edge"]]:
    """Edge scores (mean over prompts) and per-chunk scores [chunk, edge] (one chunk per batch)."""
    if method == "random":
        gen = torch.Generator().manual_seed(seed)
        s = torch.randn(graph.n_edges, generator=gen)
        return s, s[None].repeat(2, 1)
    name, params = split_variant(method)
    spec = get_method(name)
    chunks = []
    for b in prompts.batches:
        one = PromptSet(rows=[prompts.rows[i] for i in b.rows], batches=[b], metric=prompts.metric,
                        ablation=prompts.ablation)
        chunks.append(spec.scorer()(model, graph, one, refs, **{**spec.params, **params}) * b.size)
    weights = torch.tensor([b.size for b in prompts.batches], dtype=torch.float32)
    stack = torch.stack(chunks)
    return stack.sum(0) / prompts.n_prompts, stack / weights[:, None]


@dataclass
class TaskSetup:
    """What every method of one task shares: its prompts and references on train and test, and the
    per-prompt m(full), m(empty) on test (``ends``); ``header`` is the task's part of the result."""

    header: dict[str, Any]
    graph: CircuitGraph
    train: list[dict]
    p_train: Any
    p_test: Any
    refs_train: References
    refs_test: References
    ends: Float[torch.Tensor, "2 prompt"]  # the metric per test prompt of the full and the empty circuit
    forwards: TaskForwards | None = None  # batched evaluation: the test prompts' shared runs, once per task


def prepare_task(model: Any, task: str, cfg: BenchConfig, batched: bool = True) -> TaskSetup:
    """A task's rows (built now when the model has no data file), prompts, references and its two ends.
    ``batched``: the test prompts' counterfactual runs and shared prefixes are computed here once for every
    method, grid size and draw (``TaskForwards``), and each method's circuits stack along the batch of one
    forward; without it each evaluation recomputes them and runs two circuits a forward (the figures agree to
    float rounding: tests/test_eval_batched.py)."""
    rows, metric, source = load_rows(model.name, task, cfg.seed)
    if source == "built":
        rows = build(model, task, n=128, seed=cfg.seed, fractions=(0.375, 0.125, 0.5))
    elif not is_task(task) and cfg.filter_rows:  # a custom file, filtered as the built-in tasks' rows were built
        kept = keep_rows(model, rows)
        try:
            check_task_rows(task, kept, cfg)
        except PromptError as e:
            raise PromptError(f"{e} (the filter kept {len(kept)} of {len(rows)} rows: those the model answers "
                              "top-1 and whose counterfactual changes the answer; --no-filter keeps them all)"
                              ) from None
        rows = kept
    train, test = check_task_rows(task, rows, cfg)
    graph = CircuitGraph.of(model)
    p_train = task_prompts(model, train, metric, cfg.batch_size)
    p_test = task_prompts(model, test, metric, cfg.batch_size)
    refs_train, refs_test = References(model, graph, p_train), References(model, graph, p_test)
    started = time.perf_counter()
    both = torch.stack([torch.ones(graph.n_edges, dtype=torch.bool), torch.zeros(graph.n_edges, dtype=torch.bool)])
    forwards = TaskForwards(model, graph, p_test, refs_test) if batched else None
    ends = forwards.metrics(both) if forwards is not None else prompt_metrics(model, graph, p_test, refs_test, both)
    header: dict[str, Any] = {"task": task, "label": task_label(task), "metric": metric, "source": source,
                              "n_train": len(train), "n_test": len(test),
                              "rows": {s: sum(1 for r in rows if r.get("split") == s) for s in bench_tasks.SPLITS},
                              "m_full": float(ends[0].mean()),
                              "m_empty": float(ends[1].mean()), "ends_seconds": time.perf_counter() - started}
    mib.finite(header["m_full"] - header["m_empty"], f"task {task}'s span m(full) - m(empty)")
    if abs(header["m_full"] - header["m_empty"]) < 1e-9:
        raise MethodError(f"task {task}: the metric is the same intact and fully ablated; nothing to explain")
    return TaskSetup(header, graph, train, p_train, p_test, refs_train, refs_test, ends, forwards)


def run_method(model: Any, setup: TaskSetup, method: str, cfg: BenchConfig,
               on_step: Callable[[str], None] | None = None,
               ) -> tuple[dict[str, Any], Float[torch.Tensor, " edge"] | None]:
    """One (task, method) cell: scores on train (timed), curves on test at each level; (its result, its edge
    scores, None for a node-level-only method)."""
    metric, graph = setup.header["metric"], setup.graph
    res: dict[str, Any] = {"levels": {}}
    started = time.perf_counter()
    if split_variant(method)[0] in NODE_ONLY:
        edge, chunks, node = None, None, None
        if "node" in cfg.levels:
            p_patch = task_prompts(model, setup.train[: cfg.n_patch], metric, cfg.batch_size)
            node = node_patching(model, graph, p_patch, References(model, graph, p_patch))
            res["n_scored"] = len(setup.train[: cfg.n_patch])
        if "edge" in cfg.levels and cfg.patch_sample:  # the truth on a sample, on the prompts the methods scored
            params = split_variant(method)[1]  # activation_patching:sample=N:seed=S:copies=C overrides these
            res["sample"] = sample_patching(model, graph, setup.p_train, setup.refs_train,
                                            params.get("sample") or cfg.patch_sample, params.get("seed", cfg.seed),
                                            params.get("copies", 8))
            if on_step:
                on_step(f"{setup.header['label']} x {method} edge sample")
    else:
        # the random baseline: cfg.random_seeds draws (seeds cfg.seed, cfg.seed + 1, ...), its figures their mean
        draws = [score_edges(model, graph, method, setup.p_train, setup.refs_train, cfg.seed + k)
                 for k in range(cfg.random_seeds if method == "random" else 1)]
        edge, chunks = draws[0]
        node = mib.node_scores_of(graph, edge)
        res["n_scored"] = len(setup.train)
    res["seconds"] = time.perf_counter() - started
    for level in cfg.levels:
        if level == "edge" and edge is None:
            continue
        if setup.forwards is not None:  # every draw's circuits (one for a method) in stacked forwards
            if edge is None or len(draws) == 1:
                found = evaluate_draws(setup, level, [(edge, node, chunks)], cfg)
            else:
                found = evaluate_draws(setup, level, [(e, mib.node_scores_of(graph, e), c) for e, c in draws], cfg)
            res["levels"][level] = found[0] if len(found) == 1 else mean_levels(found)
        elif edge is not None and len(draws) > 1:
            res["levels"][level] = mean_levels([
                evaluate_level(model, graph, setup.p_test, setup.refs_test, setup.ends, level, e,
                               mib.node_scores_of(graph, e), c, cfg) for e, c in draws])
        else:
            res["levels"][level] = evaluate_level(model, graph, setup.p_test, setup.refs_test, setup.ends, level,
                                                  edge, node, chunks, cfg)
        if on_step:
            on_step(f"{setup.header['label']} x {method} {level}")
    return res, edge


def run_task(model: Any, task: str, cfg: BenchConfig, on_step: Callable[[str], None] | None = None,
             batched: bool = True) -> dict[str, Any]:
    setup = prepare_task(model, task, cfg, batched)
    out: dict[str, Any] = {**setup.header, "methods": {}}
    scores = {}
    for method in cfg.methods:
        out["methods"][method], edge = run_method(model, setup, method, cfg, on_step)
        if edge is not None:  # checked against patching as stored and as the job's merge sees them
            packed, scale = pack(edge)
            scores[method] = packed.float() * scale
    attach(out, scores)
    return out


def level_masks(graph: CircuitGraph, level: str, edge: Float[torch.Tensor, " edge"] | None,
                node: Float[torch.Tensor, " sender"], chunks: Float[torch.Tensor, "chunk edge"] | None,
                cfg: BenchConfig) -> tuple[list[int], list[Bool[torch.Tensor, " edge"]], dict[bool, list[int]]]:
    """MIB's grid at one level: (its sizes, its distinct circuits, per ordering (absolute or not) the index of
    each size's circuit)."""
    n_items = graph.n_edges if level == "edge" else len(graph.senders)
    counts = mib.sizes(cfg.grid, n_items)
    masks: list[torch.Tensor] = []
    keys: dict[bytes, int] = {}
    points: dict[bool, list[int]] = {}
    for absolute in (False, True):
        points[absolute] = []
        for n in counts:
            if level == "edge":
                mask = select_edges(graph, edge, n, cfg.selection, absolute=absolute, chunks=chunks)
            else:
                mask = mib.top_nodes(graph, node, n, absolute)
            key = mask.numpy().tobytes()
            if key not in keys:
                keys[key] = len(masks)
                masks.append(mask)
            points[absolute].append(keys[key])
    return counts, masks, points


def _ends_of(graph: CircuitGraph, masks: list[torch.Tensor]) -> tuple[list[int], dict[int, int]]:
    """The circuits that need a forward, and those equal to the whole model (0) or to nothing (1)."""
    full_key = torch.ones(graph.n_edges, dtype=torch.bool).numpy().tobytes()
    empty_key = torch.zeros(graph.n_edges, dtype=torch.bool).numpy().tobytes()
    known = {i: 0 if m.numpy().tobytes() == full_key else 1 for i, m in enumerate(masks)
             if m.numpy().tobytes() in (full_key, empty_key)}
    return [i for i in range(len(masks)) if i not in known], known


def level_figures(per_prompt: Float[torch.Tensor, "mask prompt"], masks: list[Bool[torch.Tensor, " edge"]],
                  counts: list[int],
                  points: dict[bool, list[int]], cfg: BenchConfig, n_forwards: int, seconds: float) -> dict[str, Any]:
    """CPR, CMD, their intervals and curves from the per-prompt metric of every circuit (rows as ``masks``,
    then m(full), m(empty))."""
    full, empty = len(masks), len(masks) + 1
    curves = {}
    for absolute, name in ((False, "cpr"), (True, "cmd")):
        f = mib.curve_values(per_prompt, full, empty, points[absolute]).tolist()
        curves[name] = mib.Curve(fractions=list(cfg.grid), counts=counts,
                                 edges_kept=[int(masks[i].sum()) for i in points[absolute]],
                                 faithfulness=f, absolute=absolute)
    ci = mib.bootstrap(per_prompt, full, empty, points[False], points[True], list(cfg.grid), cfg.n_boot, cfg.seed)
    return {"cpr": mib.finite(curves["cpr"].cpr, "CPR"), "cmd": mib.finite(curves["cmd"].cmd, "CMD"),
            "cpr_ci": ci["cpr"], "cmd_ci": ci["cmd"], "curves": {k: asdict(v) for k, v in curves.items()},
            "n_forwards": n_forwards, "eval_seconds": seconds,
            "empty": empty_sizes({k: asdict(v) for k, v in curves.items()})}


def _per_prompt(masks: list[torch.Tensor], todo: list[int], known: dict[int, int],
                ends: Float[torch.Tensor, "2 prompt"], measured: Float[torch.Tensor, "todo prompt"]
                ) -> Float[torch.Tensor, "row prompt"]:
    per_prompt = torch.zeros(len(masks) + 2, ends.shape[1], dtype=torch.float64)
    per_prompt[-2], per_prompt[-1] = ends[0], ends[1]
    if todo:
        per_prompt[todo] = measured
    for i, end in known.items():  # circuits equal to the whole model or to nothing need no forward
        per_prompt[i] = ends[end]
    return per_prompt


def evaluate_level(model: Any, graph: CircuitGraph, prompts: Any, refs: References,
                   ends: Float[torch.Tensor, "2 prompt"], level: str, edge: Float[torch.Tensor, " edge"] | None,
                   node: Float[torch.Tensor, " sender"], chunks: Float[torch.Tensor, "chunk edge"] | None,
                   cfg: BenchConfig) -> dict[str, Any]:
    """CPR (signed ordering) and CMD (absolute ordering) curves of one method at one level, each distinct
    circuit run once (two a forward, the counterfactual and prefix runs made again: the unbatched way), with
    bootstrap intervals over the test prompts."""
    started = time.perf_counter()
    counts, masks, points = level_masks(graph, level, edge, node, chunks, cfg)
    todo, known = _ends_of(graph, masks)
    measured = prompt_metrics(model, graph, prompts, refs, torch.stack([masks[i] for i in todo])) if todo else None
    per_prompt = _per_prompt(masks, todo, known, ends, measured)
    return level_figures(per_prompt, masks, counts, points, cfg, len(todo), time.perf_counter() - started)


def evaluate_draws(setup: TaskSetup, level: str,
                   draws: list[tuple[Float[torch.Tensor, " edge"] | None, Float[torch.Tensor, " sender"],
                                     Float[torch.Tensor, "chunk edge"] | None]],
                   cfg: BenchConfig) -> list[dict[str, Any]]:
    """``evaluate_level`` for one or more score draws (random's seeds; one for a method) at once: every draw's
    distinct circuits go through the task's shared runs (``setup.forwards``) stacked along the batch, a circuit
    two draws share once; each draw's figures as evaluate_level gives them (its eval_seconds an equal share)."""
    started = time.perf_counter()
    plans = []
    unique: dict[bytes, int] = {}
    stack: list[torch.Tensor] = []
    for edge, node, chunks in draws:
        counts, masks, points = level_masks(setup.graph, level, edge, node, chunks, cfg)
        todo, known = _ends_of(setup.graph, masks)
        for i in todo:
            key = masks[i].numpy().tobytes()
            if key not in unique:
                unique[key] = len(stack)
                stack.append(masks[i])
        plans.append((counts, masks, points, todo, known))
    measured = setup.forwards.metrics(torch.stack(stack)) if stack else None
    out = []
    for counts, masks, points, todo, known in plans:
        rows = measured[[unique[masks[i].numpy().tobytes()] for i in todo]] if todo else None
        per_prompt = _per_prompt(masks, todo, known, setup.ends, rows)
        out.append(level_figures(per_prompt, masks, counts, points, cfg, len(todo), 0.0))
    share = (time.perf_counter() - started) / len(draws)
    for figures in out:
        figures["eval_seconds"] = share
    return out


def empty_sizes(curves: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Per ordering (cpr, cmd), how many grid sizes below the full one pruned to no edge at all: their
    faithfulness is m(empty)'s by construction, not a circuit the method found (at node level a random choice
    of nodes is rarely connected to the logits)."""
    return {k: sum(1 for f, kept in zip(c["fractions"], c["edges_kept"], strict=True) if f < 1.0 and kept == 0)
            for k, c in curves.items()}


def mean_levels(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's figures averaged over the random baseline's draws: CPR, CMD and each interval bound are the
    draws' means, curves the pointwise means; ``seeds`` keeps every draw's CPR and CMD, ``empty`` counts the
    sizes empty in every draw."""
    n = len(levels)

    def mean(values: list[float]) -> float:
        return sum(values) / n

    curves = {}
    for key, c in levels[0]["curves"].items():
        curves[key] = {**c, "faithfulness": [mean([lv["curves"][key]["faithfulness"][i] for lv in levels])
                                             for i in range(len(c["faithfulness"]))],
                       "edges_kept": [round(mean([lv["curves"][key]["edges_kept"][i] for lv in levels]))
                                      for i in range(len(c["edges_kept"]))]}
    return {"cpr": mean([lv["cpr"] for lv in levels]), "cmd": mean([lv["cmd"] for lv in levels]),
            "cpr_ci": [mean([lv["cpr_ci"][i] for lv in levels]) for i in (0, 1)],
            "cmd_ci": [mean([lv["cmd_ci"][i] for lv in levels]) for i in (0, 1)],
            "curves": curves, "n_forwards": sum(lv["n_forwards"] for lv in levels),
            "eval_seconds": sum(lv["eval_seconds"] for lv in levels),
            "empty": {k: sum(1 for i, f in enumerate(c["fractions"]) if f < 1.0
                             and all(lv["curves"][k]["edges_kept"][i] == 0 for lv in levels))
                      for k, c in levels[0]["curves"].items()},
            "seeds": [{"cpr": lv["cpr"], "cmd": lv["cmd"]} for lv in levels]}


def run(cfg: BenchConfig, model: Any = None, on_step: Callable[[str], None] | None = None,
        batched: bool = True) -> dict[str, Any]:
    """The whole benchmark for one model: {"config", "tasks": [...], "seconds"}."""
    check_config(cfg)
    # every task's rows are checked before the model loads or any method runs: bad input costs nothing
    for task in cfg.tasks:
        rows, _, source = load_rows(cfg.model, task, cfg.seed)
        if source != "built":
            check_task_rows(task, rows, cfg)
    if model is None:
        model = zoo.load(cfg.model)
    check_model_kind(getattr(model, "kind", None) or ("vit" if "ViT" in type(model).__name__ else "llm"), cfg.model)
    started = time.perf_counter()
    tasks = [run_task(model, task, cfg, on_step, batched) for task in cfg.tasks]
    return {"config": asdict(cfg), "model": model.name, "tasks": tasks, "seconds": time.perf_counter() - started}


def method_steps(cfg: BenchConfig, method: str) -> int:
    """Progress steps of one (task, method) cell: one per level it is evaluated at; a node-level-only method's
    edge level is its patching sample (none when ``patch_sample`` is 0)."""
    exact = split_variant(method)[0] in NODE_ONLY
    return sum(1 for lv in cfg.levels if not (lv == "edge" and exact and not cfg.patch_sample))


def total_steps(cfg: BenchConfig) -> int:
    return len(cfg.tasks) * sum(method_steps(cfg, m) for m in cfg.methods)
