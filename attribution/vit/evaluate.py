"""The localization benchmark: every method on the same images, every metric, one result.

    from attribution.vit.evaluate import evaluate
    res = evaluate(model, data.synthetic(200, data.TEST_SEED), ["dap", "rollout"])
    res.to_json(); res.markdown(); res.figures(); res.save()

Maps explain the true label; class sensitivity compares them with maps for the runner-up class
(the highest-scoring other class). seconds_per_image times the method alone on batches of
``batch_size``. The cost ratio divides a method's time by one forward + backward on the same
images (the minimum of ``repeats`` timings each, to damp noise from other processes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attribution.vit import metrics as M
from attribution.vit.data import ImageBatch
from attribution.vit.maps import PatchMap, overlay_figure
from attribution.vit.methods import explain, parse_methods, resolve_targets

METRICS = ("pointing_game", "energy_pointing_game", "mask_iou", "deletion_auc", "insertion_auc",
           "positive_perturbation_auc", "negative_perturbation_auc", "class_sensitivity", "seconds_per_image")
LOWER_IS_BETTER = {"deletion_auc", "positive_perturbation_auc", "class_sensitivity", "seconds_per_image"}


@dataclass
class ViTEvalResult:
    model: str
    dataset: str
    seed: int | None
    methods: dict[str, dict[str, float]]
    per_image: Any  # pandas DataFrame: method, image, one column per metric
    accuracy: float
    cost: dict[str, float] = field(default_factory=dict)
    maps: dict[str, PatchMap] = field(default_factory=dict)
    batch: ImageBatch | None = None
    params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "dataset": self.dataset, "seed": self.seed,
                "n": len(self.batch) if self.batch is not None else None, "accuracy": self.accuracy,
                "methods": self.methods, "cost": self.cost, "params": self.params}

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.methods).T.reindex(columns=list(METRICS)).rename_axis("method").reset_index()

    def markdown(self) -> str:
        df = self.table()
        head = "| method | " + " | ".join(METRICS) + " |"
        rule = "|---" * (len(METRICS) + 1) + "|"
        rows = ["| " + r["method"] + " | " + " | ".join(_fmt(r[m]) for m in METRICS) + " |"
                for _, r in df.iterrows()]
        return "\n".join([head, rule, *rows])

    def figures(self, n_images: int = 4) -> dict[str, Any]:
        import plotly.express as px

        figs = {}
        if self.batch is not None and self.maps:
            idx = list(range(min(n_images, len(self.batch))))
            figs["overlay"] = overlay_figure(self.batch.images, self.maps, idx, self.batch.masks)
        long = self.table().melt(id_vars="method", var_name="metric", value_name="value")
        long = long[long.metric != "seconds_per_image"]
        figs["metrics"] = px.bar(long, x="metric", y="value", color="method", barmode="group",
                                 title=f"{self.model} on {self.dataset}")
        return figs

    def save(self, store=None, args: dict[str, Any] | None = None):
        from workbench.store import RunDraft, RunStore

        tensors = {f"map_{k}": v.scores for k, v in self.maps.items()}
        if self.batch is not None:
            tensors.update({"images": self.batch.images, "labels": self.batch.labels,
                            "masks": self.batch.masks.to(torch.uint8)})
        draft = RunDraft(kind="vit-eval", model=self.model, method=",".join(self.methods), args=args or {},
                         timings={k: v["seconds_per_image"] for k, v in self.methods.items()},
                         result=self.to_json(), tensors=tensors,
                         tables={"methods": self.table(), "per_image": self.per_image},
                         figures=self.figures(), files={"table.md": self.markdown() + "\n"})
        return (store or RunStore()).save(draft)


def _fmt(v: float) -> str:
    return "nan" if v != v else f"{v:.4f}" if abs(v) < 1 else f"{v:.3f}"


def runner_up(model, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model(images)
    logits.scatter_(1, targets[:, None], float("-inf"))
    return logits.argmax(-1)


def forward_backward_seconds(model, images: torch.Tensor, targets: torch.Tensor) -> float:
    start = time.perf_counter()
    x = images.detach().clone().requires_grad_(True)
    score = model(x).gather(1, targets[:, None]).sum()
    torch.autograd.grad(score, x)
    return time.perf_counter() - start


def cost_ratio(model, images: torch.Tensor, targets: torch.Tensor, method: str = "dap", repeats: int = 5,
               **params: Any) -> dict[str, float]:
    """Seconds of `method` vs one forward + backward on the same images (min over repeats, interleaved)."""
    fb, me = [], []
    for _ in range(repeats):
        fb.append(forward_backward_seconds(model, images, targets))
        me.append(explain(model, images, method, targets, **params).seconds)
    return {f"{method}_seconds": min(me), "forward_backward_seconds": min(fb),
            f"{method}_over_forward_backward": min(me) / min(fb)}


def evaluate(model, batch: ImageBatch, methods: list[str] | str, model_name: str = "model",
             params: dict[str, dict[str, Any]] | None = None, batch_size: int = 50, seed: int | None = None,
             steps: int = M.FRACTIONS_STEPS, baseline: str = "zeros", keep_maps: bool = True,
             on_progress: Callable[[str, int], None] | None = None) -> ViTEvalResult:
    """Every metric for every method on ``batch`` (targets: the true labels)."""
    import pandas as pd

    names = parse_methods(methods)
    params = params or {}
    images = model.check_images(batch.images)
    targets = resolve_targets(model, images, batch.labels)
    other = runner_up(model, images, targets)
    with torch.no_grad():
        acc = float((model(images).argmax(-1) == targets).float().mean())
    frames, summary, maps = [], {}, {}
    for name in names:
        cols: dict[str, list[torch.Tensor]] = {}
        seconds, chunks = 0.0, []
        for lo in range(0, len(images), batch_size):
            sl = slice(lo, lo + batch_size)
            pm = explain(model, images[sl], name, targets[sl], **params.get(name, {}))
            pm2 = explain(model, images[sl], name, other[sl], **params.get(name, {}))
            seconds += pm.seconds
            chunks.append(pm)
            scores = {**M.localization_scores(pm.flat, batch.masks[sl], model.cfg.patch_size),
                      **M.perturbation_scores(model, images[sl], targets[sl], pm.flat.to(images.device),
                                              baseline, steps),
                      "class_sensitivity": M.class_sensitivity(pm.flat, pm2.flat)}
            for k, v in scores.items():
                cols.setdefault(k, []).append(v.float().cpu())
            if on_progress:
                on_progress(name, min(lo + batch_size, len(images)))
        frame = pd.DataFrame({k: torch.cat(v).numpy() for k, v in cols.items()})
        frame.insert(0, "image", range(len(frame)))
        frame.insert(0, "method", name)
        frames.append(frame)
        row = {k: float(frame[k].mean(skipna=True)) for k in cols}
        row["seconds_per_image"] = seconds / len(images)
        summary[name] = {k: row[k] for k in METRICS}
        if keep_maps:
            maps[name] = PatchMap(torch.cat([c.scores for c in chunks]), name, targets.cpu(),
                                  chunks[0].params,
                                  seconds, model.cfg.patch_size)
    per_image = pd.concat(frames, ignore_index=True)
    return ViTEvalResult(model_name, batch.dataset, seed, summary, per_image, acc,
                         maps=maps, batch=batch, params={n: maps[n].params for n in maps} if maps else {})


def image_metrics(model, batch: ImageBatch, maps: dict[str, PatchMap]) -> Any:
    """Per-image localization and perturbation metrics for maps already computed (the app's call)."""
    import pandas as pd

    images = model.check_images(batch.images)
    rows = []
    for name, pm in maps.items():
        s = {**M.localization_scores(pm.flat, batch.masks, model.cfg.patch_size),
             **M.perturbation_scores(model, images, pm.targets.to(images.device), pm.flat.to(images.device))}
        for i in range(len(batch)):
            rows.append({"method": name, "image": i, **{k: float(v[i]) for k, v in s.items()}})
    return pd.DataFrame(rows)
