"""The edge-level computational graph of a hooked transformer: one type every edge method returns.

Nodes (senders write into the residual stream, receivers read from it):

- ``embed``: the input embedding (token plus positional embedding: ``blocks.0.hook_resid_pre``);
- ``L{l}.H{h}``: attention head h of layer l, its write ``z_h W_O^h`` (the shared ``b_O`` is not a node);
- ``L{l}.mlp``: the MLP of layer l (``hook_mlp_out``);
- ``logits``: the final residual stream, read through the final norm and the unembedding.

A head has three inputs, one per role: ``L{l}.H{h}.q``, ``.k`` and ``.v`` (the residual stream as that
head's query, key or value projection reads it, before its norm); an MLP has one input, named like the
node (``L{l}.mlp``); so does ``logits``. An edge joins a sender to a receiver input downstream of it:
a head input of layer l reads the embedding and every head and MLP of layers < l; the MLP of layer l
also reads the heads of layer l; the logits read everything (Conmy et al. 2023, Hanna et al. 2024).

Score layout: ``scores[e]`` for edge ``e`` of ``graph.edges`` (sender index, receiver index), in
receiver-major order (all edges into receiver 0, then into receiver 1, ...), senders in graph order.
``graph.dense(scores)`` gives the [sender, receiver] matrix (0 where no edge exists). A circuit is a
boolean mask over edges; ``prune_connected`` keeps the edges that lie on some path from ``embed`` to
``logits``, so a pruned circuit has no dangling node.

The result every graph method hands on, ``Subgraph`` (``circuits.subgraph``, re-exported here), holds only the
chosen nodes and edges; this index of every possible edge is what edge methods score and circuits select from.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from jaxtyping import Bool, Float, Int

from circuits.subgraph import GraphEdge, GraphNode, Provenance, Subgraph
from core.errors import RangeError

__all__ = ["ROLES", "CircuitGraph", "GraphEdge", "GraphNode", "Node", "Provenance", "Subgraph", "check_k"]

ROLES = ("q", "k", "v")


@dataclass(frozen=True)
class Node:
    """A sender or receiver. layer: -1 for embed, n_layers for logits. role: q|k|v for head inputs."""

    name: str
    kind: str  # embed | head | mlp | logits
    layer: int
    head: int | None = None
    role: str | None = None

    @property
    def component(self) -> str:
        """The node a receiver input belongs to (``L3.H5.q`` -> ``L3.H5``)."""
        return self.name.rsplit(".", 1)[0] if self.role else self.name


class CircuitGraph:
    """Senders, receivers and the edges between them for a model of ``n_layers`` x ``n_heads``."""

    def __init__(self, n_layers: int, n_heads: int, has_mlp: bool, parallel: bool = False) -> None:
        if n_layers < 1 or n_heads < 1:
            raise RangeError("a circuit graph needs at least one layer and one head")
        self.n_layers, self.n_heads, self.has_mlp = int(n_layers), int(n_heads), bool(has_mlp)
        # parallel blocks (GPT-NeoX): a layer's MLP reads resid_pre, so its own layer's heads do not reach it
        self.parallel = bool(parallel) and self.has_mlp
        senders = [Node("embed", "embed", -1)]
        receivers: list[Node] = []
        for layer in range(n_layers):
            for h in range(n_heads):
                senders.append(Node(f"L{layer}.H{h}", "head", layer, h))
                receivers += [Node(f"L{layer}.H{h}.{r}", "head", layer, h, r) for r in ROLES]
            if has_mlp:
                senders.append(Node(f"L{layer}.mlp", "mlp", layer))
                receivers.append(Node(f"L{layer}.mlp", "mlp", layer))
        receivers.append(Node("logits", "logits", n_layers))
        self.senders: list[Node] = senders
        self.receivers: list[Node] = receivers
        self.sender_index = {n.name: i for i, n in enumerate(senders)}
        self.receiver_index = {n.name: i for i, n in enumerate(receivers)}

    @classmethod
    def of(cls, model: Any) -> CircuitGraph:
        a = model.arch
        return cls(a.n_layers, a.n_heads, a.mlp != "none" and bool(a.d_mlp), parallel=a.parallel)

    # -- structure ---------------------------------------------------------------------------
    def upstream(self, receiver: Node) -> int:
        """How many senders (a prefix of ``senders``) a receiver reads."""
        per_layer = self.n_heads + int(self.has_mlp)
        if receiver.kind == "logits":
            return len(self.senders)
        if receiver.kind == "mlp":
            return 1 + receiver.layer * per_layer + (0 if self.parallel else self.n_heads)
        return 1 + receiver.layer * per_layer

    @cached_property
    def valid(self) -> Bool[torch.Tensor, "sender receiver"]:
        """Which [sender, receiver] pairs are edges."""
        m = torch.zeros(len(self.senders), len(self.receivers), dtype=torch.bool)
        for j, r in enumerate(self.receivers):
            m[: self.upstream(r), j] = True
        return m

    @cached_property
    def edges(self) -> Int[torch.Tensor, "edge 2"]:
        """[n_edges, 2] (sender index, receiver index), receiver-major."""
        recv, send = torch.nonzero(self.valid.T, as_tuple=True)
        return torch.stack([send, recv], dim=1)

    @property
    def n_edges(self) -> int:
        return int(self.edges.shape[0])

    @property
    def nodes(self) -> list[Node]:
        """The drawable nodes: embed, heads, MLPs, logits (receiver inputs fold into their head)."""
        return self.senders + [self.receivers[-1]]

    def edge_name(self, e: int) -> tuple[str, str]:
        s, r = self.edges[e].tolist()
        return self.senders[s].name, self.receivers[r].name

    def edge_id(self, src: str, dst: str) -> int:
        """The index of edge src -> dst; RangeError naming what exists when there is no such edge."""
        if src not in self.sender_index:
            raise RangeError(f"no sender node {src!r}; senders are embed, L<l>.H<h>, L<l>.mlp")
        if dst not in self.receiver_index:
            raise RangeError(f"no receiver {dst!r}; receivers are L<l>.H<h>.q|k|v, L<l>.mlp, logits")
        s, r = self.sender_index[src], self.receiver_index[dst]
        if not bool(self.valid[s, r]):
            raise RangeError(f"there is no edge {src} -> {dst}: {dst} does not read {src}")
        return int(self._lookup[s, r])

    @cached_property
    def _lookup(self) -> torch.Tensor:
        table = torch.full(self.valid.shape, -1, dtype=torch.long)
        table[self.edges[:, 0], self.edges[:, 1]] = torch.arange(self.n_edges)
        return table

    def dense(self, scores: Float[torch.Tensor, " edge"]) -> Float[torch.Tensor, "sender receiver"]:
        out = torch.zeros(self.valid.shape, dtype=scores.dtype)
        out[self.edges[:, 0], self.edges[:, 1]] = scores
        return out

    def flat(self, dense: Float[torch.Tensor, "sender receiver"]) -> Float[torch.Tensor, " edge"]:
        return dense[self.edges[:, 0], self.edges[:, 1]]

    def mask_dense(self, mask: Bool[torch.Tensor, " edge"]) -> Bool[torch.Tensor, "sender receiver"]:
        out = torch.zeros(self.valid.shape, dtype=torch.bool)
        out[self.edges[:, 0], self.edges[:, 1]] = mask
        return out

    def summary(self) -> dict[str, int]:
        return {"n_nodes": len(self.nodes), "n_edges": self.n_edges, "n_senders": len(self.senders),
                "n_receivers": len(self.receivers)}

    # -- circuits -----------------------------------------------------------------------------
    def top_k(self, scores: Float[torch.Tensor, " edge"], k: int) -> Bool[torch.Tensor, " edge"]:
        """The k edges of largest |score| (ties broken by edge order)."""
        k = check_k(k, self.n_edges)
        mask = torch.zeros(self.n_edges, dtype=torch.bool)
        mask[torch.topk(scores.abs().double(), k, sorted=False).indices] = True
        return mask

    def greedy(self, scores: Float[torch.Tensor, " edge"], k: int) -> Bool[torch.Tensor, " edge"]:
        """Grow a circuit from the logits (``grow``, by |score|) to k edges, then prune it to the edges on a
        path from embed to logits."""
        return self.prune_connected(self.grow(scores, check_k(k, self.n_edges), absolute=True))

    def grow(self, scores: Float[torch.Tensor, " edge"], n: int, absolute: bool = True) -> Bool[torch.Tensor, " edge"]:
        """From the logits, repeatedly add the best edge (by |score|, or by signed score) into a node already
        in the circuit, until n edges (MIB's greedy selection); not pruned."""
        import heapq

        key = (scores.double().abs() if absolute else scores.double()).tolist()
        src_node = self.edges[:, 0].tolist()
        incoming = self.incoming
        heap: list[tuple[float, int]] = []
        reached = [False] * len(self.nodes)

        def reach(node: int) -> None:
            if not reached[node]:
                reached[node] = True
                for e in incoming[node]:
                    heapq.heappush(heap, (-key[e], e))

        reach(len(self.nodes) - 1)  # the logits
        taken: list[int] = []
        while len(taken) < n and heap:
            _, e = heapq.heappop(heap)
            taken.append(e)
            reach(src_node[e])
        mask = torch.zeros(self.n_edges, dtype=torch.bool)
        mask[torch.tensor(taken, dtype=torch.long)] = True
        return mask

    @cached_property
    def receiver_node(self) -> list[int]:
        """Per receiver, the index in ``nodes`` of the node it belongs to (``L3.H5.q`` -> ``L3.H5``)."""
        index = {n.name: i for i, n in enumerate(self.nodes)}
        return [index[r.component] for r in self.receivers]

    @cached_property
    def incoming(self) -> list[list[int]]:
        """Per node (index in ``nodes``), the ids of the edges into it (a head's q, k and v inputs together)."""
        table: list[list[int]] = [[] for _ in self.nodes]
        for e, r in enumerate(self.edges[:, 1].tolist()):
            table[self.receiver_node[r]].append(e)
        return table

    def prune_connected(self, mask: Bool[torch.Tensor, " edge"]) -> Bool[torch.Tensor, " edge"]:
        """Keep only the edges on some path embed -> ... -> logits (no dangling nodes)."""
        kept = torch.nonzero(mask).flatten()
        out = torch.zeros_like(mask)
        if not len(kept):
            return out
        # senders are in topological order (a sender's index is its node's index, and every edge runs from a
        # lower node index to a higher one): in one sweep by sender index, every edge into a node comes
        # before the edges out of it
        pairs = self.edges[kept]
        order = torch.argsort(pairs[:, 0], stable=True)
        kept = kept[order]
        src = pairs[order, 0].tolist()
        dst = [self.receiver_node[r] for r in pairs[order, 1].tolist()]
        forward = [False] * len(self.nodes)  # nodes reachable from embed through kept edges
        forward[0] = True
        for s, d in zip(src, dst, strict=True):
            if forward[s]:
                forward[d] = True
        backward = [False] * len(self.nodes)  # nodes that reach the logits, swept from the top
        backward[-1] = True
        for s, d in zip(reversed(src), reversed(dst), strict=True):
            if backward[d]:
                backward[s] = True
        on_path = [forward[s] and backward[d] and forward[d] and backward[s] for s, d in zip(src, dst, strict=True)]
        out[kept[torch.tensor(on_path, dtype=torch.bool)]] = True
        return out

    def graph_nodes(self, edges: list[dict[str, Any]]) -> list[GraphNode]:
        """The nodes to show for edges {"src", "dst", ...}: the ones they touch plus embed and logits (every
        node of a small graph)."""
        names = {"embed", "logits"} | {e["src"] for e in edges}
        names |= {self.receivers[self.receiver_index[e["dst"]]].component for e in edges}
        small = len(self.nodes) <= 40
        return [GraphNode(n.name, n.kind, n.layer, label=n.name,
                          metadata={} if n.head is None else {"head": n.head})
                for n in self.nodes if small or n.name in names]

    def nodes_in(self, mask: Bool[torch.Tensor, " edge"]) -> list[str]:
        """The node names a circuit touches (receiver inputs folded into their node)."""
        names = set()
        for e in torch.nonzero(mask).flatten().tolist():
            src, dst = self.edge_name(e)
            names.add(src)
            names.add(self.receivers[self.receiver_index[dst]].component)
        return [n.name for n in self.nodes if n.name in names]


def check_k(k: int, n_edges: int) -> int:
    if int(k) <= 0:
        raise RangeError(f"the number of edges must be positive (got {k})")
    return min(int(k), n_edges)
