"""`workbench probe` (layer-wise probes with control task, GDV, RSA) and `workbench icl-readout`."""

from __future__ import annotations

import time

import typer

from workbench.cli import DEVICE_OPTION, JSON_OPTION, console, emit
from workbench.options import float_range, int_range, layers_option, nonneg_float, nonneg_int, positive_int


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    app.command("icl-readout")(icl_readout)


def _hooks_for(model, hook: str | None, layers: str) -> tuple[list[str], dict[str, int | str]]:
    """The hooks to probe and the layer label of each (an int for blocks.{l}.*)."""
    from attribution.probes.activations import parse_layers

    if hook:
        names = [model.check_hook(h.strip()) for h in hook.split(",")]
    else:
        names = [f"blocks.{i}.hook_resid_post" for i in parse_layers(layers, model.arch.n_layers)]
    labels: dict[str, int | str] = {}
    for h in names:
        parts = h.split(".")
        labels[h] = int(parts[1]) if parts[0] == "blocks" and parts[1].isdigit() else h
    return names, labels


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
    seed: int = typer.Option(0, "--seed", callback=nonneg_int),
    save: bool = typer.Option(True, "--save/--no-save", help="Store the run (curve, tables)."),
    device: str = DEVICE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Layer-wise logistic probes: held-out accuracy, control-task accuracy, selectivity, GDV, 95% CI."""
    from attribution.probes.activations import POOLINGS, load_dataset
    from workbench.errors import DatasetError

    if pooling not in POOLINGS:
        raise DatasetError(f"unknown pooling {pooling!r}: {', '.join(POOLINGS)}")
    if not 0.05 <= test_frac <= 0.8:
        raise DatasetError(f"--test-frac {test_frac} must be between 0.05 and 0.8")
    data = load_dataset(dataset, min_per_class=4)  # bad data fails before the model is loaded

    import torch

    import workbench
    from attribution.probes.activations import pooled_activations
    from attribution.probes.geometry import projection_figure, rsa_matrix
    from attribution.probes.probe import probe_layers
    from workbench.cli import check_device

    torch.set_num_threads(min(2, torch.get_num_threads()))
    started = time.time()
    m = workbench.load(model, device=check_device(device))
    hooks, labels = _hooks_for(m, hook, layers)
    t_load = time.time() - started
    acts = pooled_activations(m, data, hooks, pooling)
    t_acts = time.time() - started - t_load
    res = probe_layers(
        acts, data.labels, data.words, m.name, "logistic", pooling, test_frac, seed, layer_names=labels
    )
    out = res.to_json()
    out["dataset"] = dataset
    if save:
        from workbench.store import RunDraft, RunStore

        best = res.best
        figures = {
            "curve": res.plot(),
            "pca_best": projection_figure(
                acts[best.hook], data.labels, "pca", f"PCA of {best.hook} ({pooling} pooling)"
            ),
        }
        tables = {"layers": res.table()}
        if len(hooks) > 1:
            rsa = rsa_matrix({str(labels[h]): acts[h] for h in hooks})
            tables["rsa"] = rsa.reset_index(names="layer")
            import plotly.express as px

            figures["rsa"] = px.imshow(
                rsa.values,
                x=list(rsa.columns),
                y=list(rsa.index),
                zmin=-1,
                zmax=1,
                color_continuous_scale="RdBu",
                title="RSA between layers",
            )
        run = RunStore().save(
            RunDraft(
                kind="probe",
                model=m.name,
                method="logistic-probe",
                args={
                    "dataset": dataset,
                    "hooks": hooks,
                    "pooling": pooling,
                    "test_frac": test_frac,
                    "seed": seed,
                },
                timings={"load_s": t_load, "activations_s": t_acts, "total_s": time.time() - started},
                result=out | {"best_accuracy": best.accuracy, "best_selectivity": best.selectivity},
                tensors={
                    "accuracy": torch.tensor([r.accuracy for r in res.layers]),
                    "control_accuracy": torch.tensor([r.control_accuracy for r in res.layers]),
                },
                tables=tables,
                figures=figures,
            )
        )
        out["run"] = run.id

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
        c = console()
        c.print(t)
        c.print(f"best layer: {o['best_layer']}" + (f"  (run {o['run']})" if "run" in o else ""))

    emit(out, as_json, human)


def icl_readout(
    model: str = typer.Option("icl-regression", "--model", help="An in-context regression toy model."),
    n: int = typer.Option(512, "--n", help="Held-out prompts.", callback=int_range(8)),
    n_train: int = typer.Option(2048, "--n-train", help="Prompts to fit the layer probes on.", callback=int_range(8)),
    iters: int = typer.Option(32, "--iters", help="Iterations of the iterative solvers.", callback=positive_int),
    lam: float = typer.Option(0.01, "--lam", help="Ridge / kernel regulariser.", callback=nonneg_float),
    seed: int = typer.Option(0, "--seed", callback=nonneg_int),
    save: bool = typer.Option(True, "--save/--no-save"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Probe each layer's prediction of y and compare it with GD, Richardson, preconditioned Richardson,
    ridge and kernel ridge on the same prompts: each solver's distance to the layer-wise predictions."""
    from workbench.errors import RangeError

    if n < 8 or n_train < 8 or iters < 1:
        raise RangeError("--n and --n-train must be at least 8 and --iters at least 1")
    import torch

    import workbench
    from attribution.probes.icl_readout import icl_readout as run_readout

    torch.set_num_threads(min(2, torch.get_num_threads()))
    started = time.time()
    m = workbench.load(model)
    res = run_readout(m, n=n, n_train=n_train, iters=iters, lam=lam, seed=seed)
    out = res.to_json()
    if save:
        from workbench.store import RunDraft, RunStore

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

        c = console()
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
