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
