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

``Subgraph`` (below) is the result every graph method hands on: typed nodes (``GraphNode``), an edge table
(``GraphEdge``: source, target, role, score), error and bias nodes where a method has them, and provenance;
it plots, tabulates, saves into the run store and reopens from any circuit or feature-graph run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Bool, Float

from core.errors import RangeError

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from core.store import Run

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
    def edges(self) -> torch.Tensor:
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

    def drawable(self, edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``graph_nodes`` as circuits.plot.graph_figure takes them."""
        return [n.drawable() for n in self.graph_nodes(edges)]

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


# -- the result type every graph method returns ---------------------------------------------------------
NODE_KINDS = ("embed", "head", "mlp", "logits", "feature", "error", "bias", "token")
SUBGRAPH_KIND = "subgraph"  # the run kind of a Subgraph saved on its own


@dataclass
class GraphNode:
    """A node of a Subgraph. layer: its drawing row (-1 the input, n_layers the logits; a transcoder's
    features half a layer below its layer's residual SAE). position: the token position, where it has one.
    metadata: what the method knows of it (a feature's dictionary, activation, influence; a head's index)."""

    id: str
    kind: str
    layer: float
    position: int | None = None
    label: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def drawable(self) -> dict[str, Any]:
        """The node as circuits.plot.graph_figure takes it."""
        return {"name": self.id, "layer": self.layer, "kind": self.kind, "label": self.label or self.id}


@dataclass
class GraphEdge:
    """source -> target (node ids), score; role: which input of the target it enters (q, k or v of a head)."""

    source: str
    target: str
    score: float
    role: str | None = None

    @property
    def dst(self) -> str:
        """The receiver name circuits.plot draws (``L3.H5.q`` for a head's query input)."""
        return f"{self.target}.{self.role}" if self.role else self.target


@dataclass
class Provenance:
    """Where a subgraph came from: the model, the method, the run kind that holds it (circuit, feature-graph,
    subgraph), its prompt rows and the method's parameters."""

    model: str
    method: str
    source: str
    prompts: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Subgraph:
    """Typed nodes, an edge table and provenance: what circuit discovery (``CircuitResult.subgraph``) and the
    feature graph (``FeatureGraph.subgraph``) hand on, and what the app draws. Error and bias terms, where a
    method has them, are nodes of kind ``error`` / ``bias`` (``terms``). ``CircuitGraph`` stays the index of
    every possible edge; a Subgraph holds only the chosen ones."""

    nodes: list[GraphNode]
    edges: list[GraphEdge]
    provenance: Provenance

    def node(self, node_id: str) -> GraphNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise RangeError(f"no node {node_id!r} in this graph")

    @property
    def terms(self) -> list[GraphNode]:
        """The error and bias nodes (what the method's decomposition leaves outside its features)."""
        return [n for n in self.nodes if n.kind in ("error", "bias")]

    def edges_of(self, node_id: str) -> list[dict[str, Any]]:
        """A node's edges, strongest first: {"direction" (in|out), "source", "target", "role", "score"}."""
        rows = [{"direction": "in" if e.target == node_id else "out", "source": e.source, "target": e.target,
                 "role": e.role, "score": e.score} for e in self.edges if node_id in (e.source, e.target)]
        return sorted(rows, key=lambda r: -abs(r["score"]))

    def drawable(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(nodes, edges) as circuits.plot.graph_figure takes them."""
        return ([n.drawable() for n in self.nodes],
                [{"src": e.source, "dst": e.dst, "score": e.score} for e in self.edges])

    def plot(self, title: str | None = None, selected: str | None = None, subtitle: str = "") -> go.Figure:
        """The graph drawn as the app draws it (circuits.plot): a circuit by layer rows and head columns, a
        feature graph by layer rows and token-position columns."""
        from circuits.plot import feature_graph_figure, feature_view, graph_figure, metric_name

        p = self.provenance
        row = p.prompts[0] if len(p.prompts) == 1 else {}
        what = metric_name(row.get("target"), row.get("foil")) if row else "target − foil"
        title = title or f"{p.method} {p.source} of {what} on {p.model}: {len(self.edges)} edges"
        if p.source == "feature-graph" and all(n.position is not None or n.kind == "logits" for n in self.nodes):
            return feature_graph_figure(feature_view(self), selected=selected, title=title, subtitle=subtitle)
        nodes, edges = self.drawable()
        return graph_figure(nodes, edges, selected=selected, title=title, subtitle=subtitle)

    def save_figure(self, path: Any, **plot_args: Any) -> Any:
        """Save ``plot(**plot_args)`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        from core.figures import save_figure

        return save_figure(self.plot(**plot_args), path)

    def table(self) -> pd.DataFrame:
        """The edge table (source, target, role, score) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([vars(e) for e in self.edges], columns=["source", "target", "role", "score"])

    def node_table(self) -> pd.DataFrame:
        """One row a node: id, kind, layer, position, label, then its metadata."""
        import pandas as pd

        return pd.DataFrame([{"id": n.id, "kind": n.kind, "layer": n.layer, "position": n.position,
                              "label": n.label, **n.metadata} for n in self.nodes])

    def export(self, fmt: str, path: Any, table: str = "edges", overwrite: bool = False) -> dict[str, Any]:
        """Write this subgraph as ``graph-json`` (circuit-tracer / Neuronpedia), ``csv`` or ``parquet`` (its edge
        table, or ``table="nodes"``) at ``path`` (circuits.export)."""
        from circuits.export import export

        return export(self, fmt, path, table=table, overwrite=overwrite)

    def to_json(self) -> dict[str, Any]:
        return {"nodes": [vars(n) for n in self.nodes], "edges": [vars(e) for e in self.edges],
                "provenance": vars(self.provenance)}

    @classmethod
    def from_json(cls, d: Any, what: str = "a subgraph") -> Subgraph:
        """Read ``to_json``'s layout back; anything else is a RunStoreError naming what is wrong."""
        import math

        from core.checks import reading
        from core.errors import RunStoreError

        with reading(what, RunStoreError):
            nodes = [GraphNode(str(n["id"]), str(n["kind"]), float(n["layer"]), _position(n.get("position")),
                               str(n.get("label") or ""), dict(n.get("metadata") or {})) for n in d["nodes"]]
            edges = [GraphEdge(str(e["source"]), str(e["target"]), float(e["score"]),
                               None if e.get("role") is None else str(e["role"])) for e in d["edges"]]
            p = d["provenance"]
            prov = Provenance(str(p["model"]), str(p["method"]), str(p["source"]),
                              [dict(r) for r in p.get("prompts") or []], dict(p.get("params") or {}))
        ids = {n.id for n in nodes}
        for e in edges:
            if e.source not in ids or e.target not in ids or not math.isfinite(e.score):
                raise RunStoreError(f"{what} is damaged: edge {e.source} -> {e.target} ({e.score})")
        return cls(nodes, edges, prov)

    def save(self, store: Any = None) -> Run:
        """Save as a run of kind ``subgraph`` (its figure, its JSON and the edge table), atomically."""
        import json

        from core.store import RunDraft, RunStore

        store = store if isinstance(store, RunStore) else RunStore(store)
        p = self.provenance
        return store.save(RunDraft(
            kind=SUBGRAPH_KIND, model=p.model, method=p.method, args={"source": p.source, "params": p.params},
            result={"n_nodes": len(self.nodes), "n_edges": len(self.edges), **self.to_json()},
            figures={"graph": self.plot()}, files={"subgraph.json": json.dumps(self.to_json(), allow_nan=False)}))

    @classmethod
    def from_run(cls, run: Any) -> Subgraph:
        """The subgraph of a stored run: a ``circuit`` run (its saved top edges), a ``feature-graph`` run or a
        ``subgraph`` run, including those saved before this type existed."""
        from core.checks import reading
        from core.errors import RunStoreError

        if run.kind == "circuit":
            from circuits.discover import CircuitResult  # the readers live above: lazy, no import cycle

            return CircuitResult.from_run(run).subgraph()
        if run.kind == "feature-graph":
            from circuits.feature_graph import FeatureGraph

            with reading(f"run {run.id}", RunStoreError):
                return FeatureGraph.from_json(run.result()).subgraph()
        if run.kind == SUBGRAPH_KIND:
            return cls.from_json(run.result(), f"run {run.id}'s subgraph")
        raise RunStoreError(f"run {run.id} is a {run.kind or 'unknown'} run, not a circuit or feature graph")


def _position(value: Any) -> int | None:
    return None if value is None else int(value)
