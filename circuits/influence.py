"""Influence on a graph's logits and pruning by it, on a graph given as ``edges[target][source] = weight``: pure
functions the feature graph builds with and every consumer of a graph (interaction, exports, imports) reads.

``node_influence`` is circuit-tracer's influence (each target's |incoming edges| normalised to sum one, propagated
from the logits); ``graph_scores`` its replacement and completeness scores; ``prune`` its prune_graph by
cumulative node and edge influence, then ``cap``'s limits on nodes and edges.
"""

from __future__ import annotations

from typing import Any


def prune(edges: dict[str, dict[str, float]], influence: dict[str, float], max_nodes: int, max_edges: int,
          node_threshold: float | None = None, edge_threshold: float | None = None,
          ) -> tuple[list[str], dict[tuple[str, str], float]]:
    """circuit-tracer's prune_graph when thresholds are given (features and error nodes kept while their
    cumulative share of node influence stays within ``node_threshold``, token and logit nodes always; then
    edges by cumulative edge influence in the pruned graph up to ``edge_threshold``), then ``cap``'s caps
    (max_nodes by influence, max_edges, only what reaches the logits)."""
    if node_threshold is None and edge_threshold is None:
        return cap(edges, influence, max_nodes, max_edges)
    kept_nodes = {n for n in influence if node_kind(n) in ("token", "logits")} | {"logits"}
    ranked = sorted(((v, n) for n, v in influence.items() if node_kind(n) in ("feature", "error", "token")),
                    reverse=True)
    total = sum(v for v, _ in ranked)
    cum = 0.0
    for v, n in ranked:
        if total > 0 and cum / total >= (node_threshold or 1.0):
            break
        kept_nodes.add(n)
        cum += v
    pruned = {dst: {s: v for s, v in row.items() if s in kept_nodes} for dst, row in edges.items()
              if dst in kept_nodes}
    infl = node_influence(pruned, {"logits": 1.0})
    scored = []
    for dst, row in pruned.items():
        mass = sum(abs(v) for v in row.values()) or 1.0
        for src, v in row.items():
            if v != 0.0:
                scored.append((infl.get(dst, 0.0) * abs(v) / mass, src, dst))
    scored.sort(reverse=True)
    total_e = sum(x for x, _, _ in scored)
    chosen: dict[str, dict[str, float]] = {}
    cum = 0.0
    for x, src, dst in scored:
        if total_e > 0 and cum / total_e >= (edge_threshold or 1.0):
            break
        chosen.setdefault(dst, {})[src] = pruned[dst][src]
        cum += x
    return cap(chosen, influence, max_nodes, max_edges)


def node_kind(node_id: str) -> str:
    """A node's kind from its id (feature_graph's naming)."""
    if node_id == "logits":
        return "logits"
    if node_id.startswith("emb@"):
        return "token"
    return "error" if ".err@" in node_id else "feature"


def graph_scores(edges: dict[str, dict[str, float]], kinds: dict[str, str] | None = None,
                 computed_on: str = "unpruned", seed: dict[str, float] | None = None) -> dict[str, Any]:
    """circuit-tracer 0.5.0's ``compute_graph_scores`` on a graph given as ``edges[target][source] = weight``.

    Its nodes are those of circuit-tracer's graph: the expanded targets (features that got a pass, the
    logits), every error node and every token embedding; a source feature that was never expanded is not a
    node there (circuit-tracer's adjacency holds only its selected features), so its edges are left out. Each
    target's |incoming weights| are normalised to sum to one; influence is propagated from the logits
    (weight 1, or ``seed``: each logit node's probability, as circuit-tracer weighs its logits).
    replacement = token influence / (token + error influence); completeness = sum over nodes of
    (1 - the error share of its normalised inputs) x (its influence, the logits' weight included) / the sum of
    those influences. None where a denominator is zero (no token or error reaches the logits)."""
    kinds = kinds or {}

    def kind(n: str) -> str:
        return kinds.get(n) or node_kind(n)

    targets = set(edges)
    rows = {dst: {s: abs(float(v)) for s, v in row.items() if s in targets or kind(s) in ("error", "token")}
            for dst, row in edges.items()}
    roots = [n for n in targets if kind(n) == "logits"] or ["logits"]
    seed = seed or {r: 1.0 / len(roots) for r in roots}
    infl = node_influence(rows, dict(seed))  # the seeds stay in: circuit-tracer's node influence + logit weight
    token = sum(v for n, v in infl.items() if kind(n) == "token")
    error = sum(v for n, v in infl.items() if kind(n) == "error")
    total = sum(infl.values())
    weighted = 0.0
    for n, v in infl.items():
        row = rows.get(n) or {}
        mass = sum(row.values())
        err = sum(w for s, w in row.items() if kind(s) == "error") / mass if mass > 0 else 0.0
        weighted += (1.0 - err) * v
    return {"replacement": token / (token + error) if token + error > 0 else None,
            "completeness": weighted / total if total > 0 else None, "computed_on": computed_on}


def node_influence(edges: dict[str, dict[str, float]], seed: dict[str, float]) -> dict[str, float]:
    """Influence on the logits: each target's |incoming edges| normalised to sum 1, propagated top-down.
    Targets are processed in an order where every node's influence is final before it passes it on."""
    infl = dict(seed)
    pending = {dst: set(srcs) for dst, srcs in edges.items()}
    order: list[str] = []
    done: set[str] = set()
    # a target is ready once no other pending target has it as a source (so its influence is complete)
    feeds: dict[str, int] = {}
    for srcs in pending.values():
        for s in srcs:
            if s in pending:
                feeds[s] = feeds.get(s, 0) + 1
    ready = [d for d in pending if feeds.get(d, 0) == 0]
    while ready:
        dst = ready.pop()
        order.append(dst)
        done.add(dst)
        for s in pending[dst]:
            if s in pending and s not in done:
                feeds[s] -= 1
                if feeds[s] == 0:
                    ready.append(s)
    for dst in order:
        row = edges[dst]
        total = sum(abs(v) for v in row.values()) or 1.0
        w = infl.get(dst, 0.0)
        if w == 0.0:
            continue
        for src, v in row.items():
            infl[src] = infl.get(src, 0.0) + w * abs(v) / total
    return infl


def cap(edges: dict[str, dict[str, float]], influence: dict[str, float], max_nodes: int,
        max_edges: int) -> tuple[list[str], dict[tuple[str, str], float]]:
    """Top nodes by influence, the strongest edges among them by edge influence, then only what reaches
    the logits (every kept node has a kept path to ``logits``)."""
    ranked = sorted((n for n in influence if n != "logits" and influence[n] > 0), key=lambda n: -influence[n])
    keep = set(ranked[:max_nodes]) | {"logits"}
    scored = []
    for dst, row in edges.items():
        if dst not in keep:
            continue
        total = sum(abs(v) for v in row.values()) or 1.0
        for src, v in row.items():
            if src in keep and v != 0.0:
                scored.append((influence.get(dst, 0.0) * abs(v) / total, src, dst, v))
    scored.sort(reverse=True)
    chosen = {(s, d): v for _, s, d, v in scored[:max_edges]}
    reach = {"logits"}
    changed = True
    while changed:  # nodes with a kept path to the logits
        changed = False
        for s, d in chosen:
            if d in reach and s not in reach:
                reach.add(s)
                changed = True
    chosen = {(s, d): v for (s, d), v in chosen.items() if s in reach and d in reach}
    return [n for n in ["logits"] + ranked if n in reach], chosen
