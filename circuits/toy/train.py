"""Training loop for the toy models (CPU, minutes), with evaluation and periodic snapshots."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import WorkbenchError
from core.models.toy import ModelSpec, build_model, check_spec
from core.models.toy_tasks import Batch, Task, get_task


@dataclass
class TrainConfig:
    steps: int = 2000
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 0  # 0: the full train split every step (finite tasks)
    seed: int = 0
    eval_every: int = 100
    n_snapshots: int = 6  # attention weights kept along training (fp16) for the dynamics views
    threads: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


def task_loss(tl: Any, batch: Batch, task: Task, fwd_hooks=()):
    """(loss, logits) on the masked positions: cross-entropy, or MSE for regression."""
    import torch.nn.functional as F

    logits = tl.run_with_hooks(batch.tokens, fwd_hooks=list(fwd_hooks)) if fwd_hooks else tl(batch.tokens)
    if task.kind == "regression":
        pred = logits[..., 0]
        return F.mse_loss(pred[batch.mask], batch.targets[batch.mask]), logits
    return F.cross_entropy(logits[batch.mask], batch.targets[batch.mask]), logits


def evaluate(tl: Any, batch: Batch, task: Task, fwd_hooks=()) -> dict[str, float]:
    """loss, accuracy (every scored position of a sample right) and token_accuracy."""
    import torch

    with torch.no_grad():
        loss, logits = task_loss(tl, batch, task, fwd_hooks)
    out = {"loss": float(loss)}
    if task.kind == "regression":
        out["baseline_loss"] = float((batch.targets[batch.mask] ** 2).mean())  # predicting 0
        return out
    right = (logits.argmax(-1) == batch.targets) | ~batch.mask
    out["accuracy"] = float(right.all(-1).float().mean())
    out["token_accuracy"] = float(right[batch.mask].float().mean())
    if "optimal_loss" in batch.meta:
        out["optimal_loss"] = batch.meta["optimal_loss"]
    return out


def snapshot(tl: Any) -> dict[str, Any]:
    """The attention (and unembedding) weights at this step, fp16, for spectra over training."""
    keep = {}
    for name, p in tl.state_dict().items():
        if any(k in name for k in ("W_Q", "W_K", "W_V", "W_O", "W_E", "W_U")) and "IGNORE" not in name:
            keep[name] = p.detach().to("cpu").half().clone()
    return keep


def train(
    task: Task, spec: ModelSpec, cfg: TrainConfig, on_step: Callable[[int, int, float], None] | None = None
) -> tuple[Any, dict[str, Any], dict]:
    """Train ``spec`` on ``task``. Returns (model, metrics, snapshots {step: state})."""
    import torch

    check_spec(spec)
    if cfg.steps < 1:
        raise WorkbenchError("steps must be at least 1")
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    tl = build_model(spec, task, seed=cfg.seed)
    params = [p for p in tl.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    warmup = max(1, cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps)),
    )
    test = task.batch("test", None if cfg.batch_size == 0 else 1000, seed=cfg.seed)
    full = task.batch("train", None, seed=cfg.seed) if cfg.batch_size == 0 else None
    snap_steps = sorted(
        {0, cfg.steps}
        | {int(round(cfg.steps * f)) for f in (0.02, 0.05, 0.1, 0.25, 0.5)[: max(0, cfg.n_snapshots - 2)]}
    )
    snaps: dict[int, dict] = {}
    curve: list[dict[str, float]] = []
    dynamics: list[dict[str, Any]] = []
    started = time.time()
    for step in range(cfg.steps + 1):
        if step in snap_steps:
            snaps[step] = snapshot(tl)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            tl.eval()
            ev = evaluate(tl, test, task)
            row = {"step": step, "test_loss": ev["loss"]}
            if "accuracy" in ev:
                row["test_accuracy"] = ev["accuracy"]
            if curve and "train_loss" in curve[-1]:
                pass
            curve.append(row)
            if hasattr(task, "dynamics"):
                dynamics.append({"step": step, **task.dynamics(tl)})
            tl.train()
        if step == cfg.steps:
            break
        batch = (
            full if full is not None else task.batch("train", cfg.batch_size, seed=cfg.seed * 100003 + step)
        )
        loss, _ = task_loss(tl, batch, task)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % cfg.eval_every == 0:
            curve[-1]["train_loss"] = float(loss.detach())
        if on_step:
            on_step(step + 1, cfg.steps, float(loss.detach()))
    seconds = time.time() - started
    tl.eval()
    train_eval = evaluate(
        tl, full if full is not None else task.batch("train", 1000, seed=cfg.seed + 1), task
    )
    test_eval = evaluate(tl, test, task)
    metrics: dict[str, Any] = {
        "task": task.name,
        "seed": cfg.seed,
        "steps": cfg.steps,
        "seconds": round(seconds, 1),
        "train": train_eval,
        "test": test_eval,
        "loss_curve": curve,
        "train_config": {k: v for k, v in cfg.__dict__.items() if k != "extra"},
        "snapshot_steps": sorted(snaps),
    }
    for split, ev in (("train", train_eval), ("test", test_eval)):
        for k in ("accuracy", "loss"):
            if k in ev:
                metrics[f"{split}_{k}"] = ev[k]
    if dynamics:
        metrics["dynamics"] = dynamics
    for p in tl.parameters():
        p.requires_grad_(False)
    return tl, metrics, snaps


def make_task(name: str, **params: Any) -> Task:
    return get_task(name, **params)
