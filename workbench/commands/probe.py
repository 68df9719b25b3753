"""`workbench probe` (layer-wise probes with control task, GDV, RSA) and `workbench icl-readout`."""

from __future__ import annotations

import time
from typing import Any

import typer

from core.options import (
    allow_long_option,
    float_range,
    int_range,
    layers_option,
    nonneg_float,
    positive_int,
)
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    SEED_OPTION,
    dtype_spec,
    emit,
    result_console,
)
from workbench.commands.jobs import RAY_ADDRESS_OPTION


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    app.command("icl-readout")(icl_readout)


def run_probe_job(spec: Any, ray_address: str | None, save: bool) -> dict[str, Any]:
    """A probe or concepts job, run; its result's JSON ("run" naming its run when one was stored). Run in this
    process, it gets at most two torch threads (as always here) and its hooks and layers are checked before the
    job starts."""
    from workbench.commands.jobs import run_job
    from workbench.scheduler import resolve_address
    from workbench.scheduler.kind_probes import check_here

    if resolve_address(ray_address) is None:
        import torch

        torch.set_num_threads(min(2, torch.get_num_threads()))
        check_here(spec.to_dict())
    job, res = run_job(spec, 1, ray_address, save=save)
    out = res.to_json()
    if job.run_id:
        out["run"] = job.run_id
    return out


def probe(
    model: str = typer.Option(..., "--model", help="Model name from `workbench models` or a local path."),
    dataset: str = typer.Option(..., "--dataset", help='JSONL file, lines {"text": str, "label": str}.'),
    hook: str = typer.Option(None, "--hook", help="Probe this hook (comma-separated for several)."),
    layers: str = typer.Option(
        "all", "--layers", help="Residual stream after these blocks: all, 5, 0,5,10, 4-8.", callback=layers_option
    ),
    pooling: str = typer.Option("last", "--pooling", help='last | mean | marked (the line\'s "word").'),
    test_frac: float = typer.Option(0.3, "--test-frac", help="Held-out fraction of examples.",
                                    callback=float_range(0.05, 0.8)),
    seed: int = SEED_OPTION,
    save: bool = typer.Option(True, "--save/--no-save", help="Store the run (curve, tables)."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Layer-wise logistic probes: held-out accuracy, control-task accuracy, selectivity, GDV, 95% CI.
    Runs as a job (`workbench jobs list`): here, or on Ray with --ray-address."""
    from attribution.probes.activations import POOLINGS, check_pooling, load_dataset
    from core.errors import DatasetError

    if pooling not in POOLINGS:
        raise DatasetError(f"unknown pooling {pooling!r}: {', '.join(POOLINGS)}")
    if not 0.05 <= test_frac <= 0.8:
        raise DatasetError(f"--test-frac {test_frac} must be between 0.05 and 0.8")
    if hook is not None:  # '' or 'a,,b' is a mistake, never "no hook given" (then: every layer)
        from core.options import split_list

        hook = ",".join(split_list("--hook", hook))
    data = load_dataset(dataset, min_per_class=4)  # bad data fails before the model is loaded
    check_pooling(data, pooling, dataset)  # marked: every example marks its word

    from core.models.zoo import check_text_model
    from workbench.commands.common import check_device
    from workbench.scheduler.kind_probes import dataset_spec, model_ref
    from workbench.scheduler.specs import ProbeSpec

    check_text_model(model, "probe")  # before the job starts
    spec = ProbeSpec(model=model_ref(model), device=check_device(device), **dtype_spec(dtype),
                     **dataset_spec(dataset, data), hook=hook, layers=layers, pooling=pooling, test_frac=test_frac,
                     seed=seed)
    out = run_probe_job(spec, ray_address, save)

    def human(o):
        from rich.table import Table

        t = Table("layer", "accuracy", "95% CI", "control", "selectivity", "GDV")
        for r in o["layers"]:
            t.add_row(
                str(r["layer"]),
                f"{r['accuracy']:.3f}",
                f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]",
                f"{r['control_accuracy']:.3f}",
                f"{r['selectivity']:+.3f}",
                "" if r["gdv"] is None else f"{r['gdv']:.3f}",
            )
        c = result_console()
        c.print(t)
        c.print(f"best layer: {o['best_layer']}" + (f"  (run {o['run']})" if "run" in o else ""))

    emit(out, as_json, human)


def icl_readout(
    model: str = typer.Option("icl-regression", "--model", help="An in-context regression toy model."),
    n: int = typer.Option(512, "--n", help="Held-out prompts.", callback=int_range(8)),
    n_train: int = typer.Option(2048, "--n-train", help="Prompts to fit the layer probes on.", callback=int_range(8)),
    iters: int = typer.Option(32, "--iters", help="Iterations of the iterative solvers.", callback=positive_int),
    lam: float = typer.Option(0.01, "--lam", help="Ridge / kernel regulariser.", callback=nonneg_float),
    seed: int = SEED_OPTION,
    save: bool = typer.Option(True, "--save/--no-save"),
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Probe each layer's prediction of y and compare it with GD, Richardson, preconditioned Richardson,
    ridge and kernel ridge on the same prompts: each solver's distance to the layer-wise predictions."""
    from core.errors import RangeError

    if n < 8 or n_train < 8 or iters < 1:
        raise RangeError("--n and --n-train must be at least 8 and --iters at least 1")
    import torch

    import workbench
    from attribution.probes.icl_readout import icl_readout as run_readout

    torch.set_num_threads(min(2, torch.get_num_threads()))
    started = time.time()
    from core.models.zoo import check_text_model

    check_text_model(model, "icl-readout")
    m = workbench.load(model)
    res = run_readout(m, n=n, n_train=n_train, iters=iters, lam=lam, seed=seed)
    out = res.to_json()
    if save:
        from core.store import RunDraft, RunStore

        run = RunStore().save(
            RunDraft(
                kind="icl-readout",
                model=m.name,
                method="layer-probe-vs-solvers",
                args={"n": n, "n_train": n_train, "iters": iters, "lam": lam, "seed": seed},
                timings={"total_s": time.time() - started},
                result=out,
                tensors={"layer_profiles": res.layer_profiles},
                tables={"solvers": res.table()},
                figures={"profiles": res.plot()},
            )
        )
        out["run"] = run.id

    def human(o):
        from rich.table import Table

        c = result_console()
        t = Table("layer", "probe R^2", "MSE")
        for name, r2, mse in zip(o["layers"], o["probe_r2"], o["layer_mse"], strict=False):
            t.add_row(name, f"{r2:.3f}", f"{mse:.4f}")
        c.print(t)
        t = Table("solver", "distance to layers", "error-profile distance", "best iterate per layer")
        for s in sorted(o["solvers"], key=lambda s: s["distance"]):
            t.add_row(
                s["solver"],
                f"{s['distance']:.4f}",
                f"{s['profile_distance']:.4f}",
                " ".join(map(str, s["best_iterates"])),
            )
        c.print(t)
        c.print(f"closest solver: {o['best_solver']} (by error profile: {o['best_solver_by_profile']})")

    emit(out, as_json, human)
