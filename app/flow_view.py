"""The Information flow page's pieces: which node a click picked, a node's tables, the caption. The numbers come
from circuits.flow (the same engine as ``wb.flow`` and ``workbench flow``); this module only arranges them."""

from __future__ import annotations

from typing import Any


def _points(event: Any) -> list[dict[str, Any]]:
    """The clicked points of a chart's selection: Streamlit's event (attributes) or its session-state value (a
    dict, as a test sets it)."""
    try:
        points = event["selection"]["points"] if isinstance(event, dict) else event.selection.points
    except (AttributeError, KeyError, TypeError):
        return []
    return [p for p in points or [] if isinstance(p, dict)]


def clicked_node(event: Any, ids: set[str]) -> str | None:
    """The node id (the node trace's customdata) of the point the user clicked, if it is one of ``ids``."""
    for p in _points(event):
        name = p.get("customdata")
        if isinstance(name, list):
            name = name[0] if name else None
        if isinstance(name, str) and name in ids:
            return name
    return None


def clicked_edge(event: Any, graph: Any) -> tuple[str, str] | None:
    """(source, target) of the attention edge whose middle point the user clicked, if it is one of ``graph``'s."""
    kept = {(e.source, e.target) for e in graph.edges if e.role == "attn"}
    for p in _points(event):
        name = p.get("customdata")
        name = (name[0] if name else None) if isinstance(name, list) else name
        if isinstance(name, str) and "->" in name:
            src, dst = name.split("->", 1)
            if (src, dst) in kept:
                return src, dst
    return None


def edge_head_rows(flow: Any, source: str, target: str) -> list[dict[str, Any]]:
    """Every head's share of an attention edge (of the sum at its target, from its source's position)."""
    from circuits.flow import parse_node

    _, _, key = parse_node(source)
    _, layer, query = parse_node(target)
    return [{"head": h["head"], "share": h["share"]} for h in flow.heads_into(layer, query, key)]


def caption(flow: Any, graph: Any) -> str:
    """What the figure shows, in numbers that are the ones used."""
    p = graph.provenance.params
    pos = int(p["position"])
    n_attn = sum(e.role == "attn" for e in graph.edges)
    return (f"{flow.model} · {flow.n_tokens} tokens · routes into position {pos} ({flow.tokens[pos]!r}), which "
            f"predicts {flow.predictions[pos]!r} · edges with a share above {p['threshold']:g}: {len(graph.edges)} "
            f"({n_attn} through attention) among {len(graph.nodes)} nodes · computed in {flow.seconds:.2f} s")


def lens_rows(described: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"rank": i + 1, "token": repr(r["token"]), "probability": r["probability"]}
            for i, r in enumerate(described["lens"])]


def head_rows(described: dict[str, Any], n: int = 12) -> list[dict[str, Any]]:
    """After an attention: each head's share of this residual sum and the key it takes most from."""
    return [{"head": h["head"], "share": h["share"],
             "takes most from": f"{h['top key']}: {h['top key token']!r}", "from there": h["top key share"]}
            for h in described.get("heads", [])[:n]]


def incoming_rows(flow: Any, graph: Any, node: str) -> list[dict[str, Any]]:
    """The node's kept incoming edges, strongest first; an attention edge names its top heads."""
    from circuits.flow import parse_node

    rows = []
    for e in graph.edges_of(node):
        if e["direction"] != "in":
            continue
        heads = ""
        if e["role"] == "attn":
            _, _, key = parse_node(e["source"])
            _, layer, query = parse_node(e["target"])
            heads = ", ".join(f"{h['head']} {h['share']:.3f}" for h in flow.heads_into(layer, query, key)[:3]
                              if h["share"] > 0.0005)
        rows.append({"from": e["source"], "through": e["role"], "share": e["score"], "heads": heads})
    return rows
