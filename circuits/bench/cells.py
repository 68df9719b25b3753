"""The benchmark as (task, method) cells: what the ``bench_circuits`` job deals out to its workers and merges
back into the result ``circuits.bench.runner.run`` returns, and each cell's edge scores kept in its run so a
view can draw the cell's circuit.

A worker runs its cells task by task: a task's prompts, references and m(full), m(empty) are computed once
per worker that has cells of it (``prepare_task``: the same forwards on the same prompts, so every worker gets
the same numbers at the same thread count), and the merge takes the task's figures from its first cell in
method order. Edge scores travel and are stored as float16 divided by their largest |score| (``scale`` keeps
it), so the ranking keeps its precision at any magnitude; a node-level-only method has none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from jaxtyping import Float

from circuits.bench.agreement import attach
from circuits.bench.report import leaderboard, markdown
from circuits.bench.runner import BenchConfig, pack, prepare_task, run_method
from circuits.discover import MAX_HEADS, MAX_LAYERS, CircuitResult
from circuits.graph import CircuitGraph
from circuits.subgraph import Subgraph
from core.checks import Fields
from core.errors import RunStoreError
from core.store import RunDraft

Cell = tuple[str, str]  # (task, method)


def cells(cfg: BenchConfig) -> list[Cell]:
    """Every (task, method) of the run, task by task in the config's order (what one process runs)."""
    return [(task, method) for task in cfg.tasks for method in cfg.methods]


def run_cells(model: Any, cfg: BenchConfig, todo: list[Cell],
              on_step: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Run ``todo`` on ``model``: one part per cell {task, method, header, result, scores, scale, model, graph,
    started, finished} (times in seconds since the epoch, for the run's wall time)."""
    parts: list[dict[str, Any]] = []
    setup = None
    for task, method in todo:
        if setup is None or setup.header["task"] != task:
            setup = None  # let go of the last task's references before building the next task's
            setup = prepare_task(model, task, cfg)
        started = time.time()
        res, edge = run_method(model, setup, method, cfg, on_step)
        scores, scale = pack(edge)
        g = setup.graph
        parts.append({"task": task, "method": method, "header": dict(setup.header), "result": res,
                      "scores": scores, "scale": scale, "model": model.name, "started": started,
                      "finished": time.time(), "graph": {"n_layers": g.n_layers, "n_heads": g.n_heads,
                                                         "has_mlp": g.has_mlp, "parallel": g.parallel,
                                                         "d_model": int(model.arch.d_model)}})  # MIB's files
    return parts


@dataclass
class BenchResult:
    """A finished benchmark: ``result`` as ``runner.run`` returns it, and per cell its packed edge scores."""

    result: dict[str, Any]
    cells: list[dict[str, Any]] = field(default_factory=list)  # {task, method, tensor, scale}
    tensors: dict[str, Float[torch.Tensor, " edge"]] = field(default_factory=dict)  # packed (float16)
    graph: dict[str, Any] = field(default_factory=dict)

    def save(self, store: Any) -> Any:
        r = self.result
        return store.save(RunDraft(
            kind="bench", model=r["model"], method="circuits", args=r["config"], timings={"total": r["seconds"]},
            result={**leaderboard(r), "cells": self.cells, "graph": self.graph}, tensors=self.tensors,
            files={"results.json": json.dumps(r, allow_nan=False), "results.md": markdown(r)}))


def merge(cfg: BenchConfig, parts: list[dict[str, Any]]) -> BenchResult:
    """The cells' parts (any order, any split over workers) as one result, tasks and methods in the config's
    order; ``seconds`` is the wall time from the first cell's start to the last cell's end."""
    by = {(p["task"], p["method"]): p for p in parts}
    missing = [c for c in cells(cfg) if c not in by]
    if missing:
        raise RunStoreError(f"the benchmark's parts lack {len(missing)} cell(s), e.g. {missing[0]}")
    tasks, kept, tensors = [], [], {}
    for task in cfg.tasks:
        first = by[(task, cfg.methods[0])]
        tasks.append({**first["header"], "methods": {m: by[(task, m)]["result"] for m in cfg.methods}})
        attach(tasks[-1], {m: by[(task, m)]["scores"].float() * by[(task, m)]["scale"] for m in cfg.methods
                           if by[(task, m)]["scores"] is not None})
        for m in cfg.methods:
            p = by[(task, m)]
            if p["scores"] is not None:
                name = f"edges.{len(tensors)}"
                tensors[name] = p["scores"]
                kept.append({"task": task, "method": m, "tensor": name, "scale": p["scale"]})
    seconds = max(p["finished"] for p in parts) - min(p["started"] for p in parts)
    result = {"config": asdict(cfg), "model": parts[0]["model"], "tasks": tasks, "seconds": seconds}
    return BenchResult(result, kept, tensors, dict(parts[0]["graph"]))


def cell_scores(run: Any, task: str, method: str) -> tuple[CircuitGraph, Float[torch.Tensor, " edge"]]:
    """A stored bench run's graph and one cell's edge scores (float32, their stored scale restored);
    RunStoreError when the run predates per-cell scores, the cell has none, or the file is damaged."""
    result = Fields(run.result(), f"run {run.id}'s result.json", RunStoreError)
    if not isinstance(result.data, dict) or "cells" not in result.data:
        raise RunStoreError(f"run {run.id} was saved before bench runs kept each cell's edge scores")
    found = [c for c in result.items("cells", dict) if c.get("task") == task and c.get("method") == method]
    if not found:
        raise RunStoreError(f"run {run.id} has no edge scores for {task} x {method} (a node-level-only method)")
    g = result.fields("graph")
    graph = CircuitGraph(g.integer("n_layers", lo=1, hi=MAX_LAYERS), g.integer("n_heads", lo=1, hi=MAX_HEADS),
                         g.flag("has_mlp"), parallel=g.flag("parallel", False))
    cell = Fields(found[0], f"run {run.id}'s cell {task} x {method}", RunStoreError)
    t = run.tensors().get(cell.text("tensor"))
    if t is None or tuple(t.shape) != (graph.n_edges,):
        raise RunStoreError(f"run {run.id} is damaged: the scores of {task} x {method} are missing or not "
                            f"[{graph.n_edges}]")
    return graph, t.float() * cell.number("scale", lo=0)


def cell_subgraph(run: Any, task: str, method: str, k: int) -> Subgraph:
    """The circuit of one cell of a stored bench run: its top ``k`` edges by score, as the circuit view draws it."""
    graph, scores = cell_scores(run, task, method)
    res = CircuitResult(model=str(run.meta.get("model")), method=method, graph=graph, scores=scores, rows=[],
                        ablation="corrupt", metric="bench", params={"task": task}, edges=k)
    return res.subgraph(k)
