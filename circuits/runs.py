"""Stored runs of the graph kinds (and attributions), opened by kind in one place: ``load_run`` gives a run's
result object (CircuitResult, Subgraph, AttributionResult), ``subgraph_of`` its graph as the one result type (a
circuit run: its saved top edges; a feature-graph run, those written before the type too); ``export_run`` and
``run_bytes`` write it in a format of the field (circuits.export) with its pins and supernodes (circuits.interact).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attribution.result import AttributionResult
from circuits.discover import CircuitResult
from circuits.export import SUFFIX, check_kind, check_out, render, write_atomic
from circuits.interact import load as load_annotations
from circuits.subgraph import FEATURE_GRAPH_KIND, SUBGRAPH_KIND, Subgraph
from core.checks import reading
from core.errors import ExportError, RunStoreError


def subgraph_of(run: Any) -> Subgraph:
    """The subgraph of a stored run: a ``circuit`` run (its saved top edges), a ``feature-graph`` run or a
    ``subgraph`` run, including those saved before this type existed."""
    if run.kind == "circuit":
        return CircuitResult.from_run(run).subgraph()
    if run.kind == FEATURE_GRAPH_KIND:
        with reading(f"run {run.id}", RunStoreError):
            return Subgraph.from_json(run.result())
    if run.kind == SUBGRAPH_KIND:
        return Subgraph.from_json(run.result(), f"run {run.id}'s subgraph")
    raise RunStoreError(f"run {run.id} is a {run.kind or 'unknown'} run, not a circuit or feature graph")


def _annotations(run: Any, fmt: str) -> Any:
    """The pins and supernodes kept with ``run`` (circuits.interact), for a graph JSON; None otherwise."""
    if fmt != "graph-json" or getattr(run, "path", None) is None:
        return None
    return load_annotations(run)


def load_run(run: Any) -> Any:
    """The result object of a stored run (circuit, feature-graph, subgraph, attribute)."""
    if run.kind == "circuit":
        return CircuitResult.from_run(run)
    if run.kind in (FEATURE_GRAPH_KIND, SUBGRAPH_KIND):
        return subgraph_of(run)
    if run.kind == "attribute":
        scores = run.tensors().get("scores")
        if scores is None:
            raise RunStoreError(f"run {run.id} is damaged: its tensors file has no 'scores'")
        with reading(f"run {run.id}", RunStoreError):
            return AttributionResult.from_json(run.result(), scores=scores)
    raise ExportError(f"run {run.id} is a {run.kind or 'unknown'} run; exports hold circuit, feature-graph, "
                      "subgraph and attribute runs")


def export_run(run: Any, fmt: str, path: str | Path, table: str = "edges", overwrite: bool = False
               ) -> dict[str, Any]:
    """Write a stored run as ``fmt`` at ``path`` (kind and path checked before the run is read)."""
    check_kind(run.kind, fmt, f"run {run.id}")
    out = check_out(path, overwrite)
    data, info = render(load_run(run), fmt, table, slug=run.id, annotations=_annotations(run, fmt))
    write_atomic(out, data)
    return {"run": run.id, "kind": run.kind, "path": str(out), "format": fmt, "bytes": len(data), **info}


def run_bytes(run: Any, fmt: str, table: str = "edges") -> tuple[bytes, str]:
    """(content, file name) of a stored run in ``fmt``: what the app's download button serves."""
    check_kind(run.kind, fmt, f"run {run.id}")
    data, _ = render(load_run(run), fmt, table, slug=run.id, annotations=_annotations(run, fmt))
    stem = run.id if fmt not in ("csv", "parquet") or table == "edges" else f"{run.id}.nodes"
    return data, f"{stem}{'.mib' if fmt == 'mib' else ''}{SUFFIX[fmt]}"
