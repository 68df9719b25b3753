"""The one graph result: typed nodes (``GraphNode``), an edge table (``GraphEdge``: source, target, role, score),
error and bias nodes where a method has them, and provenance. It plots (circuits.plot), tabulates, exports
(circuits.export), saves into the run store; ``circuits.runs.subgraph_of`` reopens it from any circuit, feature-graph
or subgraph run. It knows nothing of the model's edge space (``circuits.graph.CircuitGraph``), which builds its
nodes from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import RangeError

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from core.store import Run

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

    run_kind = SUBGRAPH_KIND  # what circuits.export and the run store call a Subgraph saved on its own

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


def _position(value: Any) -> int | None:
    return None if value is None else int(value)
