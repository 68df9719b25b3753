"""EAP-IG / MIB graph JSON: the layout of EAP-IG's ``Graph.to_json`` / ``Graph.from_json``
(github.com/hannamw/EAP-IG, src/eap/graph.py), which the MIB circuit-localization track reads.

``{"cfg": {n_layers, n_heads, parallel_attn_mlp, d_model}, "nodes": {name: {"in_graph": bool}},
"edges": {name: {"score": float, "in_graph": bool}}}``. Node names: ``input``, ``a{L}.h{H}``, ``m{L}``,
``logits``; edge names ``PARENT->CHILD`` with ``<q>``, ``<k>`` or ``<v>`` appended when the child is a head
(``input->a0.h0<q>``, ``a23.h3->logits``, ``m2->m5``).

The workbench's edge graph (circuits.graph) is the same graph: a head's q/k/v inputs read the embedding and
every head and MLP of the layers below, an MLP also reads its own layer's heads (not in parallel blocks, as
EAP-IG's ``parallel_attn_mlp``), the logits read everything. So every workbench edge is exactly one MIB edge
(``embed`` -> ``input``, ``L3.H5`` -> ``a3.h5``, ``L3.mlp`` -> ``m3``, receiver ``L3.H5.q`` -> ``a3.h5<q>``).
The other way round: EAP-IG's graph always has an MLP per layer, so for an attention-only model the file also
lists the ``m{L}`` nodes and their edges, with score 0 and not in the graph (the workbench's graph has no edge
that MIB's lacks). ``in_graph``: the circuit's edges at its K and selection (``CircuitResult.mask``); a node is
in the graph when an in-graph edge touches it; ``logits`` always is, as EAP-IG writes it.
"""

from __future__ import annotations

import re
from typing import Any

from core.errors import ExportError

_HEAD = re.compile(r"^L(\d+)\.H(\d+)$")
_MLP = re.compile(r"^L(\d+)\.mlp$")


def node_name(name: str) -> str:
    """The MIB name of a workbench node (a sender, a receiver's component, or logits)."""
    if name == "embed":
        return "input"
    if name == "logits":
        return "logits"
    if m := _HEAD.match(name):
        return f"a{m.group(1)}.h{m.group(2)}"
    if m := _MLP.match(name):
        return f"m{m.group(1)}"
    raise ExportError(f"no MIB node for workbench node {name!r}")


def edge_name(src: str, dst: str) -> str:
    """The MIB name of the workbench edge src -> dst (dst a receiver: ``L3.H5.q``, ``L3.mlp``, ``logits``)."""
    parts = dst.rsplit(".", 1)
    if len(parts) == 2 and parts[1] in ("q", "k", "v") and _HEAD.match(parts[0]):
        return f"{node_name(src)}->{node_name(parts[0])}<{parts[1]}>"
    return f"{node_name(src)}->{node_name(dst)}"


def all_edges(n_layers: int, n_heads: int, parallel: bool) -> list[str]:
    """Every edge name of EAP-IG's ``Graph.from_model`` for this shape, in its order."""
    names = []
    stream = ["input"]
    for layer in range(n_layers):
        heads = [f"a{layer}.h{h}" for h in range(n_heads)]
        names += [f"{s}->{a}<{r}>" for s in stream for a in heads for r in "qkv"]
        if parallel:
            names += [f"{s}->m{layer}" for s in stream]
            stream = stream + heads
        else:
            stream = stream + heads
            names += [f"{s}->m{layer}" for s in stream]
        stream = stream + [f"m{layer}"]
    return names + [f"{s}->logits" for s in stream]


def document(cr: Any, k: int | None = None, d_model: int | None = None) -> dict[str, Any]:
    """A CircuitResult as EAP-IG graph JSON: every edge with its score, the circuit's edges ``in_graph``."""
    g = cr.graph
    d_model = d_model or getattr(cr, "d_model", None)
    if not d_model:
        raise ExportError(f"this circuit of {cr.model} does not record the model's d_model, which EAP-IG's "
                          "reader needs; score it again to export it as mib")
    parallel = bool(g.parallel)
    mask = cr.mask(k).tolist()
    scores = cr.scores.double().tolist()
    edges = {name: {"score": 0.0, "in_graph": False} for name in all_edges(g.n_layers, g.n_heads, parallel)}
    touched = {"logits"}
    send = [n.name for n in g.senders]
    recv = [n.name for n in g.receivers]
    for e, (s, r) in enumerate(g.edges.tolist()):
        src, dst = send[s], recv[r]
        name = edge_name(src, dst)
        if name not in edges:  # by construction never: the two graphs are the same (tests/test_export.py)
            raise ExportError(f"workbench edge {src} -> {dst} has no MIB edge ({name})")
        edges[name] = {"score": float(scores[e]), "in_graph": bool(mask[e])}
        if mask[e]:
            touched.add(node_name(src))
            touched.add(name.split("->", 1)[1].split("<", 1)[0])
    nodes = {"input": {"in_graph": "input" in touched}}
    for layer in range(g.n_layers):
        for h in range(g.n_heads):
            nodes[f"a{layer}.h{h}"] = {"in_graph": f"a{layer}.h{h}" in touched}
        nodes[f"m{layer}"] = {"in_graph": f"m{layer}" in touched}
    nodes["logits"] = {"in_graph": True}
    cfg = {"n_layers": g.n_layers, "n_heads": g.n_heads, "parallel_attn_mlp": parallel, "d_model": int(d_model)}
    return {"cfg": cfg, "nodes": nodes, "edges": edges}


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
    from pathlib import PurePath

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
    import json
    from pathlib import Path

    from circuits.bench.cells import cell_scores
    from circuits.bench.metrics import top_edges
    from circuits.discover import CircuitResult
    from core.store import write_atomic

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
