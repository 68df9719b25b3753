"""The ``vit_eval`` job: the ViT localization benchmark (``workbench vit-eval``, the Vision page).

The work is (method, image batch) pairs, dealt round-robin over the shards so each worker gets a share of
every method (their costs differ a lot). A batch is what one process computes too, and the means are taken
over all images at the end (attribution.vit.evaluate.assemble), so every number but the times is the
single-process one. Each worker builds the images itself (they are generated from the seed) and scores
the classes over the whole set once, as one process does.

Spec: workbench/scheduler/specs.py VitEvalSpec (``head``: dinov2-small's linear heads; ``steps``: deletion /
insertion steps). The job and its run are both kind ``vit_eval`` (runs saved as ``vit-eval`` before still list
and open). The 32 px sets are shown to a model with a larger input upsampled (nearest; DINOv2: 224 px).
"""

from __future__ import annotations

from typing import Any

from workbench.scheduler.kinds import worker_model


def units(spec: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Every (method, lo, hi) the job computes, in the single-process order."""
    from attribution.vit.evaluate import batches

    return [(name, lo, hi) for name in spec["methods"]
            for lo, hi in batches(int(spec["n"]), int(spec.get("batch_size", 50)))]


def model_for(spec: dict[str, Any]) -> Any:
    """The spec's model with its head (``"head"``: DINOv2's linear heads; the backbone is loaded once)."""
    vit = worker_model(spec)
    if spec.get("head"):
        from core.models.dinov2 import with_head

        vit = with_head(vit, spec["head"])
    return vit


def check_fits(vit: Any, batch: Any, model: str, dataset: str) -> None:
    from core.errors import WorkbenchError

    if vit.cfg.n_classes != len(batch.class_names) or vit.cfg.image_size != batch.images.shape[-1]:
        raise WorkbenchError(f"model {model!r} ({vit.cfg.n_classes} classes, {vit.cfg.image_size}px) does not "
                             f"fit the {dataset} set ({len(batch.class_names)} classes, "
                             f"{batch.images.shape[-1]}px)")


class VitEvalJob:
    def label(self, spec: dict[str, Any]) -> str:
        return f"vit-eval {','.join(spec['methods'])} · {spec['n']} {spec.get('dataset', 'synthetic')} images · " \
               f"{spec['model']}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[list[tuple[str, int, int]]]:
        todo = units(spec)
        pieces = max(1, min(workers, len(todo)))
        return [todo[i::pieces] for i in range(pieces)]

    def items(self, spec: dict[str, Any]) -> int:
        return int(spec["n"]) * len(spec["methods"])

    def cost_key(self, spec: dict[str, Any]) -> str:
        return "|".join(map(str, (spec["model"], ",".join(sorted(spec["methods"])), spec.get("dataset", "synthetic"),
                                  spec.get("batch_size", 50))))

    def run_shard(self, spec: dict[str, Any], shard: list[tuple[str, int, int]], report: Any) -> dict[str, Any]:
        from attribution.vit import data
        from attribution.vit.evaluate import cost_ratio, prepare, score_chunk

        vit = model_for(spec)
        dataset = spec.get("dataset", "synthetic")
        batch = data.at_size(data.sample_images(dataset, int(spec["n"]), int(spec.get("seed", 2))),
                             vit.cfg.image_size)
        check_fits(vit, batch, spec["model"], dataset)
        report.total(sum(hi - lo for _, lo, hi in shard))
        prep = prepare(vit, batch)
        chunks = {}
        steps = int(spec.get("steps", 20))
        for name, lo, hi in shard:
            chunks[(name, lo)] = score_chunk(vit, prep, batch.masks, name, lo, hi, steps=steps)
            report.step(hi - lo)
        cost = None
        if ("dap", 0) in chunks:  # DAP's cost against one forward + backward, on its first batch
            k = min(int(spec.get("batch_size", 50)), int(spec["n"]))
            cost = cost_ratio(vit, batch.images[:k], batch.labels[:k], "dap")
        return {"chunks": chunks, "accuracy": prep.accuracy, "cost": cost, "image_size": vit.cfg.image_size}

    def finish(self, spec: dict[str, Any], parts: list[dict[str, Any]]) -> Any:
        from attribution.vit import data
        from attribution.vit.evaluate import assemble

        chunks = {key: c for part in parts for key, c in part["chunks"].items()}
        ordered: dict[str, list[Any]] = {}
        for name, lo, _ in units(spec):
            ordered.setdefault(name, []).append(chunks[(name, lo)])
        batch = data.sample_images(spec.get("dataset", "synthetic"), int(spec["n"]), int(spec.get("seed", 2)))
        size = parts[0].get("image_size")
        if size:
            batch = data.at_size(batch, int(size))
        result = assemble(spec["model"], batch, int(spec.get("seed", 2)), ordered, parts[0]["accuracy"])
        result.cost = next((p["cost"] for p in parts if p["cost"]), None) or {}
        result.args = {"model": spec["model"], "methods": list(spec["methods"]), "n": int(spec["n"]),
                       "seed": int(spec.get("seed", 2)), "dataset": spec.get("dataset", "synthetic")}
        for key in ("head", "steps"):
            if key in spec:
                result.args[key] = spec[key]
        if spec.get("head"):
            result.model = f"{spec['model']} ({spec['head']} head)"
        return result
