"""``workbench train TASK``: train a toy model from circuits/ and save a zoo checkpoint."""

from __future__ import annotations

from typing import Any

import typer

from core.options import allow_long_option, nonempty, nonneg_float, nonneg_int, positive_float, positive_int
from workbench.commands.common import JSON_OPTION, emit, progress, result_console


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    task: str = typer.Argument(..., help="ioi, modadd, carry, histogram, markov or icl-regression."),
    out: str = typer.Option(
        ...,
        "--out",
        help="Checkpoint directory to write (config.json, model.safetensors, "
        "metrics.json, snapshots.safetensors).",
    ),
    ffn: str = typer.Option(None, "--ffn", help="none, dense, glu, moe or moe-glu (default: the task's)."),
    layers: int = typer.Option(None, "--layers", help="Number of layers.", callback=positive_int),
    heads: int = typer.Option(None, "--heads", help="Heads per layer (must divide d_model).", callback=positive_int),
    d_model: int = typer.Option(None, "--d-model", help="Residual width.", callback=positive_int),
    d_mlp: int = typer.Option(None, "--d-mlp", help="FFN width (per expert for MoE).", callback=positive_int),
    norm: str = typer.Option(None, "--norm", help="none, LN or RMS."),
    act_fn: str = typer.Option(None, "--act-fn", help="relu, gelu or silu (GLU variants use silu)."),
    experts: int = typer.Option(None, "--experts", help="MoE: number of experts.", callback=positive_int),
    top_k: int = typer.Option(None, "--top-k", help="MoE: experts per token (1 or 2).", callback=positive_int),
    router: str = typer.Option(None, "--router", help="MoE: learned or frozen (random, never trained)."),
    qk_norm: bool = typer.Option(False, "--qk-norm", help="RMSNorm on queries and keys."),
    steps: int = typer.Option(None, "--steps", help="Optimizer steps.", callback=positive_int),
    lr: float = typer.Option(None, "--lr", help="Peak learning rate (AdamW, warm-up then cosine).",
                             callback=positive_float),
    weight_decay: float = typer.Option(None, "--weight-decay", help="AdamW weight decay.", callback=nonneg_float),
    batch_size: int = typer.Option(None, "--batch-size", help="Batch size; 0 = full train split each step.",
                                   callback=nonneg_int),
    seed: int = typer.Option(None, "--seed", help="Seed of initialisation and data order.", callback=nonneg_int),
    task_param: list[str] = typer.Option(
        None, "--task-param", help="Task parameter key=value (repeatable), e.g. p=53."
    ),
    name: str = typer.Option(None, "--name", help="Zoo name (default: the directory name).", callback=nonempty),
    threads: int = typer.Option(1, "--threads", help="torch threads (1 or 2 on shared machines).",
                                callback=positive_int),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing checkpoint in --out."),
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Train a toy transformer on a circuits task (CPU, minutes) and save it as a zoo checkpoint."""
    import json

    from core.errors import ModelFileError, WorkbenchError
    from core.models.toy import ModelSpec, check_spec
    from core.models.toy_tasks import get_task

    params = _task_params(task_param or [])
    t = get_task(task, **params)
    d = dict(t.defaults)
    given = {
        "ffn": ffn,
        "layers": layers,
        "heads": heads,
        "d_model": d_model,
        "d_mlp": d_mlp,
        "norm": norm,
        "act_fn": act_fn,
        "experts": experts,
        "top_k": top_k,
        "router": router,
        "steps": steps,
        "lr": lr,
        "weight_decay": weight_decay,
        "batch_size": batch_size,
        "seed": seed,
    }
    d.update({k: v for k, v in given.items() if v is not None})
    spec = ModelSpec(
        task=task,
        ffn=d["ffn"],
        layers=d["layers"],
        heads=d["heads"],
        d_model=d["d_model"],
        d_mlp=d.get("d_mlp"),
        norm=d.get("norm", "none"),
        act_fn=d.get("act_fn", "relu"),
        experts=d.get("experts", 4),
        top_k=d.get("top_k", 1),
        router=d.get("router", "learned"),
        qk_norm=qk_norm,
        task_params=t.params(),
    )
    check_spec(spec)
    _check_size(spec, t, d, allow_long)
    if spec.ffn == "none" and d.get("d_mlp"):
        raise WorkbenchError("--d-mlp given but --ffn none has no FFN")
    if threads < 1:
        raise WorkbenchError("--threads must be at least 1")
    from core.options import check_output

    path = check_output("--out", out, kind="dir")
    if (path / "config.json").exists() and not force:
        raise ModelFileError(f"{out} already holds a checkpoint: pass --force to overwrite it")
    from circuits.toy.train import TrainConfig
    from circuits.toy.train import train as run_train
    from core.models.toy_checkpoint import save

    cfg = TrainConfig(
        steps=d["steps"],
        lr=d["lr"],
        weight_decay=d["weight_decay"],
        batch_size=d["batch_size"],
        seed=d["seed"],
        threads=threads,
    )
    command = _command(task, path, name, d, spec, params)
    with progress() as bar:
        job = bar.add_task(f"train {task} ({spec.ffn})", total=cfg.steps)
        model, metrics, snaps = run_train(
            t, spec, cfg, on_step=lambda s, n, loss: bar.update(job, completed=s)
        )
    check_trained(model, metrics, f"--lr {cfg.lr}")
    metrics["command"] = command
    zoo_name = name or path.name
    from core.checks import output_folder

    with output_folder(path, "checkpoint not saved"):  # a full disk keeps no half checkpoint (one line, exit 2)
        save(path, zoo_name, model, spec, t, metrics, snaps)
    summary = {
        "name": zoo_name,
        "out": str(path),
        "task": task,
        "spec": spec.to_dict(),
        "seed": cfg.seed,
        "seconds": metrics["seconds"],
        "train": metrics["train"],
        "test": metrics["test"],
        "params": sum(p.numel() for p in model.parameters()),
        "command": command,
    }

    def human(r):
        c = result_console()
        score = ", ".join(f"{k} {v:.4f}" for k, v in r["test"].items())
        c.print(f"trained {r['name']} in {r['seconds']} s; test: {score}")
        c.print(f"saved to {r['out']}")

    emit(json.loads(json.dumps(summary)), as_json, human)


def _check_size(spec: Any, task: Any, settings: dict, allow_long: bool) -> None:
    """The model's training memory (weights, gradients and AdamW's two moments: 16 bytes a parameter) against
    this machine's free memory, and its time (6 flops a parameter and token, ~10 GFLOP/s on these 2 cores)
    against an hour unless --allow-long, before anything is allocated."""
    from core.options import check_long, check_memory

    d, d_mlp = spec.d_model, spec.d_mlp or 4 * spec.d_model
    ffn = 0 if spec.ffn == "none" else (spec.experts if spec.ffn.startswith("moe") else 1) * \
        (3 if "glu" in spec.ffn else 2) * d * d_mlp
    vocab = len(getattr(task, "vocab", None) or ()) or 1024
    params = spec.layers * (4 * d * d + ffn) + 2 * vocab * d + getattr(task, "n_ctx", 1024) * d
    what = f"training a {spec.layers}-layer model of width {d} ({params:,} parameters)"
    check_memory(what, 16 * params)
    tokens = (settings.get("batch_size") or 512) * getattr(task, "n_ctx", 16)
    check_long(f"{what} for {settings['steps']:,} steps", 6 * params * tokens * settings["steps"] / 1e10,
               allow_long)


def check_trained(model: Any, metrics: dict, hint: str) -> None:
    """NonFiniteError, before anything is written, when training diverged (NaN/Inf weights or metrics)."""
    from core.errors import NonFiniteError
    from core.options import first_non_finite

    bad = first_non_finite(dict(model.named_parameters()), "weights") or first_non_finite(metrics, "metrics")
    if bad:
        raise NonFiniteError(f"training diverged ({bad}); nothing saved: lower the learning rate ({hint})")


def _task_params(items: list[str]) -> dict:
    from core.checks import JSONTooDeep, loads_bounded
    from core.errors import WorkbenchError

    out = {}
    for item in items:
        if "=" not in item:
            raise WorkbenchError(f"--task-param {item!r}: use key=value")
        k, v = item.split("=", 1)
        try:
            out[k] = loads_bounded(v)  # depth-bounded, as every JSON read
        except JSONTooDeep as exc:
            raise WorkbenchError(f"--task-param {k}: the value is {exc}") from None
        except ValueError:
            out[k] = v
        if isinstance(out[k], list):
            out[k] = tuple(out[k])
    return out


def _command(task, path, name, d, spec, params) -> str:
    """The exact command that reproduces this checkpoint (every setting spelled out)."""
    parts = ["workbench", "train", task, "--out", str(path)]
    if name:
        parts += ["--name", name]
    for key in (
        "ffn",
        "layers",
        "heads",
        "d_model",
        "d_mlp",
        "norm",
        "act_fn",
        "steps",
        "lr",
        "weight_decay",
        "batch_size",
        "seed",
    ):
        if d.get(key) is not None:
            parts += [f"--{key.replace('_', '-')}", str(d[key])]
    if spec.ffn.startswith("moe"):
        parts += ["--experts", str(spec.experts), "--top-k", str(spec.top_k), "--router", spec.router]
    if spec.qk_norm:
        parts.append("--qk-norm")
    for k, v in params.items():
        parts += ["--task-param", f"{k}={json_compact(v)}"]
    return " ".join(parts)


def json_compact(v) -> str:
    import json

    return json.dumps(list(v) if isinstance(v, tuple) else v, separators=(",", ":"))
