"""Circuit discovery: score every edge with one method, keep the strongest, measure faithfulness.

``circuit(model, prompts, method=..., edges=K)`` is the one call behind ``wb.circuit``, ``workbench circuit
discover`` and the app's Circuits page. It returns a ``CircuitResult``: the graph, one score per edge
(``circuits.graph`` layout), the faithfulness curve, and ways to tabulate, plot, save and reload itself.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Bool, Float

from circuits.counterfactual import ABLATIONS, METRICS, PromptSet, prepare
from circuits.edges import EDGE_METHODS, get_method
from circuits.edges.patching import chosen_edges
from circuits.evaluate import DEFAULT_GRID, SELECTIONS, Faithfulness, check_grid, faithfulness, select
from circuits.export import export
from circuits.export.tables import circuit_edges, encode
from circuits.graph import CircuitGraph, check_k
from circuits.intervene import References, run_masked
from circuits.subgraph import GraphEdge, Provenance, Subgraph
from core.checks import Fields
from core.errors import MethodError, RangeError, RunStoreError, WorkbenchError
from core.figures import save_figure
from core.models import zoo
from core.models.hooked import require
from core.prompt_files import read_prompts
from core.store import RunDraft, RunStore

PATCHING_LIMIT_EDGES = 5000  # above this, path patching needs an explicit sample
# A saved circuit's graph is rebuilt from its meta.json: sizes beyond these are damage, refused before allocating.
MAX_LAYERS, MAX_HEADS = 1024, 1024


@dataclass
class CircuitResult:
    model: str
    method: str
    graph: CircuitGraph
    scores: Float[torch.Tensor, " edge"]
    rows: list[dict]
    ablation: str
    metric: str
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    edges: int = 100  # the K shown by default
    faithfulness: Faithfulness | None = None
    selection: str = "topk"
    d_model: int | None = None  # the model's width (EAP-IG / MIB graph files record it); None in older runs

    run_kind = "circuit"

    @property
    def n_prompts(self) -> int:
        return len(self.rows)

    def mask(self, k: int | None = None, selection: str | None = None) -> Bool[torch.Tensor, " edge"]:
        return select(self.graph, self.scores, check_k(k or self.edges, self.graph.n_edges),
                      selection or self.selection)

    def top(self, k: int | None = None, selection: str | None = None) -> list[dict[str, Any]]:
        """The circuit's edges, largest |score| first: {"src", "dst", "score"}."""
        ids = torch.nonzero(self.mask(k, selection)).flatten()
        ids = ids[torch.argsort(self.scores[ids].abs(), descending=True, stable=True)]
        out = []
        for e in ids.tolist():
            src, dst = self.graph.edge_name(e)
            out.append({"src": src, "dst": dst, "score": _finite(float(self.scores[e]), f"{src}->{dst}")})
        return out

    def score_of(self, src: str, dst: str) -> float:
        return float(self.scores[self.graph.edge_id(src, dst)])

    def to_json(self, k: int | None = None) -> dict[str, Any]:
        """The contract of ``workbench circuit discover --json``."""
        out = {"model": self.model, "method": self.method, "n_prompts": self.n_prompts,
               "n_nodes": len(self.graph.nodes),
               "n_edges_total": self.graph.n_edges, "ablation": self.ablation, "metric": self.metric,
               "selection": self.selection, "params": self.params, "edges": self.top(k),
               "seconds": self.seconds}
        if self.faithfulness is not None:
            out["faithfulness"] = self.faithfulness.to_json()
        return out

    def table(self, k: int | None = None):
        import pandas as pd

        return pd.DataFrame(self.top(k))

    def subgraph(self, k: int | None = None, selection: str | None = None,
                 edges: list[dict[str, Any]] | None = None) -> Subgraph:
        """The circuit's top-k edges (or ``edges``, some of ``top``'s rows) as the shared result type (a head
        input's q/k/v is the edge's role)."""
        edges = self.top(k, selection) if edges is None else edges
        out = []
        for e in edges:
            node = self.graph.receivers[self.graph.receiver_index[e["dst"]]]
            out.append(GraphEdge(e["src"], node.component, e["score"], node.role))
        params = {**self.params, "ablation": self.ablation, "metric": self.metric,
                  "selection": selection or self.selection, "edges": k or self.edges}
        return Subgraph(self.graph.graph_nodes(edges), out,
                        Provenance(self.model, self.method, "circuit", list(self.rows), params))

    def plot(self, k: int | None = None, selected: str | None = None):
        """The top-k edges drawn as the app draws them (the Subgraph's figure): the title naming the method, the
        metric (target and foil) and the model, the subtitle what was kept and aggregated."""
        from circuits.plot import metric_name  # plotly: imported when a figure is drawn

        k = min(k or self.edges, self.graph.n_edges)
        pairs = {(r.get("target"), r.get("foil") if self.metric == "logit_diff" else None) for r in self.rows}
        if len(pairs) == 1:
            what = metric_name(*next(iter(pairs)))
        else:
            what = "logit(target) − logit(foil)" if self.metric == "logit_diff" else "logit(target)"
        n = self.n_prompts
        method = EDGE_METHODS[self.method].label if self.method in EDGE_METHODS else self.method
        title = f"{method} circuit of {what} on {self.model}"
        subtitle = (f"top {k} of {self.graph.n_edges:,} edges by |score| · width ∝ |score|<br>edge score: the "
                    f"metric's drop when the edge alone is ablated ({self.ablation} ablation), summed over positions, "
                    f"averaged over {n} prompt{'s' if n != 1 else ''}")
        return self.subgraph(k).plot(title=title, subtitle=subtitle, selected=selected)

    def save_figure(self, path: Any, k: int | None = None) -> Any:
        """Save ``plot(k)`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        return save_figure(self.plot(k), path)

    def edge_table(self):
        """Every scored edge, named (not only the top k): source, target, role, receiver, score, rank by |score|,
        in_circuit (at the saved K and selection), and the layer / head of both ends (circuits.export.tables)."""
        return circuit_edges(self)

    def export(self, fmt: str, path: Any, overwrite: bool = False) -> dict[str, Any]:
        """Write this circuit as ``graph-json`` (its top edges, circuit-tracer's layout), ``mib`` (EAP-IG's graph
        JSON: every edge scored, the circuit's in_graph), ``csv`` or ``parquet`` (every edge) at ``path``."""
        return export(self, fmt, path, overwrite=overwrite)

    def plot_faithfulness(self):
        from circuits.plot import faithfulness_figure  # plotly

        if self.faithfulness is None:
            raise MethodError("this circuit was not evaluated: call evaluate() first")
        return faithfulness_figure({self.method: self.faithfulness})

    def evaluate(self, model: Any, grid: Any = DEFAULT_GRID, ablation: str | None = None,
                 selection: str | None = None, batch_size: int = 16,
                 on_step: Callable[[int], None] | None = None) -> Faithfulness:
        """(Re)compute the faithfulness curve of these scores on their prompts."""
        model = _model(model)
        _check_model(model, self)
        prompts = prepare(model, self.rows, ablation or self.ablation, self.metric, batch_size)
        refs = References(model, self.graph, prompts)
        self.faithfulness = faithfulness(model, self.graph, prompts, refs, self.scores, grid,
                                         selection or self.selection, on_step=on_step)
        return self.faithfulness

    def save(self, store: Any = None):
        store = store or RunStore()
        figures = {"graph": self.plot()}
        if self.faithfulness is not None:
            figures["faithfulness"] = self.plot_faithfulness()
        # result.json's "edges" is the named top-edge list (to_json); K, the number shown, is "k" (args.edges)
        result = self.to_json()
        summary = {"n_prompts": self.n_prompts, "n_edges_total": self.graph.n_edges, "k": self.edges}
        if self.faithfulness is not None:
            summary["auc"] = self.faithfulness.auc
        return store.save(RunDraft(
            kind="circuit", model=self.model, method=self.method,
            args={"ablation": self.ablation, "metric": self.metric, "params": self.params, "edges": self.edges,
                  "selection": self.selection, "n_prompts": self.n_prompts, **self.graph.summary(),
                  "n_layers": self.graph.n_layers, "n_heads": self.graph.n_heads, "has_mlp": self.graph.has_mlp,
                  "parallel": self.graph.parallel, **({"d_model": self.d_model} if self.d_model else {})},
            timings={"scoring": self.seconds}, result={**result, **summary},
            tensors={"scores": self.scores.float()}, figures=figures,
            files={"prompts.jsonl": "".join(json.dumps(r) + "\n" for r in self.rows),
                   # every edge by name: the run is readable without the workbench's edge order
                   "edges.parquet": encode(self.edge_table(), "parquet")}))

    @classmethod
    def from_run(cls, run: Any) -> CircuitResult:
        """Rebuild a saved circuit (``workbench circuit evaluate``, the app). Everything read is checked
        (core/checks.py): a damaged run is a RunStoreError naming what is wrong, and the graph's size is
        bounded before anything is allocated from it."""
        if run.kind != "circuit":
            raise WorkbenchError(f"run {run.id} is a {run.kind or 'unknown'} run, not a circuit")
        args = run.fields("args")
        n_layers = args.integer("n_layers", lo=1, hi=MAX_LAYERS)
        n_heads = args.integer("n_heads", lo=1, hi=MAX_HEADS)
        graph = CircuitGraph(n_layers, n_heads, args.flag("has_mlp"), parallel=args.flag("parallel", False))
        scores = run.tensors().get("scores")
        if scores is None:
            raise RunStoreError(f"run {run.id} is damaged: its tensors file has no 'scores'")
        if tuple(scores.shape) != (graph.n_edges,):
            raise RunStoreError(f"run {run.id} is damaged: its scores have shape {list(scores.shape)}, not "
                                f"[{graph.n_edges}] as its graph ({n_layers} layers x {n_heads} heads) needs")
        rows = run.rows("prompts.jsonl")
        if not rows:
            raise RunStoreError(f"run {run.id} is damaged: prompts.jsonl holds no prompt")
        for i, row in enumerate(rows, 1):
            for key in ("prompt", "target", "foil", "corrupt"):
                value = row.get(key)
                ids = isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
                if not (isinstance(value, str) or ids or (isinstance(value, int) and not isinstance(value, bool))
                        or (value is None and key in ("foil", "corrupt"))):
                    raise RunStoreError(f"run {run.id}'s prompts.jsonl line {i} is damaged: its {key!r} is "
                                        f"{str(value)[:40]!r}, not text or token ids")
        method = run.fields().text("method", "")
        if method and method not in EDGE_METHODS:
            raise RunStoreError(f"run {run.id} is damaged: unknown circuit method {method!r}")
        faith = Fields(run.result(), f"run {run.id}'s result.json", RunStoreError).mapping("faithfulness", None)
        return cls(model=run.fields().text("model", ""), method=method, graph=graph, scores=scores.float(),
                   rows=rows, ablation=args.text("ablation", "corrupt", ABLATIONS),
                   metric=args.text("metric", "logit_diff", METRICS), params=args.mapping("params", {}),
                   seconds=run.fields("timings").number("scoring", 0.0, lo=0),
                   edges=args.integer("edges", 100, lo=1, hi=10**9),
                   d_model=args.integer("d_model", None, lo=1, hi=2**20),
                   faithfulness=Faithfulness.from_json(faith, f"run {run.id}'s faithfulness",
                                                       RunStoreError) if faith else None,
                   selection=args.text("selection", "topk", SELECTIONS))


def _finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise MethodError(f"edge score of {what} is not finite ({value}); the model or prompts give NaN/inf")
    return value


def _model(model: Any) -> Any:
    if isinstance(model, str):
        return zoo.load(model)
    return model


def _check_model(model: Any, result: CircuitResult) -> None:
    g = CircuitGraph.of(model)
    if (g.n_layers, g.n_heads, g.has_mlp, g.parallel) != (result.graph.n_layers, result.graph.n_heads,
                                                          result.graph.has_mlp, result.graph.parallel):
        raise WorkbenchError(f"model {model.name} does not have the graph of this circuit "
                             f"({result.graph.n_layers} layers x {result.graph.n_heads} heads)")


def _rows(prompts: Any, limit: int | None) -> list[dict]:
    if limit is not None and int(limit) < 1:
        raise RangeError(f"limit must be at least 1 (got {limit})")
    if isinstance(prompts, str):
        return read_prompts(prompts, limit)
    rows = list(prompts)
    return rows[:limit] if limit is not None else rows


def estimate(model: Any, graph: CircuitGraph, prompts: PromptSet, method: str, params: dict[str, Any],
             grid: Any = None) -> float:
    """Seconds the scoring will take, from one measured forward on the first batch of this prompt set; with
    ``grid``, the faithfulness curve over those circuit sizes too (two masks per size, and two more)."""
    batch = prompts.batches[0]
    ref = torch.zeros(len(graph.senders), 1, 1, model.arch.d_model, device=model.device)  # zero reference
    copies = int(params.get("copies", 8)) if method == "activation_patching" else 1
    keep = torch.ones(copies, graph.n_edges, dtype=torch.bool)
    started = time.perf_counter()
    run_masked(model, graph, batch, ref, keep, prompts.metric)
    per_forward = (time.perf_counter() - started) * sum(b.size for b in prompts.batches) / batch.size
    # One copy's forward per mask: smollm2 on 150 IOI prompts (eap, 18 masks) measured 39 s scoring and ~250 s
    # for the curve, 220 s estimated in all (with a load average of ~10 on 2 cores it measured ~35x slower).
    curve = 0.0 if grid is None else per_forward / copies * (2 + 2 * len(check_grid(grid, graph.n_edges)))
    if method == "activation_patching":
        n = len(chosen_edges(graph, params.get("sample", 0), params.get("seed", 0)))
        return per_forward * (math.ceil(n / copies) + 1) + curve
    layers = 1 + graph.n_layers * (1 + int(graph.has_mlp))  # the layers eap_ig_act moves one at a time
    return per_forward / copies * get_method(method).passes(params, layers) + curve


def check_patching(model: Any, graph: CircuitGraph, prompts: PromptSet, params: dict[str, Any]) -> int:
    """The number of edges path patching will patch; more than PATCHING_LIMIT_EDGES is refused (with what
    it would cost), so nobody starts an hours-long run by accident."""
    n = len(chosen_edges(graph, params["sample"], params["seed"]))
    if n > PATCHING_LIMIT_EDGES:
        seconds = estimate(model, graph, prompts, "activation_patching", params)
        raise MethodError(
            f"path patching every one of {graph.n_edges:,} edges would take about {seconds / 3600:.1f} h here; "
            f"score a sample (--param sample=N, N <= {PATCHING_LIMIT_EDGES}) or use eap, eap_ig or dpa")
    return n


def circuit(model: Any, prompts: Any, method: str = "eap", edges: int = 100, ablation: str | None = None,
            metric: str | None = None, limit: int | None = None, grid: Any = DEFAULT_GRID,
            selection: str = "topk", evaluate: bool = True, batch_size: int = 16,
            on_step: Callable[[int], None] | None = None,
            on_estimate: Callable[[float], None] | None = None,
            on_total: Callable[[int], None] | None = None, **params: Any) -> CircuitResult:
    """Score every edge of the model's graph with ``method`` on a prompt set and keep the top ``edges``.

    prompts: a JSONL path or rows {"prompt", "target", "foil"?, "corrupt"?}. ablation: corrupt (default
    when rows carry "corrupt"), mean or zero. metric: logit_diff (default when rows carry a foil) or
    target_logit. evaluate: also compute the faithfulness curve over ``grid``. Extra keyword arguments are
    the method's parameters (eap_ig: steps; dpa: path weights; activation_patching: sample, seed, copies).
    Progress: ``on_total(n)`` once, then ``on_step(k)`` in prompts: each prompt counts once for the scoring
    and once more for the curve (``evaluate``), so n = prompts x (1 + evaluate).
    """
    spec = get_method(method)
    if selection not in ("topk", "greedy"):
        raise MethodError(f"unknown selection {selection!r}; choose topk or greedy")
    p = spec.check_params(params)
    model = _model(model)

    require(model, "circuit")  # per-head inputs: TransformerLens' split q/k/v inputs
    graph = CircuitGraph.of(model)
    edges = check_k(edges, graph.n_edges)
    rows = _rows(prompts, limit)
    prepared = prepare(model, rows, ablation, metric, batch_size)
    scoring_step = on_step
    if spec.exact:
        n = check_patching(model, graph, prepared, p)
        if on_estimate:
            on_estimate(estimate(model, graph, prepared, method, p))
        if on_step:  # path patching steps count (edge, prompt) pairs: report whole prompts
            scoring_step = _PerPrompt(on_step, n)
    if on_total:
        on_total(prepared.n_prompts * (2 if evaluate else 1))
    refs = References(model, graph, prepared)
    started = time.perf_counter()
    scores = spec.scorer()(model, graph, prepared, refs, on_step=scoring_step, **p)
    seconds = time.perf_counter() - started
    if not bool(torch.isfinite(scores).all()):
        raise MethodError(f"{method} gave non-finite edge scores on these prompts (NaN or inf in the model's run)")
    result = CircuitResult(model=model.name, method=method, graph=graph, scores=scores, rows=rows,
                           ablation=prepared.ablation, metric=prepared.metric, params=p, seconds=seconds,
                           edges=edges, selection=selection, d_model=int(model.arch.d_model))
    if evaluate:
        result.faithfulness = faithfulness(model, graph, prepared, refs, scores, grid, selection, on_step=on_step)
    return result


class _PerPrompt:
    """Turns steps of (edge, prompt) pairs into steps of whole prompts (``per`` pairs each)."""

    def __init__(self, on_step: Callable[[int], None], per: int) -> None:
        self.on_step, self.per, self.pairs, self.sent = on_step, max(1, per), 0, 0

    def __call__(self, pairs: int) -> None:
        self.pairs += pairs
        whole = self.pairs // self.per
        if whole > self.sent:
            self.on_step(whole - self.sent)
            self.sent = whole


def methods() -> dict[str, str]:
    return {name: m.summary for name, m in EDGE_METHODS.items()}
