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
from core.store import RunDraft, RunStore

METRICS = ("pointing_game", "energy_pointing_game", "mask_iou", "deletion_auc", "insertion_auc",
           "positive_perturbation_auc", "negative_perturbation_auc", "class_sensitivity", "seconds_per_image")
KEEP_LARGE_IMAGES = 8
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
    args: dict[str, Any] = field(default_factory=dict)  # what the run records as its args (save's default)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "dataset": self.dataset, "seed": self.seed,
                "n": len(self.batch) if self.batch is not None else None, "accuracy": self.accuracy,
                "methods": self.methods, "cost": self.cost, "params": self.params}

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.methods).T.reindex(columns=list(METRICS)).rename_axis("method").reset_index()

    def markdown(self) -> str:
        return metrics_markdown({r["method"]: r for _, r in self.table().iterrows()})

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
        tensors = {f"map_{k}": v.scores for k, v in self.maps.items()}
        if self.batch is not None:
            # Large inputs (DINOv2's 224 px: 0.6 MB an image) keep only the first images; every image is a pure
            # function of (dataset, seed, index), so the set itself is rebuilt from the run's args.
            keep = len(self.batch) if self.batch.images[0].numel() <= 3 * 64 * 64 else KEEP_LARGE_IMAGES
            tensors.update({"images": self.batch.images[:keep], "labels": self.batch.labels,
                            "masks": self.batch.masks[:keep].to(torch.uint8)})
        draft = RunDraft(kind="vit_eval", model=self.model, method=",".join(self.methods),
                         args=args if args is not None else self.args,
                         timings={k: v["seconds_per_image"] for k, v in self.methods.items()},
                         result=self.to_json(), tensors=tensors,
                         tables={"methods": self.table(), "per_image": self.per_image},
                         figures=self.figures(), files={"table.md": self.markdown() + "\n"})
        return (store or RunStore()).save(draft)


def metrics_markdown(rows: dict[str, Any]) -> str:
    """A markdown table: one line per method, one column per metric of METRICS (NaN written as nan)."""

    def cell(v: float) -> str:
        return "nan" if v != v else f"{v:.4f}" if abs(v) < 1 else f"{v:.3f}"

    head = "| method | " + " | ".join(METRICS) + " |"
    rule = "|---" * (len(METRICS) + 1) + "|"
    lines = ["| " + method + " | " + " | ".join(cell(row[m]) for m in METRICS) + " |" for method, row in rows.items()]
    return "\n".join([head, rule, *lines])


def runner_up(model, images: M.Images, targets: M.Targets) -> M.Targets:
    with torch.no_grad():
        logits = model(images)
    logits.scatter_(1, targets[:, None], float("-inf"))
    return logits.argmax(-1)


def forward_backward_seconds(model, images: M.Images, targets: M.Targets) -> float:
    start = time.perf_counter()
    x = images.detach().clone().requires_grad_(True)
    score = model(x).gather(1, targets[:, None]).sum()
    torch.autograd.grad(score, x)
    return time.perf_counter() - start


def cost_ratio(model, images: M.Images, targets: M.Targets, method: str = "dap",
               repeats: int = 5, **params: Any) -> dict[str, float]:
    """Seconds of `method` vs one forward + backward on the same images (min over repeats, interleaved)."""
    fb, me = [], []
    for _ in range(repeats):
        fb.append(forward_backward_seconds(model, images, targets))
        me.append(explain(model, images, method, targets, **params).seconds)
    return {f"{method}_seconds": min(me), "forward_backward_seconds": min(fb),
            f"{method}_over_forward_backward": min(me) / min(fb)}


@dataclass
class Prepared:
    """What every method's scoring shares: the checked images, the classes explained (the true labels), the
    runner-up classes (class sensitivity) and the model's accuracy, all over the whole image set; and the
    logits of the clean and the baseline images, the two ends every deletion / insertion curve shares."""

    images: M.Images
    targets: M.Targets
    other: M.Targets
    accuracy: float
    logits: M.Logits | None = None
    base_logits: dict[str, M.Logits] = field(default_factory=dict)

    def ends(self, model, baseline: str, lo: int, hi: int) -> tuple[M.Logits, M.Logits] | None:
        """(clean, baseline) logits of images [lo, hi), the baseline's run once over the whole set."""
        if self.logits is None:
            return None
        if baseline not in self.base_logits:
            base = (torch.zeros_like(self.images) if baseline == "zeros" else M.blur(self.images))
            with torch.no_grad():
                self.base_logits[baseline] = torch.cat([model(base[i:i + 64]) for i in range(0, len(base), 64)])
        return self.logits[lo:hi], self.base_logits[baseline][lo:hi]


@dataclass
class Chunk:
    """One method on one batch of images: per-image metric columns and its maps."""

    cols: dict[str, M.PerImage]
    map: PatchMap


def prepare(model, batch: ImageBatch) -> Prepared:
    images = model.check_images(batch.images)
    targets = resolve_targets(model, images, batch.labels)
    with torch.no_grad():
        logits = torch.cat([model(images[i:i + 64]) for i in range(0, len(images), 64)])
    acc = float((logits.argmax(-1) == targets).float().mean())
    other = logits.scatter(1, targets[:, None], float("-inf")).argmax(-1)  # the runner-up class
    return Prepared(images, targets, other, acc, logits)


def score_chunk(model, prep: Prepared, masks: M.Masks, name: str, lo: int, hi: int,
                params: dict[str, Any] | None = None, steps: int = M.FRACTIONS_STEPS,
                baseline: str = "zeros") -> Chunk:
    """Every metric of method ``name`` on images [lo, hi): a batch is the unit that evaluates the same
    wherever it runs (a job shards the (method, batch) pairs over workers)."""
    params = params or {}
    images, targets = prep.images[lo:hi], prep.targets[lo:hi]
    pm = explain(model, images, name, targets, **params)
    pm2 = explain(model, images, name, prep.other[lo:hi], **params)
    scores = {**M.localization_scores(pm.flat, masks[lo:hi], model.cfg.patch_size),
              **M.perturbation_scores(model, images, targets, pm.flat.to(images.device), baseline, steps,
                                      ends=prep.ends(model, baseline, lo, hi)),
              "class_sensitivity": M.class_sensitivity(pm.flat, pm2.flat)}
    return Chunk({k: v.float().cpu() for k, v in scores.items()}, pm)


def batches(n: int, batch_size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + batch_size, n)) for lo in range(0, n, batch_size)]


def assemble(model_name: str, batch: ImageBatch, seed: int | None, chunks: dict[str, list[Chunk]],
             accuracy: float, keep_maps: bool = True) -> ViTEvalResult:
    """The result from every method's chunks (each list in image order); the means are taken here, over
    all images at once, so sharded and single-process runs give the same numbers."""
    import pandas as pd

    frames, summary, maps = [], {}, {}
    n = len(batch)
    for name, parts in chunks.items():
        cols = {k: torch.cat([c.cols[k] for c in parts]) for k in parts[0].cols}
        frame = pd.DataFrame({k: v.numpy() for k, v in cols.items()})
        frame.insert(0, "image", range(len(frame)))
        frame.insert(0, "method", name)
        frames.append(frame)
        row = {k: float(frame[k].mean(skipna=True)) for k in cols}
        seconds = sum(c.map.seconds for c in parts)
        row["seconds_per_image"] = seconds / n
        summary[name] = {k: row[k] for k in METRICS}
        if keep_maps:
            first = parts[0].map
            maps[name] = PatchMap(torch.cat([c.map.scores for c in parts]), name,
                                  torch.cat([c.map.targets.cpu() for c in parts]), first.params, seconds,
                                  first.patch_size)
    per_image = pd.concat(frames, ignore_index=True)
    return ViTEvalResult(model_name, batch.dataset, seed, summary, per_image, accuracy,
                         maps=maps, batch=batch, params={n: maps[n].params for n in maps} if maps else {})


def evaluate(model, batch: ImageBatch, methods: list[str] | str, model_name: str = "model",
             params: dict[str, dict[str, Any]] | None = None, batch_size: int = 50, seed: int | None = None,
             steps: int = M.FRACTIONS_STEPS, baseline: str = "zeros", keep_maps: bool = True,
             on_progress: Callable[[str, int], None] | None = None) -> ViTEvalResult:
    """Every metric for every method on ``batch`` (targets: the true labels)."""
    names = parse_methods(methods)
    params = params or {}
    prep = prepare(model, batch)
    chunks: dict[str, list[Chunk]] = {}
    for name in names:
        for lo, hi in batches(len(prep.images), batch_size):
            chunks.setdefault(name, []).append(score_chunk(model, prep, batch.masks, name, lo, hi,
                                                           params.get(name), steps, baseline))
            if on_progress:
                on_progress(name, hi)
    return assemble(model_name, batch, seed, chunks, prep.accuracy, keep_maps)


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
