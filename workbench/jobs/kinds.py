"""Job kinds: what a job's spec (a dict with a ``kind`` key) means, how it splits into shards, what one
shard runs and how the parts become one result (that saves itself as a run).

A kind is an object with:

- ``label(spec) -> str``: one line for the Jobs page and ``jobs list``;
- ``shards(spec, workers) -> list``: small picklable descriptions of the pieces (at most ``workers``);
- ``run_shard(spec, shard, report) -> part``: the engine call on one piece, in a worker (or here), with
  ``report.total(n)`` and ``report.step(n)`` as its progress callback; the engine does not know it is a job;
- ``finish(spec, parts) -> result``: in the driver; the result has ``save(store) -> Run``.

Engines are imported inside these functions, so ``workbench`` stays light at import time.
"""

from __future__ import annotations

from typing import Any

from workbench.jobs.board import JobError

_MODELS: dict[tuple[str, str], Any] = {}


def worker_model(spec: dict[str, Any]) -> Any:
    """The spec's model, loaded once per process (a Ray worker keeps it for its later shards)."""
    key = (spec["model"], spec.get("device", "cpu"))
    if key not in _MODELS:
        import torch

        from workbench.zoo import load

        if spec.get("threads"):
            torch.set_num_threads(int(spec["threads"]))
        _MODELS.clear()  # one model per worker: memory is the limit here
        _MODELS[key] = load(key[0], device=key[1])
    return _MODELS[key]


def split(n: int, pieces: int, unit: int = 1) -> list[tuple[int, int]]:
    """[start, stop) ranges covering 0..n in at most ``pieces`` contiguous chunks of whole ``unit``s (a
    batch is never split, so each batch, and so each number, is what one process computes)."""
    units = -(-n // unit)
    pieces = max(1, min(pieces, units))
    bounds = [round(k * units / pieces) * unit for k in range(pieces + 1)]
    return [(a, min(b, n)) for a, b in zip(bounds, bounds[1:], strict=False) if a < min(b, n)]


class FaithfulnessJob:
    """``workbench faithfulness``: examples sharded; parts combined in example order."""

    def label(self, spec: dict[str, Any]) -> str:
        return (f"faithfulness {','.join(spec['methods'])} · {spec['level']} · {len(spec['rows'])} prompts · "
                f"{spec['model']}")

    def shards(self, spec: dict[str, Any], workers: int) -> list[list[int]]:
        return [list(range(a, b)) for a, b in split(len(spec["rows"]), workers)]

    def run_shard(self, spec: dict[str, Any], shard: list[int], report: Any) -> Any:
        from attribution.faithfulness import evaluate_part
        from workbench.prompt_files import encode_rows

        model = worker_model(spec)
        encode_rows(model, spec["rows"], spec.get("use_foil", True), source=spec.get("prompts_file"))
        report.total(len(shard))
        return model.name, evaluate_part(model, spec["rows"], spec["methods"], shard,
                                         on_step=lambda: report.step(1), **_faith_args(spec),
                                         batch_size=spec.get("batch_size", 32))

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        from attribution.faithfulness import combine

        args = {k: v for k, v in _faith_args(spec).items() if k != "grid"}  # the parts carry the grid
        result = combine(parts[0][0], spec["rows"], spec["methods"], [p for _, p in parts], **args)
        result.args.update(prompts=spec.get("prompts_file"), limit=spec.get("limit"))
        return result


def _faith_args(spec: dict[str, Any]) -> dict[str, Any]:
    return {"level": spec.get("level", "token"), "ablation": spec.get("ablation", "zero"),
            "use_foil": spec.get("use_foil", True), "params": spec.get("params") or {},
            "rank": spec.get("rank", "signed"), "grid": spec.get("grid")}


class AttributeSetJob:
    """``workbench attribute-set``: prompts sharded at batch boundaries; results concatenated in order."""

    def label(self, spec: dict[str, Any]) -> str:
        return f"attribute-set {spec['method']} · {spec['level']} · {len(spec['rows'])} prompts · {spec['model']}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[tuple[int, int]]:
        from attribution.methods import canonical

        unit = int(spec.get("batch_size", 16)) if canonical(spec["method"]) == "dpa" else 1
        return split(len(spec["rows"]), workers, unit)

    def run_shard(self, spec: dict[str, Any], shard: tuple[int, int], report: Any) -> Any:
        from attribution.prompt_set import attribute_set
        from workbench.prompt_files import encode_rows

        model = worker_model(spec)
        rows = spec["rows"]
        encode_rows(model, rows, spec.get("use_foil", True), source=spec.get("prompts_file"))
        a, b = shard
        report.total(b - a)
        return attribute_set(model, rows[a:b], method=spec["method"], level=spec["level"],
                             use_foil=spec.get("use_foil", True), batch_size=spec.get("batch_size", 16),
                             on_step=report.step, **(spec.get("params") or {}))

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        from dataclasses import replace

        results = [r for p in parts for r in p.results]
        return replace(parts[0], results=results, seconds=sum(p.seconds for p in parts))


class AttributeJob:
    """One method at one level on one prompt (the app's slow methods, activation patching above all)."""

    def label(self, spec: dict[str, Any]) -> str:
        return f"{spec['method']} · {spec['level']} · {spec['model']} · {spec['prompt'][:40]!r}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[int]:
        return [0]

    def run_shard(self, spec: dict[str, Any], shard: int, report: Any) -> Any:
        import functools
        import inspect
        import math

        from attribution import encode_at, get_method, run_encoded

        model = worker_model(spec)
        method, fn = get_method(spec["method"], spec["level"])
        enc = encode_at(model, spec["prompt"], spec.get("target"), spec.get("foil"), spec.get("position"))
        params = dict(spec.get("params") or {})
        if "on_step" in inspect.signature(fn).parameters:  # the method reports per item (activation patching)
            from attribution.baselines.patching import item_shape

            shape = item_shape(model, enc.seq_len, spec["level"], params.get("per_position", False))
            report.total(math.prod(shape))
            fn = functools.partial(fn, on_step=report.step)
            return run_encoded(model, method.name, fn, enc, spec["level"], params, spec["prompt"])
        report.total(1)
        result = run_encoded(model, method.name, fn, enc, spec["level"], params, spec["prompt"])
        report.step(1)
        return result

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        return parts[0]


class SleepJob:
    """A job that only waits (``seconds`` over ``steps`` steps, in ``shards`` pieces) and returns a note:
    for tests of the runner and the Jobs page, with no model."""

    def label(self, spec: dict[str, Any]) -> str:
        return f"sleep {spec.get('seconds', 1)} s"

    def shards(self, spec: dict[str, Any], workers: int) -> list[tuple[int, int]]:
        return split(int(spec.get("steps", 10)), workers)

    def run_shard(self, spec: dict[str, Any], shard: tuple[int, int], report: Any) -> Any:
        import os
        import time

        if spec.get("fail"):
            raise JobError(str(spec["fail"]))
        a, b = shard
        report.total(b - a)
        pause = float(spec.get("seconds", 1)) / max(1, int(spec.get("steps", 10)))
        for _ in range(a, b):
            time.sleep(pause)
            report.step(1)
        return {"pid": os.getpid(), "steps": list(range(a, b))}

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        return _Note(spec, [s for p in parts for s in p["steps"]], sorted({p["pid"] for p in parts}))


class _Note:
    def __init__(self, spec: dict[str, Any], steps: list[int], pids: list[int]) -> None:
        self.spec, self.steps, self.pids = spec, steps, pids

    def save(self, store: Any) -> Any:
        from workbench.store import RunDraft

        return store.save(RunDraft(kind="sleep", args={k: v for k, v in self.spec.items() if k != "kind"},
                                   result={"steps": len(self.steps), "workers": len(self.pids)}))


KINDS: dict[str, Any] = {"faithfulness": FaithfulnessJob(), "attribute_set": AttributeSetJob(),
                         "attribute": AttributeJob(), "sleep": SleepJob()}


def get_kind(name: str) -> Any:
    if name not in KINDS:
        raise JobError(f"unknown job kind {name!r}; kinds: {', '.join(KINDS)}")
    return KINDS[name]
