"""`workbench concepts`: class-mean, probe and SAE concept vectors per layer, and steering."""

from __future__ import annotations

import time

import typer

from workbench.cli import DEVICE_OPTION, JSON_OPTION, console, emit
from workbench.options import finite_float, layers_option, positive_int


def register(app: typer.Typer) -> None:
    app.command("concepts")(concepts)


def find_saes(model_name: str, extra: list[str] | None = None) -> dict[str, str]:
    """{hook: SAE directory} for SAEs in data/saes trained on ``model_name``, plus ``extra`` paths."""
    import json
    from pathlib import Path

    from workbench.zoo import DATA_DIR

    found: dict[str, str] = {}
    for cfg in sorted((DATA_DIR / "saes").glob("*/cfg.json")):
        try:
            meta = json.loads(cfg.read_text()).get("metadata", {})
        except (OSError, ValueError):
            continue
        # transcoders read one hook and write another; concept vectors compare with SAEs only
        is_transcoder = bool(meta.get("hook_name_out")) and meta.get("hook_name_out") != meta.get("hook_name")
        if meta.get("model_name") == model_name and meta.get("hook_name") and not is_transcoder:
            found.setdefault(meta["hook_name"], str(cfg.parent))
    for path in extra or []:
        cfg = Path(path) / "cfg.json"
        if not cfg.exists():
            from workbench.errors import ModelFileError

            raise ModelFileError(f"{path!r} is not an SAE directory (no cfg.json)")
        hook = json.loads(cfg.read_text()).get("metadata", {}).get("hook_name")
        if hook:
            found[hook] = path
    return found


def concepts(
    model: str = typer.Option(..., "--model", help="Model name or local path."),
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
    as_json: bool = JSON_OPTION,
) -> None:
    """Per layer: cosine similarities of the three concept vectors, and the steering effect of each
    (logit movement toward the concept) against a random vector of the same norm."""
    from attribution.probes.activations import POOLINGS, load_dataset
    from workbench.errors import DatasetError

    if pooling not in POOLINGS:
        raise DatasetError(f"unknown pooling {pooling!r}: {', '.join(POOLINGS)}")
    data = load_dataset(dataset, min_per_class=4)
    concept = concept or data.classes[-1]
    if concept not in data.classes:
        raise DatasetError(
            f"concept {concept!r} is not a label of {dataset}; labels: {', '.join(data.classes)}"
        )

    import torch

    import workbench
    from attribution.probes.activations import parse_layers, pooled_activations
    from attribution.probes.concepts import concept_vectors
    from attribution.sae.train import check_fits, load_sae
    from workbench.cli import check_device

    torch.set_num_threads(min(2, torch.get_num_threads()))
    started = time.time()
    m = workbench.load(model, device=check_device(device))
    idx = parse_layers(layers, m.arch.n_layers)
    hooks = [f"blocks.{i}.hook_resid_post" for i in idx]
    if steer_layers:
        steer = [f"blocks.{i}.hook_resid_post" for i in parse_layers(steer_layers, m.arch.n_layers)]
    else:
        pick = sorted({idx[round(j * (len(idx) - 1) / 4)] for j in range(5)}) if len(idx) > 1 else idx
        steer = [f"blocks.{i}.hook_resid_post" for i in pick]
    hooks = sorted(set(hooks) | set(steer), key=lambda h: int(h.split(".")[1]))
    saes = {}
    for hook, path in find_saes(m.name, sae).items():
        if hook in hooks:
            s = load_sae(path)
            check_fits(s, m.arch.d_model, hook)
            saes[hook] = s
    acts = pooled_activations(m, data, hooks, pooling)
    res = concept_vectors(
        m,
        acts,
        data.labels,
        concept,
        data.texts,
        saes,
        pooling,
        steer,
        scale,
        n_steer,
        layer_names={h: int(h.split(".")[1]) for h in hooks},
    )
    out = res.to_json()
    out["saes"] = {h: find_saes(m.name, sae).get(h) for h in saes}
    if save:
        from workbench.store import RunDraft, RunStore

        run = RunStore().save(
            RunDraft(
                kind="concepts",
                model=m.name,
                method="concept-vectors",
                args={
                    "dataset": dataset,
                    "concept": concept,
                    "pooling": pooling,
                    "scale": scale,
                    "steer": steer,
                },
                timings={"total_s": time.time() - started},
                result=out,
                tables={"layers": res.table()},
                figures={"concepts": res.plot()},
            )
        )
        out["run"] = run.id

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
        console().print(t)
        console().print(
            f"concept {o['concept']!r} vs {o['other']!r}; steering = logit movement toward the "
            f"concept at scale {o['scale']}"
        )

    emit(out, as_json, human)
