"""The one graph result: typed nodes (``GraphNode``: id, kind, layer, position, label, feature and the method's
metadata), an edge table (``GraphEdge``: source, target, score, role), error and bias nodes where a
method has them, graph-level scores, what the producer computed beside the graph (``metadata``), provenance, and a
content identity (``key``). Circuit discovery (``CircuitResult.subgraph``), the feature graph (DPA or the
replacement model's gradients: ``circuits.feature_graph``), an imported graph JSON (``circuits.importer``) and the
app's interaction (``circuits.interact``) all hand on this type; it plots (circuits.plot), tabulates, exports
(circuits.export), saves into the run store, and ``circuits.runs.subgraph_of`` reopens it from any circuit,
feature-graph or subgraph run. It knows nothing of the model's edge space (``circuits.graph.CircuitGraph``), which
builds circuit nodes from it.

A feature graph (one prompt, token positions, dictionaries) carries its prompt's tokens in ``metadata`` (with the
token ids, the target's id, probability and logit, the seconds and passes it took) and is stored in the run store's
``feature-graph`` layout (``to_json``), so runs written before this type read back the same; anything else is a
``subgraph`` run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from circuits.export import export as export_to
from circuits.influence import graph_scores
from core.checks import reading
from core.errors import RangeError, RunStoreError
from core.figures import save_figure
from core.store import RunDraft, RunStore

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from core.store import Run

NODE_KINDS = ("embed", "head", "mlp", "logits", "feature", "error", "bias", "token")
SUBGRAPH_KIND = "subgraph"  # the run kind of a Subgraph saved on its own
FEATURE_GRAPH_KIND = "feature-graph"  # the run kind of a feature graph
# a feature graph's stored node: these fields, then the method's own (token, dictionary, feature, ...) in metadata
_NODE_FIELDS = ("id", "kind", "row", "position", "label")
_NODE_INFO = ("token", "dictionary", "feature", "activation", "score")


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

    @property
    def feature(self) -> int | None:
        """A dictionary feature's index (None for any other node)."""
        return self.metadata.get("feature")

    def drawable(self) -> dict[str, Any]:
        """The node as circuits.plot.graph_figure takes it."""
        return {"name": self.id, "layer": self.layer, "kind": self.kind, "label": self.label or self.id}

    def row(self) -> dict[str, Any]:
        """The node as a feature graph stores it: kind, row (its layer), position, its method's fields, label, id,
        then the rest (influence; an imported node's clerp and its file's own fields, ``ct``)."""
        md = self.metadata
        return {"kind": self.kind, "row": self.layer, "position": self.position,
                **{k: md[k] for k in _NODE_INFO if k in md}, "label": self.label, "id": self.id,
                **{k: v for k, v in md.items() if k not in _NODE_INFO}}


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
    """Typed nodes, an edge table, graph-level scores, metadata and provenance: what every graph method returns and
    every consumer takes. Error and bias terms, where a method has them, are nodes of kind ``error`` / ``bias``
    (``terms``). ``CircuitGraph`` stays the index of every possible edge; a Subgraph holds only the chosen ones.

    scores: graph-level scores (a feature graph's replacement and completeness scores, circuit-tracer's
    ``compute_graph_scores``; ``graph_scores()`` computes them on this graph where none were kept). metadata: what
    its producer computed beside it (a feature graph's ``tokens``, ``token_ids``, ``target_id``, ``target_prob``,
    ``target_logit``, ``seconds``, ``n_passes``)."""

    nodes: list[GraphNode]
    edges: list[GraphEdge]
    provenance: Provenance
    scores: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    # -- what kind of graph, and its identity ----------------------------------------------------------------------
    @property
    def is_feature_graph(self) -> bool:
        """A feature graph as its producer built it (one prompt's token positions and dictionaries), stored in the
        run store's feature-graph layout; a circuit, or a graph saved as a subgraph run, is not."""
        return "tokens" in self.metadata

    @property
    def run_kind(self) -> str:
        """The run kind it is saved and exported as: ``feature-graph`` or ``subgraph``."""
        return FEATURE_GRAPH_KIND if self.is_feature_graph else SUBGRAPH_KIND

    @property
    def key(self) -> str:
        """A stable identity: the hash of its content (``to_json``), the same for the same graph in any session,
        another for any other graph (what the app can key a graph's interaction state on)."""
        import hashlib
        import json

        text = json.dumps(self.to_json(), sort_keys=True, default=str, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # -- the prompt and the producer's fields ----------------------------------------------------------------------
    @property
    def model(self) -> str:
        return self.provenance.model

    @property
    def _prompt(self) -> dict[str, Any]:
        return self.provenance.prompts[0] if self.provenance.prompts else {}

    @property
    def prompt(self) -> str:
        return str(self._prompt.get("prompt", ""))

    @property
    def target(self) -> str | None:
        return self._prompt.get("target")

    @property
    def foil(self) -> str | None:
        return self._prompt.get("foil")

    @property
    def params(self) -> dict[str, Any]:
        """The method's parameters (the dictionaries apart)."""
        return {k: v for k, v in self.provenance.params.items() if k != "dictionaries"}

    @property
    def dictionaries(self) -> list[dict[str, Any]]:
        """A feature graph's dictionaries: name, path, tag, kind, hooks."""
        return list(self.provenance.params.get("dictionaries") or [])

    @property
    def tokens(self) -> list[str]:
        """The prompt's tokens: a feature graph's own, else those its token nodes carry."""
        if self.is_feature_graph:
            return list(self.metadata["tokens"])
        found: dict[int, str] = {}
        for n in self.nodes:
            if n.kind == "token" and n.position is not None:
                found[int(n.position)] = str(n.metadata.get("token") or "")
        return [found.get(q, "") for q in range(max(found) + 1 if found else 0)]

    @property
    def token_ids(self) -> list[int] | None:
        return self.metadata.get("token_ids")

    @property
    def target_id(self) -> int | None:
        return self.metadata.get("target_id")

    @property
    def target_prob(self) -> float | None:
        return self.metadata.get("target_prob")

    @property
    def target_logit(self) -> float:
        return float(self.metadata.get("target_logit") or 0.0)

    @property
    def seconds(self) -> float:
        return float(self.metadata.get("seconds") or 0.0)

    @property
    def n_passes(self) -> int:
        return int(self.metadata.get("n_passes") or 0)

    def graph_scores(self) -> dict[str, Any]:
        """The replacement and completeness scores: as computed on the unpruned graph when it was built, else
        (graphs saved before the scores, imported graphs, circuits) on this graph (``computed_on`` says which)."""
        if self.scores:
            return self.scores
        kinds = {n.id: n.kind for n in self.nodes}
        rows: dict[str, dict[str, float]] = {}
        for e in self.edges:
            rows.setdefault(e.target, {})[e.source] = float(e.score)
        return graph_scores(rows, kinds, computed_on="pruned")

    @property
    def replacement_score(self) -> float | None:
        return self.graph_scores().get("replacement")

    @property
    def completeness_score(self) -> float | None:
        return self.graph_scores().get("completeness")

    # -- reading it --------------------------------------------------------------------------------------------
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

    def plot(self, title: str | None = None, selected: str | None = None, subtitle: str = "", per_row: int = 8,
             max_edges: int = 120) -> go.Figure:
        """The graph drawn as the app draws it (circuits.plot): a circuit by layer rows and head columns; a feature
        graph by layer rows and token-position columns, pruned to read (``per_row`` nodes of each layer, the
        ``max_edges`` strongest edges among them) and labelled from its dictionaries' dashboards."""
        from circuits.plot import (  # plotly: imported when a figure is drawn
            feature_graph_figure,
            feature_graph_plot,
            feature_view,
            graph_figure,
            metric_name,
        )

        if self.is_feature_graph:
            return feature_graph_plot(self, per_row, max_edges, selected=selected, title=title)
        p = self.provenance
        if p.source == "flow":  # information flow by token (circuits.flow): by position and layer
            from circuits.flow_plot import stored_flow_figure

            return stored_flow_figure(self, title=title, selected=selected)
        row = p.prompts[0] if len(p.prompts) == 1 else {}
        what = metric_name(row.get("target"), row.get("foil")) if row else "target − foil"
        title = title or f"{p.method} {p.source} of {what} on {p.model}: {len(self.edges)} edges"
        if p.source == "feature-graph" and all(n.position is not None or n.kind == "logits" for n in self.nodes):
            return feature_graph_figure(feature_view(self), selected=selected, title=title, subtitle=subtitle)
        nodes, edges = self.drawable()
        return graph_figure(nodes, edges, selected=selected, title=title, subtitle=subtitle)

    def save_figure(self, path: Any, **plot_args: Any) -> Any:
        """Save ``plot(**plot_args)`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        return save_figure(self.plot(**plot_args), path)

    def table(self) -> pd.DataFrame:
        """The edge table (source, target, role, score) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([vars(e) for e in self.edges], columns=["source", "target", "role", "score"])

    def node_table(self) -> pd.DataFrame:
        """One row a node: id, kind, layer, position, label, then its metadata (a feature's token, dictionary,
        feature, activation, score and influence first; an imported node's file fields, ``ct``, apart)."""
        import pandas as pd

        first = (*_NODE_INFO, "influence")
        return pd.DataFrame([{"id": n.id, "kind": n.kind, "layer": n.layer, "position": n.position, "label": n.label,
                              **{k: n.metadata[k] for k in first if k in n.metadata},
                              **{k: v for k, v in n.metadata.items() if k not in first and k != "ct"}}
                             for n in self.nodes])

    def export(self, fmt: str, path: Any, table: str = "edges", overwrite: bool = False) -> dict[str, Any]:
        """Write this graph as ``graph-json`` (circuit-tracer / Neuronpedia), ``csv`` or ``parquet`` (its edge
        table, or ``table="nodes"``) at ``path`` (circuits.export)."""
        return export_to(self, fmt, path, table=table, overwrite=overwrite)

    # -- stored ------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """A feature graph in the feature-graph run's layout (model, prompt, tokens, target, foil, target_logit,
        dictionaries, nodes and edges as rows, seconds, n_passes, params, scores, token ids, target id and
        probability); any other graph as {nodes, edges, provenance} (and its scores and metadata, where it has
        them)."""
        if self.is_feature_graph:
            m = self.metadata
            return {"model": self.model, "prompt": self.prompt, "tokens": self.tokens, "target": self.target,
                    "foil": self.foil, "target_logit": m.get("target_logit"), "dictionaries": self.dictionaries,
                    "nodes": [n.row() for n in self.nodes],
                    "edges": [{"src": e.source, "dst": e.target, "score": e.score} for e in self.edges],
                    "seconds": m.get("seconds"), "n_passes": m.get("n_passes"), "params": self.params,
                    "scores": self.graph_scores(), "token_ids": m.get("token_ids"), "target_id": m.get("target_id"),
                    "target_prob": m.get("target_prob")}
        out = {"nodes": [vars(n) for n in self.nodes], "edges": [vars(e) for e in self.edges],
               "provenance": vars(self.provenance)}
        return {**out, **({"scores": self.scores} if self.scores else {}),
                **({"metadata": self.metadata} if self.metadata else {})}

    @classmethod
    def from_json(cls, d: Any, what: str = "a subgraph") -> Subgraph:
        """Read either of ``to_json``'s layouts back (a feature-graph run's result, those written before this type
        included); anything else is a RunStoreError naming what is wrong."""
        import math

        if isinstance(d, dict) and "provenance" not in d:
            return _from_feature_json(d)
        with reading(what, RunStoreError):
            nodes = [GraphNode(str(n["id"]), str(n["kind"]), float(n["layer"]), _position(n.get("position")),
                               str(n.get("label") or ""), dict(n.get("metadata") or {})) for n in d["nodes"]]
            edges = [GraphEdge(str(e["source"]), str(e["target"]), float(e["score"]),
                               None if e.get("role") is None else str(e["role"])) for e in d["edges"]]
            p = d["provenance"]
            prov = Provenance(str(p["model"]), str(p["method"]), str(p["source"]),
                              [dict(r) for r in p.get("prompts") or []], dict(p.get("params") or {}))
            scores, metadata = dict(d.get("scores") or {}), dict(d.get("metadata") or {})
        ids = {n.id for n in nodes}
        for e in edges:
            if e.source not in ids or e.target not in ids or not math.isfinite(e.score):
                raise RunStoreError(f"{what} is damaged: edge {e.source} -> {e.target} ({e.score})")
        return cls(nodes, edges, prov, scores, metadata)

    def save(self, store: Any = None, method: str | None = None) -> Run:
        """Save as a run, atomically: a feature graph as a ``feature-graph`` run (its args, figure, result and
        graph.json; ``method``: the run's method, the graph's own by default), any other graph as a ``subgraph``
        run (its figure, its JSON and the edge table)."""
        import json

        store = store if isinstance(store, RunStore) else RunStore(store)
        p = self.provenance
        if self.is_feature_graph:
            result = self.to_json()
            summary = {"n_nodes": len(self.nodes), "n_edges": len(self.edges), "prompt": self.prompt,
                       "target": self.target or ""}
            return store.save(RunDraft(
                kind=FEATURE_GRAPH_KIND, model=self.model, method=method or str(self.params.get("method", "dpa")),
                args={"prompt": self.prompt, "target": self.target, "foil": self.foil,
                      "dictionaries": [d["path"] for d in self.dictionaries], **self.params},
                timings={"seconds": self.seconds}, result={**summary, **result}, figures={"graph": self.plot()},
                files={"graph.json": json.dumps(result, allow_nan=False)}))
        return store.save(RunDraft(
            kind=SUBGRAPH_KIND, model=p.model, method=method or p.method,
            args={"source": p.source, "params": p.params},
            result={"n_nodes": len(self.nodes), "n_edges": len(self.edges), **self.to_json()},
            figures={"graph": self.plot()}, files={"subgraph.json": json.dumps(self.to_json(), allow_nan=False)}))


def feature_subgraph(model: str, prompt: str, tokens: list[str], target: str | None, foil: str | None,
                     target_logit: float, dictionaries: list[dict[str, Any]], nodes: list[dict[str, Any]],
                     edges: list[dict[str, Any]], seconds: float, n_passes: int, params: dict[str, Any] | None = None,
                     scores: dict[str, Any] | None = None, token_ids: list[int] | None = None,
                     target_id: int | None = None, target_prob: float | None = None) -> Subgraph:
    """A feature graph from its producer's rows: nodes {id, kind, row (the drawing row), position, label, and the
    method's fields: token, dictionary, feature, activation, DPA score, influence, ...}, edges {src, dst, score}
    (dst an expanded target), the prompt and what was computed beside the graph."""
    params = dict(params or {})
    graph_nodes = [GraphNode(n["id"], n["kind"], n["row"], n["position"], n["label"],
                             {k: v for k, v in n.items() if k not in _NODE_FIELDS}) for n in nodes]
    graph_edges = [GraphEdge(e["src"], e["dst"], e["score"]) for e in edges]
    prov = Provenance(model, str(params.get("method", "dpa")), FEATURE_GRAPH_KIND,
                      [{"prompt": prompt, "target": target, "foil": foil}], {**params, "dictionaries": dictionaries})
    return Subgraph(graph_nodes, graph_edges, prov, dict(scores or {}),
                    {"tokens": list(tokens), "target_logit": target_logit, "seconds": seconds, "n_passes": n_passes,
                     "token_ids": token_ids, "target_id": target_id, "target_prob": target_prob})


def _from_feature_json(d: dict[str, Any]) -> Subgraph:
    """A feature-graph run's result (``to_json``'s feature layout) as the one type."""
    try:
        return feature_subgraph(**{k: d[k] for k in ("model", "prompt", "tokens", "target", "foil", "target_logit",
                                                     "dictionaries", "nodes", "edges", "seconds", "n_passes")},
                                params=d.get("params", {}), scores=d.get("scores") or {}, token_ids=d.get("token_ids"),
                                target_id=d.get("target_id"), target_prob=d.get("target_prob"))
    except (KeyError, TypeError) as exc:
        raise RunStoreError(f"not a feature graph: missing {exc}") from None


def _position(value: Any) -> int | None:
    return None if value is None else int(value)
