"""Pruning as circuit-tracer prunes, with the paths kept (issue 50 item 4): on a Subgraph, every kept node lies on a
drawn path to the logits (and from the embeddings where the graph has one), pinned nodes are never pruned, and a
low threshold never leaves the ends alone when the graph joins them."""

from __future__ import annotations

import pytest

from circuits import interact as I
from circuits.subgraph import GraphEdge, GraphNode, Provenance, Subgraph


def chain() -> Subgraph:
    """embed -> L0.H0 -> L1.H0 -> L2.H0 -> logits, the one path; L2.H0 holds most influence but has no edge from
    the embeddings, so a node threshold alone keeps it floating. A side MLP and a dead head (no path to logits)."""
    nodes = [GraphNode("embed", "embed", -1), GraphNode("L0.H0", "head", 0), GraphNode("L1.H0", "head", 1),
             GraphNode("L2.H0", "head", 2), GraphNode("L1.mlp", "mlp", 1), GraphNode("L0.H1", "head", 0),
             GraphNode("logits", "logits", 3)]
    edges = [GraphEdge("embed", "L0.H0", 1.0, "v"), GraphEdge("L0.H0", "L1.H0", 0.2, "q"),
             GraphEdge("L1.H0", "L2.H0", 0.3, "v"), GraphEdge("embed", "L2.H0", 0.05, "k"),
             GraphEdge("L2.H0", "logits", 3.0), GraphEdge("L1.mlp", "logits", 0.2), GraphEdge("embed", "L1.mlp", 0.2),
             GraphEdge("embed", "L0.H1", 0.5, "v")]
    return Subgraph(nodes, edges, Provenance("toy", "dpa", "circuit", [{"prompt": "x", "target": " a"}]))


def paths_ok(sub: Subgraph) -> None:
    """Every node reaches the logits along drawn edges, and every non-input node is reached from the input."""
    ids = {n.id for n in sub.nodes}
    down, up = {"logits"}, {"embed"}
    for _ in ids:
        down |= {e.source for e in sub.edges if e.target in down}
        up |= {e.target for e in sub.edges if e.source in up}
    assert ids <= down, ids - down
    assert ids <= up, ids - up


@pytest.mark.parametrize("t", [0.01, 0.1, 0.3, 0.5, 0.8, 0.95])
def test_every_kept_node_is_on_a_path(t):
    pruned = I.prune(chain(), t)
    assert {"embed", "logits", "L2.H0"} <= {n.id for n in pruned.nodes}
    assert pruned.edges, "a low threshold left the ends alone"
    paths_ok(pruned)


def test_dead_nodes_go_and_the_threshold_only_adds():
    sub = chain()
    assert "L0.H1" not in {n.id for n in I.prune(sub, 0.99).nodes}  # no path to the logits
    counts = [len(I.prune(sub, t).nodes) for t in (0.01, 0.5, 0.9, 0.99)]
    assert counts == sorted(counts)
    assert I.prune(sub, 1.0) is sub


def test_pinned_nodes_are_never_pruned():
    sub = chain()
    low = I.prune(sub, 0.01)
    assert "L1.mlp" not in {n.id for n in low.nodes}
    pinned = I.prune(sub, 0.01, pinned=["L1.mlp", "L0.H1", "not-a-node"])
    ids = {n.id for n in pinned.nodes}
    assert {"L1.mlp", "L0.H1"} <= ids and "not-a-node" not in ids
    assert ("L1.mlp", "logits") in {(e.source, e.target) for e in pinned.edges}


def test_connect_adds_the_strongest_path():
    sub = chain()
    got = I.connect(sub, {"embed", "logits", "L1.H0"})
    assert got == {"embed", "logits", "L0.H0", "L1.H0", "L2.H0"}


def feature_graph() -> Subgraph:
    """A feature graph's shape: token embeddings (kind token) -> L6 -> L12 -> L18 -> L24 features -> logits, where
    the L24 features and an error node hold most of the influence and the middle rows little each (the finding:
    a threshold of 0.8 kept none of L6-L18 and left the embeddings unconnected)."""
    nodes = [GraphNode(f"emb@{p}", "token", -1, p) for p in range(3)]
    nodes += [GraphNode(f"L{layer}.{f}@2", "feature", layer, 2) for layer in (6, 12, 18, 24) for f in range(3)]
    nodes += [GraphNode("L24.err@2", "error", 24, 2), GraphNode("logits", "logits", 30)]
    edges = [GraphEdge(f"L24.{f}@2", "logits", 3.0 - f) for f in range(3)] + [GraphEdge("L24.err@2", "logits", 2.0)]
    for lo, hi in ((18, 24), (12, 18), (6, 12)):
        edges += [GraphEdge(f"L{lo}.{a}@2", f"L{hi}.{b}@2", 0.1 * (1 + a + b)) for a in range(3) for b in range(3)]
    edges += [GraphEdge(f"emb@{p}", f"L6.{f}@2", 0.2 + 0.1 * p) for p in range(3) for f in range(3)]
    edges += [GraphEdge(f"emb@{p}", f"L24.{f}@2", 0.05) for p in range(3) for f in range(3)]
    return Subgraph(nodes, edges, Provenance("toy", "dpa", "feature-graph", [{"prompt": "a b c", "target": " d"}]))


@pytest.mark.parametrize("t", [0.3, 0.5, 0.8])
def test_a_feature_graph_keeps_its_middle_rows_and_embeddings(t):
    pruned = I.prune(feature_graph(), t)
    ids = {n.id for n in pruned.nodes}
    tokens = {n.id for n in pruned.nodes if n.kind == "token"}
    drawn = {n for e in pruned.edges for n in (e.source, e.target)}
    assert tokens & drawn, "no embedding connected"
    kept = {n.id for n in pruned.nodes if n.kind == "feature"}
    assert kept and all(n in drawn for n in kept)
    assert {n.split(".")[0] for n in kept} >= {"L6", "L12", "L18", "L24"}  # the middle rows stay
    for n in kept:  # every kept feature reaches the logits and is reached from an embedding
        down, up = {n}, {n}
        for _ in ids:
            down |= {e.target for e in pruned.edges if e.source in down}
            up |= {e.source for e in pruned.edges if e.target in up}
        assert "logits" in down and up & tokens, n


def test_the_top_node_without_its_own_edge_to_the_logits_keeps_its_path():
    """Finding 4 as reported ("0.3 keeps only embed and logits, 0 of 27 edges"): the most influential node, a hub
    read by three MLPs, has no edge of its own to the logits; the node threshold alone kept it and then dropped
    it as unconnected."""
    nodes = [GraphNode("embed", "embed", -1), GraphNode("L0.H0", "head", 0)]
    nodes += [GraphNode(f"L{i}.mlp", "mlp", i) for i in (1, 2, 3)] + [GraphNode("logits", "logits", 4)]
    edges = [GraphEdge("embed", "L0.H0", 1.0, "v")]
    edges += [GraphEdge("L0.H0", f"L{i}.mlp", 1.0) for i in (1, 2, 3)]
    edges += [GraphEdge("embed", f"L{i}.mlp", 0.1) for i in (1, 2, 3)]
    edges += [GraphEdge(f"L{i}.mlp", "logits", 1.0) for i in (1, 2, 3)]
    sub = Subgraph(nodes, edges, Provenance("toy", "dpa", "circuit", [{"prompt": "x", "target": " a"}]))
    infl = I.influence(sub)
    assert max((v, k) for k, v in infl.items() if k not in ("embed", "logits"))[1] == "L0.H0"
    pruned = I.prune(sub, 0.3)
    ids = {n.id for n in pruned.nodes}
    assert "L0.H0" in ids and len(ids) > 2 and pruned.edges
    paths_ok(pruned)
