"""ViT commands: vit-eval (the localization benchmark), vit-explain (one image), train-vit."""

from __future__ import annotations

import typer

from core.options import allow_long_option, nonempty, nonneg_int, positive_float, positive_int
from workbench.commands.common import JSON_OPTION, SEED_OPTION, emit
from workbench.commands.jobs import RAY_ADDRESS_OPTION, workers_option

ALL = "dap,attention,rollout,gae,gradcam,tam,ig,random,dpa"


def register(app: typer.Typer) -> None:
    app.command("vit-eval")(vit_eval)
    app.command("vit-explain")(vit_explain)
    app.command("train-vit")(train_vit)


def _vit_entry(model: str):
    """The zoo entry, refused unless a ViT (nothing heavy is loaded)."""
    from core.errors import WorkbenchError
    from core.models.zoo import resolve

    entry = resolve(model)
    if entry.kind != "vit":
        raise WorkbenchError(f"model {model!r} has kind {entry.kind!r}, not a vision transformer: "
                             "vit commands need a kind 'vit' model (see `workbench models`)")
    return entry


def _load_vit(model: str, device: str = "cpu"):
    """Resolve first, so a non-ViT model is refused before anything heavy is loaded."""
    from core.models.zoo import load

    _vit_entry(model)
    return load(model, device=device)


def _threads(n: int) -> None:
    import torch

    if n > 0:
        torch.set_num_threads(n)


def _check_shape(model: str, batch) -> None:
    """A workbench ViT's config says its classes and image size: a set it does not fit is refused before
    any job starts (other ViTs are checked by the job, once loaded)."""
    import json
    from pathlib import Path

    from core.models.zoo import resolve
    from workbench.scheduler.kind_vit import check_fits

    entry = resolve(model)
    try:
        cfg = json.loads((Path(entry.path) / "config.json").read_text())
    except (TypeError, OSError, ValueError):
        return
    if cfg.get("model_type") != "workbench-vit" or not isinstance(cfg.get("model"), dict):
        return
    from types import SimpleNamespace

    from core.models.vit import ViTConfig

    check_fits(SimpleNamespace(cfg=ViTConfig.from_dict(cfg["model"])), batch, model, batch.dataset)


HEAD_HELP = ("dinov2-small's decision: a linear head on its class token (synthetic, hard) or saliency "
             "(the decoder's mean inside --region; vit-explain only). Default: synthetic.")
HEAD_OPTION = typer.Option(None, "--head", help=HEAD_HELP)


def _head(model: str, head: str | None, region: str | None = None) -> str | None:
    """The head name, checked before anything heavy is loaded: only models without a classifier take one."""
    from core.errors import WorkbenchError

    entry = _vit_entry(model)
    is_dino = entry.loader == "core.models.dinov2:load_dinov2"
    if head is None:
        if region is not None and is_dino:
            return "saliency"
        if region is not None:
            raise WorkbenchError("--region is for dinov2-small's saliency head (--head saliency)")
        return "synthetic" if is_dino else None
    if not is_dino:
        raise WorkbenchError(f"--head is for dinov2-small (a backbone without a classifier); {model!r} has "
                             "its own classifier")
    from core.models.dinov2 import head_names

    if head not in head_names():
        raise WorkbenchError(f"unknown head {head!r} for dinov2-small; known: {', '.join(head_names())}")
    if region is not None and head != "saliency":
        raise WorkbenchError(f"--region is for the saliency head; head {head!r} explains a class")
    return head


def _head_dataset(head: str | None) -> str:
    """The set a linear head was trained on (its json), else synthetic."""
    if not head or head == "saliency":
        return "synthetic"
    import json

    from core.models.dinov2 import heads_dir

    try:
        return str(json.loads((heads_dir() / f"{head}.json").read_text()).get("dataset", "synthetic"))
    except (OSError, ValueError, AttributeError):
        return "synthetic"


def vit_eval(
    model: str = typer.Option("vit-synth", "--model", help="A kind 'vit' model (name or local HF ViT dir)."),
    methods: str = typer.Option(ALL, "--methods", help="Comma-separated: " + ALL + " (or all)."),
    n: int = typer.Option(200, "--n", help="Number of held-out images.", callback=positive_int),
    seed: int = typer.Option(2, "--seed", help="Image seed (2 = held-out test set; 1 = validation).",
                             callback=nonneg_int),
    dataset: str = typer.Option(None, "--dataset", callback=nonempty,
                                help="synthetic, hard (several objects, decoys, clutter, occlusion; "
                                     "model vit-synth-hard) or digits. Default: synthetic, or the set "
                                     "dinov2-small's head was trained on."),
    head: str = HEAD_OPTION,
    steps: int = typer.Option(20, "--steps", help="Deletion / insertion steps (20: 0, 5, ..., 100 %).",
                              callback=positive_int),
    batch_size: int = typer.Option(50, "--batch-size", help="Images per method call.", callback=positive_int),
    threads: int = typer.Option(0, "--threads", help="torch threads (0 = torch's default).", callback=nonneg_int),
    save: bool = typer.Option(True, "--save/--no-save", help="Store the run (kind vit_eval)."),
    workers: int = workers_option("the (method, image batch) pairs"),
    ray_address: str = RAY_ADDRESS_OPTION,
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Localization benchmark: pointing game, energy pointing, mask IoU, deletion/insertion,
    perturbation AUCs, class sensitivity and seconds per image for each method.

    Runs as a job (``workbench jobs list``): with --workers N the (method, image batch) pairs are dealt over
    N Ray workers; every number but the times is that of one process."""
    from core.errors import WorkbenchError

    if n < 1:
        raise WorkbenchError(f"--n must be at least 1, got {n}")
    from attribution.vit.methods import parse_methods
    from core.options import BOUNDS, check_long, split_list

    names = parse_methods(split_list("--methods", methods))

    per_image = BOUNDS["vit-eval --n"].rate or 0.25  # every method (its steps too) on one image, vit-synth
    check_long(f"--n {n} images x {len(names)} methods", n * per_image * len(names) / 9 * max(1, steps / 20),
               allow_long)
    head = _head(model, head)
    if head == "saliency":
        raise WorkbenchError("the saliency head explains one image's region: use `workbench vit-explain IMAGE "
                             "--model dinov2-small --head saliency --region x0,y0,x1,y1`")
    if steps < 10 or steps % 10:
        raise WorkbenchError(f"--steps must be a multiple of 10 (the perturbation AUCs read 10 ... 90 %), got {steps}")
    dataset = dataset or _head_dataset(head)
    from attribution.vit import data

    if dataset not in data.DATASETS:
        raise WorkbenchError(f"unknown dataset {dataset!r}: use {', '.join(data.DATASETS)}")
    _check_shape(model, data.sample_images(dataset, n, seed))
    if head:
        _check_head_fits(head, dataset)
    _threads(threads)
    from workbench.commands.jobs import run_job
    from workbench.scheduler.specs import VitEvalSpec

    spec = VitEvalSpec(model=model, methods=names, n=n, seed=seed, dataset=dataset, batch_size=batch_size,
                       head=head or None, steps=steps, threads=threads or None)
    job, res = run_job(spec, workers, ray_address, save=save)
    k = min(batch_size, n)
    out = res.to_json()
    out["job_id"] = job.id
    if save:
        out["run"] = job.run_id
    out["markdown"] = res.markdown()

    def human(o):
        from workbench.commands.common import result_console

        print("\n".join(metrics_lines(res.table(), result_console().width)))
        if o.get("cost"):
            c = o["cost"]
            print(f"\nDAP cost: {c['dap_over_forward_backward']:.2f}x one forward+backward "
                  f"({c['dap_seconds']:.4f} s vs {c['forward_backward_seconds']:.4f} s on {k} images)")
        print(f"accuracy {o['accuracy']:.3f} on {n} images" + (f"; run {o['run']}" if "run" in o else ""))

    emit(out, as_json, human)


def metrics_lines(table, width: int = 80) -> list[str]:
    """vit-eval's table for a terminal: a metric a row, a method a column, in blocks of columns that fit
    ``width`` (the markdown table, a method a row, needs 190 columns; it stays in --json)."""
    metrics = [c for c in table.columns if c != "method"]
    methods = [str(m) for m in table["method"]]
    name_w = max(len("metric"), *(len(m) for m in metrics))
    cell_w = max(8, *(len(m) for m in methods))
    per = max(1, (width - name_w) // (cell_w + 1))
    lines: list[str] = []
    for start in range(0, len(methods), per):
        block = list(range(start, min(start + per, len(methods))))
        lines.append("metric".ljust(name_w) + "".join(f" {methods[i]:>{cell_w}}" for i in block))
        for metric in metrics:
            values = table[metric].tolist()
            lines.append(metric.ljust(name_w) + "".join(f" {float(values[i]):>{cell_w}.4f}" for i in block))
        lines.append("")
    return lines[:-1]


def _check_head_fits(head: str, dataset: str) -> None:
    import json

    from attribution.vit import data
    from core.errors import WorkbenchError
    from core.models.dinov2 import heads_dir

    try:
        classes = json.loads((heads_dir() / f"{head}.json").read_text())["classes"]
    except (OSError, ValueError, KeyError, TypeError):
        raise WorkbenchError(f"cannot read head {head!r} in {heads_dir()}") from None
    want = data.sample_images(dataset, 1).class_names
    if list(classes) != list(want):
        raise WorkbenchError(f"head {head!r} has classes {', '.join(classes)}; the {dataset} set has "
                             f"{', '.join(want)}")


def vit_explain(
    image: str = typer.Argument(..., help="PNG/JPEG (RGB) or .npy (C,H,W or H,W,C) in [0,1] or [0,255]."),
    model: str = typer.Option(None, "--model", callback=nonempty,
                              help="A kind 'vit' model. Default: the one that fits the image: vit-synth for a "
                                   "32x32 image, else the pretrained dinov2-small (a photograph: its saliency "
                                   "head unless --head says)."),
    method: str = typer.Option("dap", "--method", help=ALL),
    target: int = typer.Option(None, "--target", help="Class index (default: the predicted class).",
                               callback=nonneg_int),
    head: str = HEAD_OPTION,
    region: str = typer.Option(None, "--region",
                               help="x0,y0,x1,y1 in the image's pixels (x1, y1 exclusive): the saliency head's "
                                    "region (default: the whole image)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Explain one image with one method: the patch map and the predicted class. dinov2-small takes any RGB
    photograph (resized to 224 px) and explains a linear head's class or the saliency inside --region."""
    from attribution.vit.methods import method_module

    method_module(method)  # unknown method: refused before loading anything
    if model is None:
        model = pick_vit(image, head, region)
        if model == PRETRAINED and head is None:
            head = "saliency"  # a photograph has none of the synthetic shapes the linear heads know
    head = _head(model, head, region)
    from attribution.vit.explanation import explain_image

    out = explain_image(model, image, method, head, region, target, label=image).to_json()

    def human(o):
        print(f"{o['method']}: predicted {o['predicted']}, explaining {o['target']}"
              + (f" (mean saliency in the region {o['saliency_in_region']:.3f})" if "saliency_in_region" in o
                 else ""))
        cells = [v for row in o["map"] for v in row]
        if len(o["map"][0]) <= 8:  # a 32x32 image's 8x8 patches: the scores themselves fit 80 columns
            for row in o["map"]:
                print(" ".join(f"{v:8.4f}" for v in row))
        else:  # dinov2's 16x16 patches: per cent of the largest score, 4 columns a patch (64 in all)
            top = max(abs(v) for v in cells) or 1.0
            print(f"patch scores, % of the largest ({top:.4g}); --json has the scores:")
            for row in o["map"]:
                print(" ".join(f"{100 * v / top:3.0f}" for v in row))

    emit(out, as_json, human)


SYNTH = "vit-synth"
PRETRAINED = "dinov2-small"


def pick_vit(image: str, head: str | None, region: str | None) -> str:
    """The model that fits the image when --model is not given: vit-synth takes exactly its own size (32x32,
    the synthetic shapes it was trained on); anything else, or a dinov2 head or region, goes to the pretrained
    dinov2-small (any RGB image, resized to 224 px). The choice is one line on stderr."""
    import json
    import sys
    from pathlib import Path

    from attribution.vit.images import read_image
    from core.models.zoo import resolve

    if head is not None or region is not None:
        return PRETRAINED
    height, width = (int(v) for v in read_image(image).shape[-2:])  # a bad image is refused here, in one line
    try:
        size = int(json.loads((Path(resolve(SYNTH).path) / "config.json").read_text())["model"]["image_size"])
    except (OSError, ValueError, KeyError, TypeError):
        size = 32
    if (height, width) == (size, size):
        return SYNTH
    print(f"model: {PRETRAINED}, head saliency (the image is {width}x{height}; {SYNTH} takes {size}x{size} "
          "only; --model and --head choose)", file=sys.stderr)
    return PRETRAINED


def train_vit(
    dataset: str = typer.Option("synthetic", "--dataset", help="synthetic, hard or digits."),
    steps: int = typer.Option(3000, "--steps", callback=positive_int),
    batch_size: int = typer.Option(64, "--batch-size", callback=positive_int),
    lr: float = typer.Option(2e-3, "--lr", callback=positive_float),
    seed: int = SEED_OPTION,
    threads: int = typer.Option(1, "--threads", help="torch threads (keep low on shared machines).",
                                callback=nonneg_int),
    out: str = typer.Option(None, "--out",
                            help="Checkpoint dir (default data/models/vit-synth|vit-synth-hard|vit-digits)."),
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Train the small ViT and write a zoo checkpoint (config.json + model.safetensors + metrics.json)."""
    from core.errors import WorkbenchError

    if dataset not in ("synthetic", "hard", "digits"):
        raise WorkbenchError(f"unknown dataset {dataset!r}: use synthetic, hard or digits")
    if steps < 1 or batch_size < 1:
        raise WorkbenchError("--steps and --batch-size must be positive")
    from core.options import check_output

    check_output("--out", out, kind="dir")  # checked before training, not after it
    from core.options import BOUNDS, check_long

    per_step = (BOUNDS["train-vit --steps"].rate or 0.05) * batch_size / 64  # measured at batch 64
    check_long(f"--steps {steps} of --batch-size {batch_size}", steps * per_step, allow_long)
    from attribution.vit.train import save_trained
    from attribution.vit.train import train_vit as _train
    from workbench.commands.common import console

    con = console()
    vit, metrics = _train(dataset, steps, batch_size, lr, seed, threads, log=con.print)
    from workbench.commands.train import check_trained

    check_trained(vit, metrics, f"--lr {lr}")
    path = save_trained(vit, metrics, out)
    emit({"path": str(path), **{k: v for k, v in metrics.items() if k != "config"}}, as_json)
