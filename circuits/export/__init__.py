"""Graphs and scores leave the workbench in the formats of the field, and graphs made elsewhere come in.

- ``graph-json``: circuit-tracer 0.5.0 / Neuronpedia graph JSON (``graph_json``): feature graphs, circuits,
  subgraphs;
- ``mib``: EAP-IG / MIB graph JSON (``mib``): circuits;
- ``csv`` / ``parquet``: one row per scored edge (every edge of a circuit, not only its top k) or per node, or
  an attribution's scored items (``tables``).

``export(obj, fmt, path)`` writes one of these for a result object (a CircuitResult, a Subgraph, an
AttributionResult); ``circuits.runs.export_run(run, fmt, path)`` for a stored run. Everything is checked before any
work (the format, whether it can hold this kind, the output path) and the file is written atomically (a temporary
file beside it, then a rename), never over an existing file unless ``overwrite``. ``circuits.importer`` reads a
circuit-tracer / Neuronpedia graph JSON into a feature-graph run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attribution.result import AttributionResult
from circuits.export import graph_json, mib, tables
from core.errors import ExportError
from core.options import output_problem
from core.store import write_atomic as write_whole

FORMATS = ("graph-json", "mib", "csv", "parquet")
# run kind -> the formats that can hold it
KIND_FORMATS: dict[str, tuple[str, ...]] = {
    "circuit": ("graph-json", "mib", "csv", "parquet"),
    "feature-graph": ("graph-json", "csv", "parquet"),
    "subgraph": ("graph-json", "csv", "parquet"),
    "attribute": ("csv", "parquet"),
}
TABLES = ("edges", "nodes")
SUFFIX = {"graph-json": ".json", "mib": ".json", "csv": ".csv", "parquet": ".parquet"}


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return fmt


def check_kind(kind: str, fmt: str, subject: str = "this result") -> None:
    """ExportError (one line) when ``fmt`` cannot hold a result of this kind."""
    check_format(fmt)
    if fmt not in KIND_FORMATS.get(kind, ()):
        can = [k for k, fs in KIND_FORMATS.items() if fmt in fs]
        goes = ", ".join(KIND_FORMATS.get(kind, ())) or "no format"
        raise ExportError(f"{subject} is a {kind or 'unknown'} run, which {fmt} cannot hold ({fmt} holds "
                          f"{', '.join(can)} runs; a {kind or 'unknown'} run goes to {goes})")


def check_out(path: str | Path, overwrite: bool = False, what: str = "the output path") -> Path:
    """The output path, checked before any work (core.options.output_problem: not empty, not under a system
    folder, not a folder, its folder exists and is writable), and not an existing file unless ``overwrite``."""
    why = output_problem(path)
    if why is not None:
        raise ExportError(f"{what} {os.fspath(path)} {why}")
    out = Path(os.fspath(path)).expanduser()
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise ExportError(f"{what} {out} already exists; remove it or choose another path "
                          "(--force / overwrite=True replaces it)")
    return out


def write_atomic(out: Path, data: bytes) -> None:
    """``data`` into ``out`` whole: the store's writer (a temporary beside it, then a rename; a full disk: one line)."""
    write_whole(out, data, "the export", ExportError)


def kind_of(obj: Any) -> str:
    """The run kind a result object is saved as."""
    kind = getattr(obj, "run_kind", None)  # a CircuitResult or a Subgraph names its run kind
    if kind in KIND_FORMATS:
        return kind
    if isinstance(obj, AttributionResult):
        return "attribute"
    raise ExportError(f"cannot export a {type(obj).__name__}: give a circuit, feature graph, subgraph or "
                      "attribution result")


def render(obj: Any, fmt: str, table: str = "edges", slug: str | None = None,
           annotations: Any = None) -> tuple[bytes, dict[str, Any]]:
    """(file content, what it holds) of ``obj`` in ``fmt``; ``annotations``: a run's pins and supernodes (the
    graph JSON's qParams)."""
    import json

    kind = kind_of(obj)
    check_kind(kind, fmt)
    if table not in TABLES:
        raise ExportError(f"unknown table {table!r}; choose edges or nodes")
    if fmt == "graph-json":
        doc = graph_json.document(obj, slug=slug, annotations=annotations)
        return (json.dumps(doc, allow_nan=False, ensure_ascii=False).encode(),
                {"nodes": len(doc["nodes"]), "links": len(doc["links"])})
    if fmt == "mib":
        doc = mib.document(obj)
        return (json.dumps(doc, allow_nan=False).encode(),
                {"nodes": len(doc["nodes"]), "edges": len(doc["edges"]),
                 "in_graph": sum(e["in_graph"] for e in doc["edges"].values())})
    frame = tables.table(obj, table)
    return tables.encode(frame, fmt), {"rows": len(frame), "columns": list(frame.columns)}


def export(obj: Any, fmt: str, path: str | Path, table: str = "edges", overwrite: bool = False,
           slug: str | None = None) -> dict[str, Any]:
    """Write ``obj`` (a CircuitResult, Subgraph or AttributionResult) as ``fmt`` at ``path``:
    {"path", "format", "bytes", ...what it holds}. ``table``: edges or nodes (csv / parquet)."""
    check_format(fmt)
    check_kind(kind_of(obj), fmt)
    out = check_out(path, overwrite)
    data, info = render(obj, fmt, table, slug)
    write_atomic(out, data)
    return {"path": str(out), "format": fmt, "bytes": len(data), **info}
