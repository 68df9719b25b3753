"""Open a graph made elsewhere: a circuit-tracer / Neuronpedia graph JSON becomes a feature-graph run, shown
by the app's Feature graph and Runs views (pruning, inspection, export) for any model, loadable here or not.

Everything is checked before anything is built: the file's size (``MAX_BYTES``), then its layout against
circuit-tracer 0.5.0's schema (graph_json.GRAPH_JSON_SCHEMA, checked by hand so a message names the field),
the node and link counts (``MAX_NODES``, ``MAX_LINKS``), unique node ids, every link's ends, finite numbers,
token positions within the prompt. A refused file is one ExportError line; nothing is stored.

Mapping: ``embedding`` -> a token node ``emb@p{pos}``; a ``logit`` -> ``logits`` (the target logit; further
logits ``logits:{token}@{i}``); a feature type holding ``error`` -> ``L{layer}[T].err@p{pos}``; any other feature
type (``cross layer transcoder``, ``transcoder``, ``sae feature``, ...) -> ``L{layer}[T].f{index}@p{pos}`` (T for
transcoders: the node's drawing row is half a layer below its layer, as the workbench draws transcoders). A
node's ``influence`` in the file is circuit-tracer's cumulative share; the node's own share of the influence is
recovered from it (the difference to the next more influential node), or, when the file has none, computed
from the links. Each node keeps the file's own fields under ``ct``, so exporting it again gives the same ids.
The replacement and completeness scores are computed on the graph the file holds (pruned by its maker).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from circuits.influence import graph_scores, node_influence
from circuits.subgraph import feature_subgraph
from core import checks
from core.errors import ExportError
from core.store import RunStore

MAX_BYTES = 256 * 2**20  # Neuronpedia's largest graphs are tens of MB
MAX_NODES = 200_000
MAX_LINKS = 5_000_000
MAX_TOKENS = 100_000
_FEATURE_ID = re.compile(r"^(\d+)_(\d+)_(\d+)$")
_LOGIT = re.compile(r'"(.*)"\s*\(p=')


def read(path: str | Path) -> dict[str, Any]:
    """The graph JSON at ``path``, its size bounded before it is read and its layout checked."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        raise ExportError(f"{path} is not a file" if path.exists() or path.is_symlink() else f"{path} does not exist")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ExportError(f"{path} is {size:,} bytes, more than the {MAX_BYTES:,} a graph JSON may be here")
    _count_bounded(path)  # a file of too many nodes or links is refused before it is parsed (or read whole)
    doc = checks.read_json(path, f"graph JSON {path.name}", ExportError, max_bytes=MAX_BYTES)
    check(doc, path.name)
    return doc


_NODE_KEY = re.compile(rb'"node_id"\s*:')
_LINK_KEY = re.compile(rb'"source"\s*:')


def _count_bounded(path: Path, chunk: int = 4 * 2**20) -> None:
    """ExportError as soon as the file, read in chunks, holds more "node_id" keys than MAX_NODES (or "source"
    keys than MAX_LINKS): each node has one, each link one, and inside a JSON string the quotes would be
    escaped, so the count bounds the graph's size from above. A 10^6-node file stops after ~30 MB, in little
    memory, instead of being parsed whole (hundreds of MB); the exact counts are checked again after parsing."""
    counts = {"nodes": 0, "links": 0}
    limits = {"nodes": (_NODE_KEY, MAX_NODES), "links": (_LINK_KEY, MAX_LINKS)}
    tail = b""
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            buf = tail + block
            for what, (key, limit) in limits.items():
                # a match wholly inside the carried tail was counted with the previous block
                counts[what] += sum(1 for m in key.finditer(buf) if m.end() > len(tail))
                if counts[what] > limit:
                    raise ExportError(f"{path} holds more than the {limit:,} {what} a graph may have here "
                                      f"(counted in its first {fh.tell():,} bytes, before parsing it)")
            tail = buf[-64:]


def _need(cond: bool, what: str, why: str) -> None:
    if not cond:
        raise ExportError(f"{what} is not a circuit-tracer graph JSON: {why}")


def _finite(value: Any, what: str, where: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value)):
        raise ExportError(f"{what} is damaged: {where} is {str(value)[:40]}, not a finite number")


def check(doc: Any, what: str = "the file") -> None:
    """circuit-tracer 0.5.0's layout, sizes first; ExportError (one line) naming the first problem."""
    _need(isinstance(doc, dict), what, f"it holds a {type(doc).__name__}, not an object")
    for key in ("metadata", "nodes", "links"):
        _need(key in doc, what, f"no {key!r}")
    meta, nodes, links = doc["metadata"], doc["nodes"], doc["links"]
    _need(isinstance(meta, dict), what, "'metadata' is not an object")
    _need(isinstance(nodes, list) and isinstance(links, list), what, "'nodes' and 'links' must be lists")
    if len(nodes) > MAX_NODES or len(links) > MAX_LINKS:
        raise ExportError(f"{what} holds {len(nodes):,} nodes and {len(links):,} links, more than the "
                          f"{MAX_NODES:,} / {MAX_LINKS:,} a graph may have here")
    _need(len(nodes) > 0, what, "it has no nodes")
    tokens = meta.get("prompt_tokens")
    _need(isinstance(tokens, list) and all(isinstance(t, str) for t in tokens), what,
          "metadata.prompt_tokens is not a list of strings")
    _need(0 < len(tokens) <= MAX_TOKENS, what, f"metadata.prompt_tokens has {len(tokens):,} tokens")
    for key in ("slug", "scan", "prompt"):
        _need(isinstance(meta.get(key, ""), str), what, f"metadata.{key} is not a string")
    if "qParams" in doc:
        _need(isinstance(doc["qParams"], dict), what, "'qParams' is not an object")
    ids: set[str] = set()
    n_logits = 0
    for i, n in enumerate(nodes):
        where = f"node {i}"
        _need(isinstance(n, dict), what, f"{where} is not an object")
        for key, kind in (("node_id", str), ("layer", str), ("feature_type", str), ("ctx_idx", int)):
            _need(isinstance(n.get(key), kind) and not isinstance(n.get(key), bool), what,
                  f"{where} has no {kind.__name__} {key!r}")
        _need(isinstance(n.get("feature", 0), int) and not isinstance(n.get("feature", 0), bool), what,
              f"{where}'s feature is not an integer")
        _need(n["node_id"] not in ids, what, f"node id {n['node_id']!r} appears twice")
        ids.add(n["node_id"])
        _need(0 <= n["ctx_idx"] < len(tokens), what,
              f"node {n['node_id']!r} sits at position {n['ctx_idx']}, outside the {len(tokens)} prompt tokens")
        ft = n["feature_type"]
        if ft == "logit":
            n_logits += 1
        elif ft != "embedding":
            _need(re.fullmatch(r"-?\d+", n["layer"]) is not None, what,
                  f"node {n['node_id']!r} has layer {n['layer'][:20]!r}, not a layer number")
        for key in ("activation", "influence", "token_prob"):
            _finite(n.get(key), what, f"node {n['node_id']!r}'s {key}")
        if "clerp" in n:
            _need(isinstance(n["clerp"], str), what, f"node {n['node_id']!r}'s clerp is not a string")
    _need(n_logits > 0, what, "it has no logit node")
    for i, e in enumerate(links):
        _need(isinstance(e, dict), what, f"link {i} is not an object")
        src, dst = e.get("source"), e.get("target")
        if src not in ids or dst not in ids:
            raise ExportError(f"{what} is damaged: link {i} ({str(src)[:40]} -> {str(dst)[:40]}) names a node "
                              "the file does not have")
        _need("weight" in e, what, f"link {i} has no weight")
        _finite(e["weight"], what, f"link {i}'s weight")


def _tag(node: dict[str, Any]) -> tuple[int, str, bool]:
    """(layer, workbench tag, is a transcoder) of a feature or error node."""
    layer = int(node["layer"])
    ft = node["feature_type"].lower()
    transcoder = "transcoder" in ft or ft == "mlp reconstruction error" or "unexplored" in ft
    return layer, f"L{layer}T" if transcoder else f"L{layer}", transcoder


def to_feature_graph(doc: dict[str, Any], source: str = "") -> Any:
    """A checked graph JSON as a feature graph (see the module's docstring for the mapping)."""

    meta = doc["metadata"]
    tokens = [str(t) for t in meta["prompt_tokens"]]
    logit_layers = [int(n["layer"]) for n in doc["nodes"] if n["feature_type"] == "logit"
                    and re.fullmatch(r"-?\d+", n["layer"])]
    layers = [int(n["layer"]) for n in doc["nodes"] if n["feature_type"] not in ("logit", "embedding")]
    # circuit-tracer writes a logit's layer as n_layers + 1
    n_layers = max(logit_layers) - 1 if logit_layers else (max(layers) + 1 if layers else 1)
    n_layers = max(n_layers, max(layers) + 1 if layers else 0)
    logits = [n for n in doc["nodes"] if n["feature_type"] == "logit"]
    target_node = max(logits, key=lambda n: (bool(n.get("is_target_logit")), float(n.get("token_prob") or 0.0)))
    wb_id: dict[str, str] = {}
    taken: set[str] = set()  # wb_id's values, as a set: one look-up a node (a list's scan made 150k nodes hours)
    nodes: list[dict[str, Any]] = []
    dictionaries: dict[str, dict[str, Any]] = {}
    scan = str(meta.get("scan") or "imported")
    for i, n in enumerate(doc["nodes"]):
        ft, pos = n["feature_type"], int(n["ctx_idx"])
        ct = {k: v for k, v in n.items() if k in ("node_id", "feature", "layer", "ctx_idx", "feature_type", "jsNodeId",
                                                 "clerp", "influence", "activation", "token_prob", "is_target_logit")}
        base = {"position": pos, "token": tokens[pos], "dictionary": None, "feature": None, "activation": None,
                "score": None, "label": str(n.get("clerp") or ""), "clerp": str(n.get("clerp") or ""), "ct": ct}
        if ft == "logit":
            token = m.group(1) if (m := _LOGIT.search(str(n.get("clerp") or ""))) else str(n.get("feature"))
            node_id = "logits" if n is target_node else f"logits:{token}@{i}"
            node = {**base, "id": node_id, "kind": "logits", "row": n_layers, "position": None, "token": token,
                    "label": str(n.get("clerp") or f"logit {token!r}")}
        elif ft == "embedding":
            node = {**base, "id": f"emb@p{pos}", "kind": "token", "row": -1, "label": f"{tokens[pos]!r}@{pos}"}
        else:
            layer, tag, transcoder = _tag(n)
            dictionaries.setdefault(tag, {"name": f"{scan}:{tag}", "path": "", "tag": tag,
                                          "kind": "transcoder" if transcoder else "sae", "hook": "", "hook_out": ""})
            row = layer - 0.5 if transcoder else float(layer)
            if "error" in ft.lower():
                node = {**base, "id": f"{tag}.err@p{pos}", "kind": "error", "row": row,
                        "dictionary": f"{scan}:{tag}", "label": base["label"] or f"{tag}.err@{pos}"}
            else:
                m = _FEATURE_ID.match(n["node_id"])
                index = int(m.group(2)) if m else int(n.get("feature", 0))
                node = {**base, "id": f"{tag}.f{index}@p{pos}", "kind": "feature", "row": row,
                        "dictionary": f"{scan}:{tag}", "feature": index, "activation": n.get("activation"),
                        "label": base["label"] or f"{tag}.f{index}@{pos}"}
        if node["id"] in taken:  # two nodes of the file map to one workbench id: keep the file's
            node["id"] = f"ct:{n['node_id']}"
        wb_id[n["node_id"]] = node["id"]
        taken.add(node["id"])
        nodes.append(node)
    edges = [{"src": wb_id[e["source"]], "dst": wb_id[e["target"]], "score": float(e["weight"])}
             for e in doc["links"]]
    # influence: each node's own share, recovered from circuit-tracer's cumulative shares, else from the links
    given = {n["id"]: n["ct"].get("influence") for n in nodes if n["kind"] != "logits"}
    if given and all(isinstance(v, (int, float)) for v in given.values()):
        ordered = sorted(given.items(), key=lambda kv: kv[1])
        prev, share = 0.0, {}
        for node_id, c in ordered:
            share[node_id] = max(float(c) - prev, 0.0)
            prev = max(prev, float(c))
    else:
        rows: dict[str, dict[str, float]] = {}
        for e in edges:
            rows.setdefault(e["dst"], {})[e["src"]] = e["score"]
        share = node_influence(rows, {n["id"]: 1.0 for n in nodes if n["kind"] == "logits"})
    for n in nodes:
        n["influence"] = 1.0 if n["kind"] == "logits" else float(share.get(n["id"], 0.0))
    rows = {}
    for e in edges:
        rows.setdefault(e["dst"], {})[e["src"]] = e["score"]
    probs = {n["id"]: float(n["ct"].get("token_prob") or 0.0) for n in nodes if n["kind"] == "logits"}
    total = sum(probs.values())
    seed = {k: v / total for k, v in probs.items()} if total > 0 else None
    scores = graph_scores(rows, {n["id"]: n["kind"] for n in nodes}, computed_on="pruned", seed=seed)
    imported = {"format": "graph-json", "file": source, "slug": meta.get("slug"), "scan": meta.get("scan"),
                "transcoder_list": list(meta.get("transcoder_list") or []),
                "node_threshold": meta.get("node_threshold"), "n_links": len(edges)}
    target = next(n["token"] for n in nodes if n["id"] == "logits")
    model = str(meta.get("model") or meta.get("scan") or "unknown")
    prob = target_node.get("token_prob")
    return feature_subgraph(
        model=model, prompt=str(meta.get("prompt") or "".join(tokens)), tokens=tokens, target=target,
        foil=meta.get("foil") if isinstance(meta.get("foil"), str) else None, target_logit=0.0,
        dictionaries=sorted(dictionaries.values(), key=lambda d: d["tag"]),
        nodes=sorted(nodes, key=lambda n: (n["row"], n["position"] if n["position"] is not None else 10**9)),
        edges=edges, seconds=0.0, n_passes=0, params={"imported": imported}, scores=scores,
        target_prob=float(prob) if isinstance(prob, (int, float)) and not isinstance(prob, bool) else None)


def import_graph_json(path: str | Path, store: Any = None) -> Any:
    """Store the circuit-tracer / Neuronpedia graph JSON at ``path`` as a feature-graph run; returns the Run."""
    path = Path(path)
    graph = to_feature_graph(read(path), path.name)
    store = store if isinstance(store, RunStore) else RunStore(store)
    return graph.save(store, method="import")
