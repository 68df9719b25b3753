"""``workbench circuit discover`` and ``workbench circuit evaluate``: edge-level circuits (circuits/discover.py)."""

from __future__ import annotations

from typing import Any

import typer

from circuits.edges import method_help
from core.figures import check_figure_path, png_option
from core.options import positive_int
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    MODEL_OPTION,
    console,
    dtype_spec,
    emit,
    finish,
    result_console,
)
from workbench.commands.jobs import RAY_ADDRESS_OPTION

GRID_OPTION = typer.Option("10,20,50,100,200,500,1000,2000", "--grid", help="Circuit sizes of the curve.")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Edge-level circuits: score every edge, keep the strongest, measure faithfulness.",
                        no_args_is_help=True)
    group.command("discover")(discover)
    group.command("evaluate")(evaluate)
    app.add_typer(group, name="circuit")


def _grid(text: str) -> list[int]:
    from core.errors import RangeError
    from core.options import split_list

    try:
        ks = [int(x) for x in split_list("--grid", text)]
    except ValueError:
        raise RangeError(f"--grid takes whole numbers separated by commas (got {text!r})") from None
    if not ks or min(ks) <= 0:
        raise RangeError(f"--grid sizes must be positive edge counts (got {text!r})")
    return ks


def _check(edges: int | None, limit: int | None, ablation: str | None, metric: str | None, selection: str) -> None:
    """Every option checked before a model is loaded or a prompt read."""
    from circuits.counterfactual import ABLATIONS, METRICS
    from core.errors import MethodError, RangeError

    if edges is not None and edges <= 0:
        raise RangeError(f"--edges must be a positive number of edges (got {edges})")
    if limit is not None and limit < 1:
        raise RangeError(f"--limit must be at least 1 (got {limit})")
    if ablation is not None and ablation not in ABLATIONS:
        raise MethodError(f"unknown ablation {ablation!r}; choose one of {', '.join(ABLATIONS)}")
    if metric is not None and metric not in METRICS:
        raise MethodError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if selection not in ("topk", "greedy"):
        raise MethodError(f"unknown selection {selection!r}; choose topk or greedy")


def _human(r: dict[str, Any]) -> None:
    c = result_console()
    c.print(f"{r['method']} on {r['model']}: {r['n_prompts']} prompts, {r['n_nodes']} nodes, "
            f"{r['n_edges_total']:,} edges, {r['ablation']} ablation, {r['metric']}; scoring {r['seconds']:.2f} s")
    for e in r["edges"][:25]:
        print(f"  {e['src']:>10} -> {e['dst']:<12} {e['score']:+.4f}")
    if len(r["edges"]) > 25:
        print(f"  ... {len(r['edges']) - 25} more")
    f = r.get("faithfulness")
    if f:
        print("  k           " + " ".join(f"{k:>7}" for k in f["k"]))
        print("  faithfulness" + " ".join(f"{v:7.3f}" for v in f["normalized"]))
        print(f"  AUC {f['auc']:.3f} (metric intact {f['metric_full']:.3f}, all edges ablated {f['metric_empty']:.3f})")


def discover(
    model: str = MODEL_OPTION,
    prompts: str = typer.Option(..., "--prompts", help="JSONL rows {prompt, target, foil?, corrupt?}; for toy "
                                "models 'task' uses the model's own task with its counterfactuals."),
    method: str = typer.Option("eap", "--method", help=method_help()),
    edges: int = typer.Option(100, "--edges", help="K: how many top edges to print and keep.", callback=positive_int),
    ablation: str = typer.Option(None, "--ablation", help="corrupt (default with 'corrupt' rows), mean or zero."),
    metric: str = typer.Option(None, "--metric", help="logit_diff (default with foils) or target_logit."),
    limit: int = typer.Option(None, "--limit", help="Use only the first N prompts.", callback=positive_int),
    selection: str = typer.Option("topk", "--selection", help="topk, or greedy (connected from inputs to logits)."),
    grid: str = GRID_OPTION,
    evaluate_: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Measure the faithfulness curve."),
    param: list[str] = typer.Option(None, "--param", help="Method parameter key=value (repeatable); each "
                                    "method's are listed under --method."),
    batch_size: int = typer.Option(16, "--batch-size", help="Prompts per forward pass.", callback=positive_int),
    save: bool = typer.Option(True, "--save/--no-save", help="Save the circuit to the run store."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
    png: str = png_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Score every edge of the model's graph on a prompt set and keep the top K (prints the contract
    object: model, method, n_prompts, n_nodes, n_edges_total, edges, seconds, faithfulness). Runs as a job
    (``workbench jobs list``), on a Ray cluster with --ray-address."""
    from circuits.edges import get_method
    from core.errors import RangeError
    from workbench.commands.attribute import parse_params
    from workbench.commands.common import check_device

    spec = get_method(method)
    _check(edges, limit, ablation, metric, selection)
    check_figure_path(png)  # a bad --png fails before any work
    if batch_size < 1:
        raise RangeError(f"--batch-size must be at least 1 (got {batch_size})")
    ks = _grid(grid)
    params = parse_params(param)
    spec.check_params(params)  # unknown parameters fail before the model loads
    rows = None
    if prompts != "task":
        from core.prompt_files import read_prompts

        rows = read_prompts(prompts, limit)
    device = check_device(device)
    from core.models.zoo import check_text_model

    check_text_model(model, "circuit discover")  # before anything loads or the job starts
    if rows is None:  # a toy model's own task: its rows come from the model (small, quick to load)
        import workbench as wb
        from circuits.toy.prompts import task_rows

        rows = task_rows(wb.load(model, device=device, dtype=dtype), limit)
    from workbench.commands.jobs import run_job
    from workbench.scheduler import resolve_address
    from workbench.scheduler.kinds import estimate
    from workbench.scheduler.specs import CircuitDiscoverSpec
    job_spec = CircuitDiscoverSpec(model=model, device=device, **dtype_spec(dtype), rows=rows,
                                   prompts_file=None if prompts == "task" else prompts, method=method, params=params,
                                   edges=edges, ablation=ablation, metric=metric, selection=selection,
                                   evaluate=evaluate_, grid=ks, batch_size=batch_size)
    if spec.exact and resolve_address(ray_address) is None:  # path patching: say what it costs first
        cost = estimate(job_spec, 1)
        if cost is not None:
            console().print(f"path patching: about {cost.seconds:.0f} s on this machine")
    job, res = run_job(job_spec, 1, ray_address, save=save)
    out = {**res.to_json(), "job_id": job.id}
    if save:
        out["run"] = job.run_id  # the job stored it
    finish(out, as_json, _human, res, png=png, say=console().print)


def evaluate(
    run: str = typer.Option(..., "--run", help="A saved circuit run id or a unique prefix of one "
                            "(`workbench runs list --kind circuit`)."),
    edges: int = typer.Option(None, "--edges", help="K to print (default: the run's).", callback=positive_int),
    ablation: str = typer.Option(None, "--ablation", help="corrupt, mean or zero (default: the run's)."),
    selection: str = typer.Option("topk", "--selection", help="topk or greedy."),
    grid: str = GRID_OPTION,
    keep: list[str] = typer.Option(None, "--keep", help="Evaluate exactly these edges instead, 'SRC->DST' "
                                   "(repeatable), e.g. --keep 'L0.H0->L1.H0.q'."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Re-evaluate a saved circuit: its faithfulness curve (or one hand-picked circuit) on its prompts. Runs
    as a job (nothing new is stored), on a Ray cluster with --ray-address."""
    from core.errors import RangeError
    from core.store import RunStore
    from workbench.commands.common import check_device

    _check(edges, None, ablation, None, selection)
    ks = _grid(grid)
    pairs = []
    for item in keep or []:
        src, sep, dst = item.partition("->")
        if not sep or not src.strip() or not dst.strip():
            raise RangeError(f"--keep takes SRC->DST, e.g. 'L0.H0->L1.H0.q' (got {item!r})")
        pairs.append((src.strip(), dst.strip()))
    from circuits.discover import CircuitResult

    run = RunStore().resolve_id(run)  # a unique prefix, as every command that takes a run id
    res = CircuitResult.from_run(RunStore().get(run))
    for s, d in pairs:
        res.graph.edge_id(s, d)  # unknown edge names fail before the model loads
    from workbench.commands.jobs import run_job
    from workbench.scheduler.specs import CircuitEvaluateSpec

    spec = CircuitEvaluateSpec(run=run, device=check_device(device), **dtype_spec(dtype), edges=edges,
                               ablation=ablation, selection=selection, grid=ks, keep=[list(p) for p in pairs])
    job, result = run_job(spec, 1, ray_address, save=False)
    if pairs:
        emit({**result.out, "job_id": job.id}, as_json)
        return
    finish({**result.to_json(), "run": run, "job_id": job.id}, as_json, _human, say=console().print)
