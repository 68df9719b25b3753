"""circuit-tracer 0.5.0 / Neuronpedia graph JSON: what circuit-tracer's ``create_graph_files`` writes and its
local graph server and Neuronpedia read (the pydantic ``Model`` of ``circuit_tracer/frontend/graph_models.py``).

Layout: ``metadata`` (slug, scan, transcoder_list, prompt_tokens, prompt, node_threshold, schema_version; the
workbench adds model, target, foil, the replacement and completeness scores and its pruning settings, which
circuit-tracer's reader ignores), ``qParams`` (pinnedIds, supernodes, linkType, clickedId, sg_pos), ``nodes``
and ``links`` (source, target, weight). Node ids follow circuit-tracer: a feature ``{layer}_{feature}_{pos}``,
an error ``0_{layer}_{pos}``, an embedding ``E_{token id}_{pos}``, a logit ``{n_layers + 1}_{token id}_{pos}``
(token id -1 in a graph saved before feature graphs kept their token ids).
A node's ``influence`` is circuit-tracer's cumulative share (the share of total influence held by the nodes at
least as influential as it), which its frontend's pruning slider reads; a logit's ``clerp`` carries
``(p=...)``, which the frontend parses.

Feature graphs map one to one: a transcoder's features are ``cross layer transcoder`` nodes (circuit-tracer
writes that type for every transcoder) and its errors ``mlp reconstruction error``; a residual SAE's are
``sae feature`` and ``residual reconstruction error``; the one logit node is target minus foil. Where two
dictionaries sit at one layer a node id gets the dictionary's tag appended (``12_345_7_L12T``).

Circuits have no token positions (scores are summed over positions and prompts): every node sits in one column
(``ctx_idx`` 0) and the logits in a second, the embedding is ``embedding``, heads ``attention head`` (feature =
head index), MLPs ``mlp`` (feature = the number of heads); a head's q, k and v edges from one sender are one
link whose weight is their sum (the parts are in the link's ``roles``).
"""

from __future__ import annotations

import re
from typing import Any

from attribution.sae.dashboard import Dashboards
from circuits.influence import node_influence

SCHEMA_VERSION = 1
_TAG = re.compile(r"^L(\d+)(T|pre|mid)?$")

# A JSON Schema written from circuit-tracer 0.5.0's pydantic models (Metadata, QParams, Node, Link, Model):
# required fields and types as pydantic checks them; extra keys allowed, as pydantic's default allows.
GRAPH_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "circuit-tracer 0.5.0 graph JSON (frontend/graph_models.py Model)",
    "type": "object",
    "required": ["metadata", "qParams", "nodes", "links"],
    "properties": {
        "metadata": {
            "type": "object",
            "required": ["slug", "scan", "transcoder_list", "prompt_tokens", "prompt"],
            "properties": {
                "slug": {"type": "string"},
                "scan": {"type": "string"},
                "transcoder_list": {"type": "array", "items": {"type": "string"}},
                "prompt_tokens": {"type": "array", "items": {"type": "string"}},
                "prompt": {"type": "string"},
                "node_threshold": {"type": ["number", "null"]},
                "schema_version": {"type": ["integer", "null"]},
            },
        },
        "qParams": {
            "type": "object",
            "required": ["pinnedIds", "supernodes", "linkType", "clickedId", "sg_pos"],
            "properties": {
                "pinnedIds": {"type": "array", "items": {"type": "string"}},
                "supernodes": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                "linkType": {"type": "string"},
                "clickedId": {"type": "string"},
                "sg_pos": {"type": "string"},
            },
        },
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["node_id", "feature", "layer", "ctx_idx", "feature_type", "jsNodeId"],
                "properties": {
                    "node_id": {"type": "string"},
                    "feature": {"type": "integer"},
                    "layer": {"type": "string"},
                    "ctx_idx": {"type": "integer"},
                    "feature_type": {"type": "string"},
                    "token_prob": {"type": "number"},
                    "is_target_logit": {"type": "boolean"},
                    "run_idx": {"type": "integer"},
                    "reverse_ctx_idx": {"type": "integer"},
                    "jsNodeId": {"type": "string"},
                    "clerp": {"type": "string"},
                    "influence": {"type": ["number", "null"]},
                    "activation": {"type": ["number", "null"]},
                },
            },
        },
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["source", "target", "weight"],
                "properties": {"source": {"type": "string"}, "target": {"type": "string"},
                               "weight": {"type": "number"}},
            },
        },
    },
}


def cantor(x: int, y: int) -> int:
    """circuit-tracer's feature number of feature y at layer x (Cantor pairing)."""
    return (x + y) * (x + y + 1) // 2 + y


def slugify(text: str) -> str:
    """A slug circuit-tracer can use as a file name."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")[:100] or "graph"


def document(obj: Any, slug: str | None = None, annotations: Any = None) -> dict[str, Any]:
    """The graph JSON of a Subgraph or a CircuitResult (its top edges); ``annotations`` (a run's pins and
    supernodes, circuits.interact.Annotations) go into its ``qParams``."""
    if getattr(obj, "run_kind", None) == "circuit":
        return from_circuit(obj, slug=slug, annotations=annotations)
    return from_subgraph(obj, slug, annotations=annotations)


def cumulative(influence: dict[str, float]) -> dict[str, float]:
    """circuit-tracer's node ``influence`` field: per node, the share of the total influence held by the nodes
    at least as influential as it (its most influential node has the smallest value)."""
    total = sum(influence.values())
    out, run = {}, 0.0
    for node, v in sorted(influence.items(), key=lambda kv: -kv[1]):
        run += v
        out[node] = run / total if total > 0 else 1.0
    return out


def _qparams(pinned: list[str], annotations: Any = None, ct_id: dict[str, str] | None = None) -> dict[str, Any]:
    """qParams: the logit pinned, then a run's own pins and supernodes (``[label, node_id, ...]``) in the
    export's node ids."""
    groups: list[list[str]] = []
    if annotations is not None:
        kept = qparams(annotations, ct_id or {})
        pinned = list(dict.fromkeys([*pinned, *kept["pinnedIds"]]))
        groups = kept["supernodes"]
    return {"pinnedIds": pinned, "supernodes": groups, "linkType": "both", "clickedId": "", "sg_pos": ""}


def qparams(annotations: Any, ids: dict[str, str]) -> dict[str, Any]:
    """circuit-tracer's qParams fields for ``annotations`` (circuits.interact.Annotations: ``pinned`` ids,
    ``supernodes`` with ``name`` and ``members``), with workbench node ids mapped to the export's (``ids``):
    ``pinnedIds`` and ``supernodes`` as ``[label, node_id, ...]``; nodes the export lacks are left out."""
    pinned = [ids[p] for p in annotations.pinned if p in ids]
    groups = [[s.name, *[ids[m] for m in s.members if m in ids]] for s in annotations.supernodes]
    return {"pinnedIds": pinned, "supernodes": [g for g in groups if len(g) > 1]}


def _node(node_id: str, feature: int, layer: str, ctx: int, feature_type: str, js: str, clerp: str = "",
          influence: float | None = None, activation: float | None = None, token_prob: float = 0.0,
          target: bool = False) -> dict[str, Any]:
    return {"node_id": node_id, "feature": int(feature), "layer": layer, "ctx_idx": int(ctx),
            "feature_type": feature_type, "token_prob": float(token_prob), "is_target_logit": target, "run_idx": 0,
            "reverse_ctx_idx": 0, "jsNodeId": js, "clerp": clerp, "influence": influence, "activation": activation}


def _feature_clerps(fg: Any) -> dict[str, list[str]]:
    """Dictionary name -> its features' explanations, from the dashboards stored beside it (best effort: a
    dictionary without readable dashboards gives none)."""
    from pathlib import Path

    out: dict[str, list[str]] = {}
    for d in fg.dictionaries:
        path = Path(str(d.get("path") or "")) / "dashboards.safetensors"
        if not d.get("path") or not path.is_file():
            continue
        try:
            db = Dashboards.load(str(path.parent))
            out[d["name"]] = [db.describe(f, short=True) for f in range(db.n_units)]
        except Exception:  # noqa: BLE001 - a damaged dashboard file costs the explanations, not the export
            continue
    return out


def from_feature_graph(fg: Any, slug: str | None = None, annotations: Any = None) -> dict[str, Any]:
    """A workbench (or imported) feature graph (a Subgraph with token positions) as graph JSON. A graph saved as
    a subgraph run before feature graphs kept their tokens' ids has none here (``-1``), and its two scores are
    computed on the stored graph."""
    fg_nodes = [n.row() for n in fg.nodes]
    fg_edges = [{"src": e.source, "dst": e.target, "score": e.score} for e in fg.edges]
    tags = {d.get("tag"): d for d in fg.dictionaries}
    logit_rows = [float(n["row"]) for n in fg_nodes if n["kind"] == "logits"]
    layers_seen = [int(m.group(1)) for t in tags if t and (m := _TAG.match(str(t)))]
    n_layers = int(logit_rows[0]) if logit_rows else (max(layers_seen) + 1 if layers_seen else 0)
    tokens = fg.tokens
    seq = len(tokens)
    last = max(seq - 1, 0)
    ids = [int(t) for t in fg.token_ids] if fg.token_ids and len(fg.token_ids) == seq else None
    clerps = _feature_clerps(fg)
    infl = cumulative({n["id"]: float(n.get("influence") or 0.0) for n in fg_nodes if n["kind"] != "logits"})
    per_layer: dict[int, set[str]] = {}
    for t in tags:
        if t and (m := _TAG.match(str(t))):
            per_layer.setdefault(int(m.group(1)), set()).add(str(t))
    nodes: list[dict[str, Any]] = []
    ct_id: dict[str, str] = {}
    used: set[str] = set()

    def add(wb_id: str, node: dict[str, Any], tag: str | None = None) -> None:
        if node["node_id"] in used:  # two dictionaries at one layer: the tag tells them apart
            node["node_id"] = f"{node['node_id']}_{tag or len(used)}"
            node["jsNodeId"] = node["node_id"]
        used.add(node["node_id"])
        ct_id[wb_id] = node["node_id"]
        nodes.append(node)

    have_tokens = set()
    for n in fg_nodes:
        kept = n.get("ct")  # imported from a graph JSON: its own fields, so a round trip keeps them
        if isinstance(kept, dict) and kept.get("node_id"):
            node = _node(str(kept["node_id"]), int(kept.get("feature", 0)), str(kept.get("layer", "0")),
                         int(kept.get("ctx_idx", 0)), str(kept.get("feature_type", "")),
                         str(kept.get("jsNodeId") or kept["node_id"]), str(kept.get("clerp") or ""),
                         kept.get("influence"), kept.get("activation"), float(kept.get("token_prob") or 0.0),
                         bool(kept.get("is_target_logit", False)))
            if n["kind"] == "token":
                have_tokens.add(n.get("position"))
            add(n["id"], node)
            continue
        kind, pos = n["kind"], n.get("position")
        if kind == "logits":
            vocab = fg.target_id if fg.target_id is not None else -1
            p = fg.target_prob
            what = f'Output "{fg.target}"' + (f' minus "{fg.foil}"' if fg.foil else "")
            add(n["id"], _node(f"{n_layers + 1}_{vocab}_{last}", vocab, str(n_layers + 1), last, "logit",
                               f"L_{vocab}-{last}", f"{what} (p={p:.3f})" if p is not None else f"{what} (p=n/a)",
                               None, None, float(p or 0.0), True))
        elif kind == "token":
            q = int(pos)
            vocab = ids[q] if ids else -1
            have_tokens.add(q)
            add(n["id"], _node(f"E_{vocab}_{q}", q, "E", q, "embedding", f"E_{vocab}-{q}",
                               influence=infl.get(n["id"])))
        else:
            tag = n["id"].split(".", 1)[0]
            m = _TAG.match(tag)
            layer = int(m.group(1)) if m else int(float(n["row"]))
            transcoder = bool(m and m.group(2) == "T") or (tags.get(tag) or {}).get("kind") == "transcoder"
            q = int(pos) if pos is not None else last
            shared = len(per_layer.get(layer, ())) > 1
            if kind == "error":
                node = _node(f"0_{layer}_{q}", -1, str(layer), q,
                             "mlp reconstruction error" if transcoder else "residual reconstruction error",
                             f"{layer}_{q}-0", f"Err: {tag} at {tokens[q]!r}" if q < seq else f"Err: {tag}",
                             influence=infl.get(n["id"]))
            else:
                f = int(n["feature"])
                text = (clerps.get(n.get("dictionary") or "") or [])[f:f + 1]
                node = _node(f"{layer}_{f}_{q}", cantor(layer, f), str(layer), q,
                             "cross layer transcoder" if transcoder else "sae feature", f"{layer}_{f}-0",
                             text[0] if text else "", infl.get(n["id"]), n.get("activation"))
            add(n["id"], node, tag if shared else None)
    for q in range(seq):  # circuit-tracer always keeps every embedding
        if q not in have_tokens and f"emb@p{q}" not in ct_id:
            vocab = ids[q] if ids else -1
            add(f"emb@p{q}", _node(f"E_{vocab}_{q}", q, "E", q, "embedding", f"E_{vocab}-{q}", influence=1.0))
    links = [{"source": ct_id[e["src"]], "target": ct_id[e["dst"]], "weight": float(e["score"])}
             for e in fg_edges if e["src"] in ct_id and e["dst"] in ct_id]
    scores = fg.graph_scores()
    params = dict(fg.params or {})
    imported = params.get("imported") or {}
    meta = {
        "slug": slugify(str(imported.get("slug") or slug or f"{fg.model}-{fg.prompt}")),
        "scan": str(imported.get("scan") or f"workbench:{fg.model}"),
        "transcoder_list": [str(d.get("name")) for d in fg.dictionaries] if not imported
        else list(imported.get("transcoder_list") or []),
        "prompt_tokens": [str(t) for t in tokens], "prompt": fg.prompt,
        "node_threshold": imported.get("node_threshold"), "schema_version": SCHEMA_VERSION,
        "model": fg.model, "target": fg.target, "foil": fg.foil,
        "replacement_score": scores.get("replacement"), "completeness_score": scores.get("completeness"),
        "scores_computed_on": scores.get("computed_on"),
        "pruning_settings": {k: params[k] for k in ("max_nodes", "max_edges", "per_layer", "per_row") if k in params},
        "info": {"generator": {"name": "workbench", "method": "feature-level DPA" if not imported else "import"}},
    }
    logit = [nd["node_id"] for nd in nodes if nd["feature_type"] == "logit"]
    return {"metadata": meta, "qParams": _qparams(logit[:1], annotations, ct_id), "nodes": nodes, "links": links}


def from_subgraph(sub: Any, slug: str | None = None, n_layers: int | None = None,
                  n_heads: int | None = None, annotations: Any = None) -> dict[str, Any]:
    """A Subgraph as graph JSON: a feature graph's through ``from_feature_graph``, a circuit's component by
    component (see the module's docstring)."""
    kinds = {n.kind for n in sub.nodes}
    if sub.is_feature_graph or kinds & {"feature", "error", "token"}:
        return from_feature_graph(sub, slug, annotations)
    layers = [int(n.layer) for n in sub.nodes if n.kind in ("head", "mlp")]
    heads = [int(n.metadata.get("head", 0)) for n in sub.nodes if n.kind == "head"]
    n_layers = n_layers if n_layers is not None else (max(layers) + 1 if layers else 0)
    n_heads = n_heads if n_heads is not None else (max(heads) + 1 if heads else 1)
    rows: dict[str, dict[str, float]] = {}
    roles: dict[tuple[str, str], dict[str, float]] = {}
    for e in sub.edges:
        rows.setdefault(e.target, {})
        rows[e.target][e.source] = rows[e.target].get(e.source, 0.0) + float(e.score)
        if e.role:
            roles.setdefault((e.source, e.target), {})[e.role] = float(e.score)
    raw = node_influence(rows, {"logits": 1.0})
    infl = cumulative({k: v for k, v in raw.items() if k != "logits"})
    p = sub.provenance
    first = p.prompts[0] if p.prompts else {}
    target, foil = first.get("target"), first.get("foil")
    metric = p.params.get("metric", "")
    ct_id: dict[str, str] = {}
    nodes = []
    for n in sub.nodes:
        if n.kind == "embed":
            node = _node("E_0_0", 0, "E", 0, "embedding", "E_0-0", "Emb: the input embedding",
                         influence=infl.get(n.id))
        elif n.kind == "head":
            layer, head = int(n.layer), int(n.metadata.get("head", 0))
            node = _node(f"{layer}_{head}_0", head, str(layer), 0, "attention head", f"{layer}_{head}-0",
                         n.id, influence=infl.get(n.id))
        elif n.kind == "mlp":
            layer = int(n.layer)
            node = _node(f"{layer}_{n_heads}_0", n_heads, str(layer), 0, "mlp", f"{layer}_{n_heads}-0", n.id,
                         influence=infl.get(n.id))
        elif n.kind == "logits":
            what = f"Output {metric or 'metric'}" + (f' of "{target}"' if target else "") + (
                f' minus "{foil}"' if foil else "") + (f" over {len(p.prompts)} prompts" if len(p.prompts) > 1 else "")
            node = _node(f"{n_layers + 1}_0_1", 0, str(n_layers + 1), 1, "logit", "L_0-1", f"{what} (p=n/a)",
                         target=True)
        else:
            continue
        ct_id[n.id] = node["node_id"]
        nodes.append(node)
    links = []
    for dst, row in rows.items():
        for src, w in row.items():
            if src in ct_id and dst in ct_id:
                link = {"source": ct_id[src], "target": ct_id[dst], "weight": w}
                if (src, dst) in roles:
                    link["roles"] = roles[(src, dst)]
                links.append(link)
    meta = {
        "slug": slugify(slug or f"{p.model}-{p.method}-{p.source}"), "scan": f"workbench:{p.model}",
        "transcoder_list": [], "prompt_tokens": ["(all positions)", "(next token)"],
        "prompt": str(first.get("prompt", "")), "node_threshold": None, "schema_version": SCHEMA_VERSION,
        "model": p.model, "target": target, "foil": foil,
        "info": {"generator": {"name": "workbench", "method": p.method, "source": p.source},
                 "note": "component graph: scores summed over token positions and prompts"},
        "n_prompts": len(p.prompts), "params": p.params,
    }
    logit = [nd["node_id"] for nd in nodes if nd["feature_type"] == "logit"]
    return {"metadata": meta, "qParams": _qparams(logit[:1], annotations, ct_id), "nodes": nodes, "links": links}


def from_circuit(cr: Any, k: int | None = None, slug: str | None = None, annotations: Any = None) -> dict[str, Any]:
    """A circuit's top ``k`` edges (its saved K by default) as a component graph JSON."""
    return from_subgraph(cr.subgraph(k), slug, cr.graph.n_layers, cr.graph.n_heads, annotations)
