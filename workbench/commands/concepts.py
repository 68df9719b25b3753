"""`workbench concepts`: class-mean, probe and SAE concept vectors per layer, and steering."""

from __future__ import annotations

import typer

from core.options import finite_float, layers_option, positive_int
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    MODEL_PATH_OPTION,
    dtype_spec,
    emit,
    result_console,
)
from workbench.commands.jobs import RAY_ADDRESS_OPTION


def register(app: typer.Typer) -> None:
    app.command("concepts")(concepts)


def find_saes(model_name: str, extra: list[str] | None = None) -> dict[str, str]:
    """{hook: SAE directory} for SAEs in data/saes trained on ``model_name``, plus ``extra`` paths."""
    from attribution.probes.run import find_saes as find

    return find(model_name, extra)


def concepts(
    model: str = MODEL_PATH_OPTION,
    dataset: str = typer.Option(..., "--dataset", help='JSONL, lines {"text": str, "label": str}.'),
    concept: str = typer.Option(
        None, "--concept", help="The concept class (default: last label, e.g. positive)."
    ),
    layers: str = typer.Option("all", "--layers", help="all, 5, 0,5,10 or 4-8.", callback=layers_option),
    pooling: str = typer.Option("last", "--pooling", help="last | mean | marked."),
    steer_layers: str = typer.Option(
        None, "--steer-layers", help="Layers to steer at (default: 5 spread out).", callback=layers_option
    ),
    scale: float = typer.Option(
        1.0, "--scale", help="Steering norm as a multiple of the typical activation norm.", callback=finite_float),
    n_steer: int = typer.Option(32, "--n-steer", help="Texts outside the concept class to steer.",
                                callback=positive_int),
    sae: list[str] = typer.Option(
        None, "--sae", help="Extra SAE directories (default: data/saes for the model)."
    ),
    save: bool = typer.Option(True, "--save/--no-save"),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Per layer: cosine similarities of the three concept vectors, and the steering effect of each
    (logit movement toward the concept) against a random vector of the same norm. Runs as a job
    (`workbench jobs list`): here, or on Ray with --ray-address."""
    from attribution.probes.activations import POOLINGS, check_pooling, load_dataset
    from core.errors import DatasetError

    if pooling not in POOLINGS:
        raise DatasetError(f"unknown pooling {pooling!r}: {', '.join(POOLINGS)}")
    data = load_dataset(dataset, min_per_class=4)
    check_pooling(data, pooling, dataset)  # marked: every example marks its word
    concept = concept or data.classes[-1]
    if concept not in data.classes:
        raise DatasetError(
            f"concept {concept!r} is not a label of {dataset}; labels: {', '.join(data.classes)}"
        )


    from core.models.zoo import check_text_model
    from workbench.commands.common import check_device
    from workbench.commands.probe import run_probe_job
    from workbench.scheduler.kind_probes import dataset_spec, model_ref
    from workbench.scheduler.specs import ConceptsSpec

    check_text_model(model, "concepts")  # before the job starts
    for path in sae or []:  # a path needs no model: refused before anything loads
        from pathlib import Path

        from core.errors import ModelFileError

        if not (Path(_sae_path(path)) / "cfg.json").is_file():
            raise ModelFileError(f"--sae {path!r} is not an SAE directory (no cfg.json)")
    spec = ConceptsSpec(model=model_ref(model), device=check_device(device), **dtype_spec(dtype),
                        **dataset_spec(dataset, data), concept=concept, layers=layers, steer_layers=steer_layers,
                        pooling=pooling, scale=scale, n_steer=n_steer,
                        saes=[_sae_path(p) for p in sae or []])
    out = run_probe_job(spec, ray_address, save)

    def human(o):
        from rich.table import Table

        t = Table(
            "layer",
            "cos(mean,probe)",
            "cos(mean,sae)",
            "cos(probe,sae)",
            "steer mean",
            "steer probe",
            "steer sae",
            "steer random",
        )

        def f(v):
            return "" if v is None else f"{v:+.3f}"

        for r in o["layers"]:
            s = r["steering"]
            t.add_row(
                str(r["layer"]),
                f(r["cos_mean_probe"]),
                f(r["cos_mean_sae"]),
                f(r["cos_probe_sae"]),
                f(s.get("mean")),
                f(s.get("probe")),
                f(s.get("sae")),
                f(s.get("random")),
            )
        result_console().print(t)
        result_console().print(
            f"concept {o['concept']!r} vs {o['other']!r}; steering = logit movement toward the "
            f"concept at scale {o['scale']}"
        )

    emit(out, as_json, human)


def _sae_path(text: str) -> str:
    """A --sae directory as an absolute path (a Ray worker's cwd differs); '~nosuchuser/x' stays as written."""
    from pathlib import Path

    try:
        return str(Path(text).expanduser().resolve())
    except RuntimeError:  # no such user's home: the job says the dictionary is missing
        return text
