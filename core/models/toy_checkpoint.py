"""Shipped checkpoints: ``data/models/<name>/`` with config.json (a ``workbench`` section for the
zoo plus the model spec and task), model.safetensors, metrics.json and snapshots.safetensors
(fp16 attention weights along training). ``load(entry)`` returns a workbench HookedModel with its task
(core.models.toy_tasks); ``save`` writes one (``workbench train``). Here in the ground, so the zoo's loader
table names nothing above core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.checks import Fields
from core.errors import ModelFileError
from core.models.files import check_safetensors
from core.models.toy import ModelSpec, build_model, hooked
from core.models.toy_tasks import get_task

LOADER = "core.models.toy_checkpoint:load"


def save(
    out: str | Path,
    name: str,
    tl: Any,
    spec: Any,
    task: Any,
    metrics: dict[str, Any],
    snaps: dict[int, dict] | None = None,
    description: str = "",
    source: str | None = None,
) -> Path:
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().contiguous() for k, v in tl.state_dict().items() if not k.endswith(("IGNORE", ".mask"))
    }  # causal masks are rebuilt on load
    n_params = sum(p.numel() for p in tl.parameters())
    config = {
        "workbench": {
            "name": name,
            "kind": "toy",
            "params": n_params,
            "loader": LOADER,
            "source": source or f"data/models/{name} (workbench train)",
            "description": description or _describe(spec, task, metrics),
        },
        "model": spec.to_dict(),
        "task": task.info() | {"name": task.name},
        "vocab": task.vocab,
        "n_ctx": task.n_ctx,
    }
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    if snaps:
        flat = {f"step{step}.{k}": v for step, st in snaps.items() for k, v in st.items()}
        save_file(flat, str(out / "snapshots.safetensors"), metadata={"steps": json.dumps(sorted(snaps))})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    return out


def _describe(spec: Any, task: Any, metrics: dict[str, Any]) -> str:
    score = (
        f"test acc {metrics['test_accuracy']:.3f}"
        if "test_accuracy" in metrics
        else f"test loss {metrics.get('test_loss', float('nan')):.4f}"
    )
    extra = (
        f", {spec.experts} experts top-{spec.top_k} {spec.router} router"
        if spec.ffn.startswith("moe")
        else ""
    )
    return (
        f"{task.name}: {spec.layers}L {spec.heads}H d{spec.d_model} ffn={spec.ffn}{extra}, "
        f"norm={spec.norm}; {score}"
    )


def read_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    cfg = path / "config.json"
    if not cfg.exists():
        raise ModelFileError(f"{str(path)!r} has no config.json: not a toy checkpoint")
    try:
        return json.loads(cfg.read_text())
    except ValueError as exc:
        raise ModelFileError(f"cannot read {cfg}: {exc}") from None


# A toy checkpoint's sizes come from its config.json: beyond these they are damage, refused before allocating.
MAX_LAYERS, MAX_HEADS, MAX_WIDTH = 256, 256, 1 << 16


def check_model_config(config: Any, where: Path) -> None:
    """The model and task sections of a toy checkpoint's config.json, typed and bounded (core/checks.py):
    ModelFileError (one line) before anything is built from them."""
    f = Fields(config, str(where), ModelFileError)
    model, task = f.fields("model"), f.fields("task")
    task.text("name")
    task.mapping("params", {})
    for key in ("task", "ffn", "norm", "act_fn", "router"):
        model.text(key, None)
    model.integer("layers", None, lo=1, hi=MAX_LAYERS)
    model.integer("heads", None, lo=1, hi=MAX_HEADS)
    model.integer("d_model", None, lo=1, hi=MAX_WIDTH)
    model.integer("d_mlp", None, lo=1, hi=MAX_WIDTH)
    model.integer("experts", None, lo=1, hi=MAX_HEADS)
    model.integer("top_k", None, lo=1, hi=MAX_HEADS)
    model.flag("qk_norm", None)
    model.number("init_range", None, lo=0)
    model.mapping("task_params", {})


def load_tl(path: str | Path, device: str = "cpu"):
    """(HookedTransformer, ModelSpec, task) from a checkpoint directory."""
    path = Path(path)
    config = read_config(path)
    weights = path / "model.safetensors"
    if not weights.exists():
        raise ModelFileError(f"{str(path)!r} has no model.safetensors")
    check_model_config(config, path / "config.json")
    try:
        spec = ModelSpec.from_dict(config["model"])
        task = get_task(config["task"]["name"], **config["task"].get("params", {}))
    except KeyError as exc:
        raise ModelFileError(f"{path / 'config.json'} lacks {exc}") from None
    except TypeError as exc:  # a task parameter it does not take
        raise ModelFileError(f"{path / 'config.json'} is damaged: {str(exc).splitlines()[0]}") from None

    check_safetensors(weights)
    from safetensors.torch import load_file

    tl = build_model(spec, task)
    state = load_file(str(weights))
    missing, unexpected = tl.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(("IGNORE", ".mask"))]
    if missing or unexpected:
        raise ModelFileError(
            f"{weights} does not match its config: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    tl.to(device, print_details=False).eval()
    for p in tl.parameters():
        p.requires_grad_(False)
    return tl, spec, task


def load(entry: Any, device: str = "cpu", **kwargs: Any):
    """Zoo loader: a toy checkpoint as a HookedModel (kind "toy")."""
    path = Path(entry.path if hasattr(entry, "path") else entry)
    tl, spec, task = load_tl(path, device)
    config = read_config(path)
    name = getattr(entry, "name", None) or config["workbench"].get("name", path.name)
    model = hooked(tl, spec, task, name=name)
    model.info.update(path=str(path), metrics_file=str(path / "metrics.json"))
    return model


def snapshots(path: str | Path) -> dict[int, dict[str, Any]]:
    """{step: {param name: tensor}} from snapshots.safetensors (empty if none)."""
    from safetensors.torch import load_file

    file = Path(path) / "snapshots.safetensors"
    if not file.exists():
        return {}
    out: dict[int, dict[str, Any]] = {}
    for key, value in load_file(str(file)).items():
        step, name = key.split(".", 1)
        out.setdefault(int(step[4:]), {})[name] = value.float()
    return dict(sorted(out.items()))
