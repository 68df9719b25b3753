"""A stored bench run's edge scores in MIB's submission layout (``workbench bench mib-submission``): per method and
TASK_MODEL folder, one EAP-IG graph JSON of every edge's score (circuits.export.mib) or MIB's 9 binary circuits.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import Any

from circuits.bench.cells import cell_scores
from circuits.bench.metrics import top_edges
from circuits.discover import CircuitResult
from circuits.export.mib import document, edge_name
from core.errors import ExportError
from core.store import write_atomic

# -- MIB's submission layout -------------------------------------------------------------------------
# MIB's circuit track (github.com/hannamw/MIB-circuit-track, README "Submitting to the MIB Leaderboard"):
# one folder per task and model named TASK_MODEL (``ioi_gpt2``), holding either one file of importance scores
# for every edge, or 9 binary circuits, one with at most each of 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50 % of the
# edges. MIB's task names for the workbench tasks it has; the others keep the workbench's name (not MIB tasks).
MIB_TASK = {"ioi": "ioi", "mcqa": "mcqa", "add": "arithmetic-addition", "sub": "arithmetic-subtraction"}
SUBMISSION_PERCENTS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50)


def submission_folder(task: str, model: str) -> str:
    """MIB's TASK_MODEL folder name of a bench cell (``ioi:counterfactual=abc`` -> ``ioi-abc``); a custom task
    file is named by its stem and a model given as a folder by the folder's name, so the result is always one
    path component (a bench run records a task file by its absolute path)."""
    if task.endswith(".jsonl"):
        name, params = PurePath(task).stem, ""
    else:
        name, _, params = task.partition(":")
    base = MIB_TASK.get(name, name)
    kind = params.partition("=")[2]
    model = PurePath(model.rstrip("/")).name or model
    folder = f"{base}-{kind}_{model}" if kind and kind != "s2_io" else f"{base}_{model}"
    return folder.replace("/", "-").replace("\\", "-")


def submission(run: Any, out: Any, circuits: bool = False, d_model: int | None = None) -> list[str]:
    """Write a stored bench run's edge scores in MIB's submission layout under ``out``:
    ``out/METHOD/TASK_MODEL/importances.json`` (EAP-IG graph JSON, every edge's score, all in the graph), or
    with ``circuits`` the 9 circuits ``edges_P.json`` (P the percentage: the top int(P% x edges) by signed
    score, pruned to what is connected, so at most P%). Methods without edge scores (node-level patching) are
    skipped. Files are written atomically; returns their paths relative to ``out``."""
    result = run.result()
    model = str(run.meta.get("model"))
    d_model = d_model or (result.get("graph") or {}).get("d_model")
    if not d_model:
        raise ExportError(f"run {run.id} does not record the model's d_model, which MIB's files need; "
                          "give it (d_model=...)")
    written = []
    for cell in result.get("cells", []):
        task, method = cell["task"], cell["method"]
        graph, scores = cell_scores(run, task, method)
        folder = Path(method.replace(":", "_").replace("=", "-")) / submission_folder(task, model)
        if circuits:
            files = {}
            for pct in SUBMISSION_PERCENTS:
                files[f"edges_{pct:g}.json"] = top_edges(graph, scores, int(pct / 100 * graph.n_edges),
                                                         absolute=False)
        else:
            files = {"importances.json": None}
        cr = CircuitResult(model=model, method=method, graph=graph, scores=scores, rows=[], ablation="corrupt",
                           metric="bench", params={"task": task}, edges=graph.n_edges, d_model=int(d_model))
        whole = document(cr, graph.n_edges)
        names = [edge_name(graph.senders[a].name, graph.receivers[b].name) for a, b in graph.edges.tolist()]
        for name, keep in files.items():
            doc = whole if keep is None else _membership(whole, names, keep)
            path = Path(out) / folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(doc), f"MIB file {path}", ExportError)
            written.append(str(folder / name))
    return written


def _membership(whole: dict[str, Any], names: list[str], keep: Any) -> dict[str, Any]:
    """A binary circuit's file: the whole graph's file with in_graph (and a 0/1 score) from ``keep``, a node in
    the graph when a kept edge touches it (``logits`` always, as EAP-IG writes it)."""
    edges = {n: {"score": 0.0, "in_graph": False} for n in whole["edges"]}
    touched = {"logits"}
    for name, k in zip(names, keep.tolist(), strict=True):
        if k:
            edges[name] = {"score": 1.0, "in_graph": True}
            src, dst = name.split("->", 1)
            touched |= {src, dst.split("<", 1)[0]}
    nodes = {n: {"in_graph": n in touched} for n in whole["nodes"]}
    return {"cfg": whole["cfg"], "nodes": nodes, "edges": edges}
