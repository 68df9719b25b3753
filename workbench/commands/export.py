"""``workbench export`` (a stored run as graph-json, mib, csv or parquet) and ``workbench import graph-json``
(a circuit-tracer / Neuronpedia graph JSON as a feature-graph run). The formats live in circuits/export."""

from __future__ import annotations

import typer

from workbench.commands.common import JSON_OPTION, emit


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    imports = typer.Typer(help="Store a graph made elsewhere as a run.", no_args_is_help=True)
    imports.command("graph-json")(import_graph_json)
    app.add_typer(imports, name="import")


def export(
    run: str = typer.Argument(..., help="A run id, or a unique prefix of one (`workbench runs list`)."),
    fmt: str = typer.Option(..., "--format", help="graph-json (circuit-tracer / Neuronpedia), mib (EAP-IG / "
                            "MIB graph JSON), csv or parquet (every scored edge, or node with --table nodes)."),
    out: str = typer.Option(..., "--out", help="The file to write (its folder must exist)."),
    table: str = typer.Option("edges", "--table", help="csv / parquet: edges (default) or nodes."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write a stored circuit, feature-graph, subgraph or attribution run in a format other tools read
    (prints path, format, bytes and what it holds)."""
    from core.errors import ExportError

    if table not in ("edges", "nodes"):
        raise ExportError(f"unknown --table {table!r}; choose edges or nodes")
    from circuits.export import check_format, check_kind, check_out
    from circuits.runs import export_run
    from core.store import RunStore

    check_format(fmt)
    check_out(out, force, "--out")  # before any work: a bad path fails first
    found = RunStore().resolve(run)
    check_kind(found.kind, fmt, f"run {found.id}")
    result = export_run(found, fmt, out, table=table, overwrite=force)

    def human(r):
        held = ", ".join(f"{k} {v:,}" for k, v in r.items() if k in ("nodes", "links", "edges", "rows", "in_graph"))
        print(f"{r['format']} of run {r['run']} ({r['kind']}) -> {r['path']} ({r['bytes']:,} bytes; {held})")

    emit(result, as_json, human)


def import_graph_json(
    file: str = typer.Argument(..., help="A circuit-tracer / Neuronpedia graph JSON file."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Store a circuit-tracer / Neuronpedia graph JSON as a feature-graph run (any model, loadable here or not);
    prints the run id, nodes, links and the replacement / completeness scores."""
    from circuits.importer import import_graph_json as load
    from core.store import RunStore

    run = load(file, RunStore())
    result = run.result()
    out = {"run": run.id, "kind": run.kind, "model": run.meta.get("model"), "nodes": result.get("n_nodes"),
           "links": result.get("n_edges"), "scores": result.get("scores")}

    def human(r):
        s = r.get("scores") or {}
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"imported {file} as run {r['run']} ({r['model']}: {r['nodes']} nodes, {r['links']} links; "
              f"replacement {fmt(s.get('replacement'))}, completeness {fmt(s.get('completeness'))} on the "
              f"{s.get('computed_on', 'pruned')} graph)")

    emit(out, as_json, human)
