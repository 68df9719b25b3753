"""Job kinds: what a job's spec (workbench/scheduler/specs.py; the code here reads its ``to_dict()``) means, how
it splits into shards, what one shard runs and how the parts become one result (that saves itself as a run).

A kind is an object with:

- ``label(spec) -> str``: one line for the Jobs page and ``jobs list``;
- ``shards(spec, workers) -> list``: small picklable descriptions of the pieces (at most ``workers``);
- ``run_shard(spec, shard, report) -> part``: the engine call on one piece, in a worker (or here), with
  ``report.total(n)`` and ``report.step(n)`` as its progress callback; the engine does not know it is a job;
- ``finish(spec, parts) -> result``: in the driver; the result has ``save(store) -> Run``;
- for its cost estimate: ``items(spec) -> int`` (the items its progress counts) and ``cost_key(spec) -> str``
  (what one item's cost depends on: model, method, level, prompt length...); every finished job records its
  measured seconds per item under that key (workbench/scheduler/costs.py), and the next job of the same key is
  estimated from it. Optionally ``measure(spec) -> float | None``: seconds per item measured now (a kind
  whose first run must not go unannounced, e.g. activation patching). The CLI prints the estimate before it
  starts; the app asks for confirmation above 3 s (app/jobs_view.py). Optionally ``prior(spec) -> float |
  None``: seconds per item known without measuring (the sleep kind). Where a job runs follows from its
  estimate: under workbench/scheduler/runner.py's LOCAL_S it runs in the caller's process.

A kind is registered once: its spec class in workbench/scheduler/specs.py (SPECS), whose ``JOB`` names this code
("module:Class", imported on first use).

Engines are imported inside these functions, so ``workbench`` stays light at import time.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from workbench.scheduler.board import jobs_root
from workbench.scheduler.errors import JobError
from workbench.scheduler.specs import ALIASES, SPECS, as_dict

_MODELS: dict[tuple[str, str, str | None, str], Any] = {}
_LENT = threading.local()  # models a caller lends to the job running in this thread: {name: (model, lock)}


@contextlib.contextmanager
def lend(models: dict[str, tuple[Any, Any]] | None):
    """For the block, ``worker_model`` in this thread returns the caller's own loaded models (the app
    server's, shared by its sessions) instead of loading a copy; each is used under its lock."""
    before = getattr(_LENT, "models", None)
    _LENT.models = dict(models or {})
    try:
        yield
    finally:
        _LENT.models = before


def model_lock(spec: dict[str, Any]) -> Any:
    """The lock of the model lent for ``spec`` (the app's: hooks are attached to shared modules, so one
    hooked forward at a time), else a no-op context."""
    lent = (getattr(_LENT, "models", None) or {}).get(str(spec.get("model")))
    return lent[1] if lent is not None and lent[1] is not None else contextlib.nullcontext()


def worker_model(spec: dict[str, Any]) -> Any:
    """The spec's model: one lent by the caller (see ``lend``), else loaded once per process (a Ray worker
    keeps it for its later shards)."""
    backend = spec.get("backend") or "transformer_lens"  # specs without the field (most kinds, old records): TL
    lent = (getattr(_LENT, "models", None) or {}).get(str(spec["model"]))
    if lent is not None and getattr(lent[0], "backend", "transformer_lens") == backend:
        return lent[0]
    key = (spec["model"], spec.get("device", "cpu"), spec.get("dtype"), backend)
    if key not in _MODELS:
        import torch

        from core.models.zoo import load

        if spec.get("threads"):
            torch.set_num_threads(int(spec["threads"]))
        _MODELS.clear()  # one model per worker: memory is the limit here
        extra = {} if backend == "transformer_lens" else {"backend": backend}
        _MODELS[key] = load(key[0], device=key[1], dtype=key[2], **extra)
    return _MODELS[key]


def release_models() -> None:
    """Let go of the models this process holds for jobs (workers elsewhere will load their own copies)."""
    _MODELS.clear()


def shard_resources(kind: Any, spec: dict[str, Any]) -> dict[str, float]:
    """What one shard declares to Ray's scheduler, so a cluster places it on a node that has it (and queues
    it where none is free): the kind's ``resources(spec)``, else one CPU, and one GPU for a CUDA device."""
    fn = getattr(kind, "resources", None)
    if callable(fn):
        return dict(fn(spec))
    gpu = str(spec.get("device", "cpu")).startswith("cuda")
    return {"num_cpus": 1, "num_gpus": 1 if gpu else 0}


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

    def items(self, spec: dict[str, Any]) -> int:
        return len(spec["rows"])

    def cost_key(self, spec: dict[str, Any]) -> str:
        return "|".join(map(str, (spec["model"], ",".join(sorted(spec["methods"])), spec.get("level", "token"),
                                  spec.get("ablation", "zero"), prompt_length_bucket(spec["rows"]))))

    def measure_lent(self, spec: dict[str, Any]) -> float | None:
        """(The app, on a model its server holds: see app/jobs_view.py estimate_here.) Seconds per item before
        any job of this shape ran: the protocol on the first prompt, timed (its
        encoding of every row included, so a little over one item's cost)."""
        import time

        from attribution.faithfulness import evaluate_part

        if not spec["rows"]:
            return None
        model = worker_model(spec)
        with model_lock(spec):
            started = time.perf_counter()
            evaluate_part(model, spec["rows"], spec["methods"], [0], **_faith_args(spec),
                          batch_size=spec.get("batch_size", 32))
            return time.perf_counter() - started

    def run_shard(self, spec: dict[str, Any], shard: list[int], report: Any) -> Any:
        from attribution.faithfulness import evaluate_part
        from core.prompt_files import encode_rows

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


def prompt_length_bucket(rows: list[dict[str, Any]]) -> int:
    """The prompts' mean length in characters, to the nearest 25: per-item cost grows with prompt length, and
    the driver (which may have no model loaded) cannot count tokens."""
    if not rows:
        return 0
    mean = sum(len(str(r.get("prompt", ""))) for r in rows) / len(rows)
    return int(25 * round(mean / 25))


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

    def items(self, spec: dict[str, Any]) -> int:
        return len(spec["rows"])

    def cost_key(self, spec: dict[str, Any]) -> str:
        return "|".join(map(str, (spec["model"], spec["method"], spec["level"], prompt_length_bucket(spec["rows"]))))

    def run_shard(self, spec: dict[str, Any], shard: tuple[int, int], report: Any) -> Any:
        from attribution.prompt_set import attribute_set
        from core.prompt_files import encode_rows

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
    """One method at one level on one prompt (the app's slow methods, activation patching above all).

    Activation patching is sharded over its items (tokens, heads, neurons): shard k of K computes the k-th of
    split(items, K, batch_size) in its worker (so every batch is the one a single process runs) and scores 0
    elsewhere; finish adds the parts, which gives exactly the single-process scores. Other methods are one
    shard. Shards are (k, K): the item count needs the model, which only the workers load."""

    def label(self, spec: dict[str, Any]) -> str:
        return f"{spec['method']} · {spec['level']} · {spec['model']} · {spec['prompt'][:40]!r}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[tuple[int, int]]:
        n = workers if _sharded(spec) else 1
        return [(k, n) for k in range(n)]

    items_need_model = True  # estimate(measure=False) does not count items it would need a model for

    def items(self, spec: dict[str, Any]) -> int:
        """Patched items (loads the model in this process to count them); 1 for the other methods."""
        if not _sharded(spec):
            return 1
        if spec.get("n_items"):
            return int(spec["n_items"])
        model = worker_model(spec)
        return _n_items(model, _encode(model, spec), spec)

    def cost_key(self, spec: dict[str, Any]) -> str:
        per_position = bool((spec.get("params") or {}).get("per_position", False))
        return "|".join(map(str, (spec["model"], spec["method"], spec["level"], int(per_position),
                                  prompt_length_bucket([{"prompt": spec["prompt"]}]))))

    def measure(self, spec: dict[str, Any]) -> float | None:
        """Seconds per item of one real batch on this model and prompt (attribution/cost.py)."""
        from attribution.cost import estimate as method_estimate

        model = worker_model(spec)
        cost = method_estimate(model, _encode(model, spec), spec["method"], spec["level"])
        return None if cost is None else cost.seconds_per_item

    def run_shard(self, spec: dict[str, Any], shard: tuple[int, int], report: Any) -> Any:
        import functools

        from attribution import get_method, run_encoded

        model = worker_model(spec)
        method, fn = get_method(spec["method"], spec["level"])
        enc = _encode(model, spec)
        params = dict(spec.get("params") or {})
        if _sharded(spec):
            k, pieces = shard
            n = _n_items(model, enc, spec)
            ranges = split(n, pieces, int(params.get("batch_size", 32)))
            if k >= len(ranges):  # fewer batches than workers: nothing left for this one
                report.total(0)
                return None
            a, b = ranges[k]
            report.total(b - a)
            fn = functools.partial(fn, on_step=report.step, items=(a, b))
            return run_encoded(model, method.name, fn, enc, spec["level"], params, spec["prompt"])
        report.total(1)
        result = run_encoded(model, method.name, fn, enc, spec["level"], params, spec["prompt"])
        report.step(1)
        return result

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        from dataclasses import replace

        parts = [p for p in parts if p is not None]
        if len(parts) == 1:
            return parts[0]
        # each item was computed by one part and is 0 in the others: x + 0 is x exactly
        scores = parts[0].scores.clone()
        for p in parts[1:]:
            scores += p.scores
        return replace(parts[0], scores=scores, seconds=sum(p.seconds for p in parts))


def _sharded(spec: dict[str, Any]) -> bool:
    from attribution.methods import canonical

    return canonical(spec["method"]) == "activation_patching"


def _encode(model: Any, spec: dict[str, Any]) -> Any:
    from attribution import encode_at
    from core.errors import TokenError

    enc = encode_at(model, spec["prompt"], spec.get("target"), spec.get("foil"), spec.get("position"))
    if enc.target is None:  # no target given, and the position is the last: nothing follows it to explain
        raise TokenError(f"position {spec.get('position')} is the prompt's last token: give --target")
    return enc


def _n_items(model: Any, enc: Any, spec: dict[str, Any]) -> int:
    """The items activation patching scores: on the prompt cut after ``position`` (it is not position-aware)."""
    import math

    from attribution.baselines.patching import item_shape

    seq_len = enc.seq_len if enc.position is None else enc.position + 1
    per_position = bool((spec.get("params") or {}).get("per_position", False))
    return math.prod(item_shape(model, seq_len, spec["level"], per_position))


class SleepJob:
    """A job that only waits (``seconds`` over ``steps`` steps, in ``shards`` pieces) and returns a note:
    for tests of the runner and the Jobs page, with no model."""

    def label(self, spec: dict[str, Any]) -> str:
        return f"sleep {spec.get('seconds', 1)} s"

    def shards(self, spec: dict[str, Any], workers: int) -> list[tuple[int, int]]:
        return split(int(spec.get("steps", 10)), workers)

    def items(self, spec: dict[str, Any]) -> int:
        return int(spec.get("steps", 10))

    def prior(self, spec: dict[str, Any]) -> float | None:
        """Seconds per step, known before it runs (no cost is recorded for it)."""
        return float(spec.get("seconds", 1)) / max(1, int(spec.get("steps", 10)))

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
        from core.store import RunDraft

        return store.save(RunDraft(kind="sleep", args={k: v for k, v in self.spec.items() if k != "kind"},
                                   result={"steps": len(self.steps), "workers": len(self.pids)}))


KINDS: dict[str, Any] = {}  # job code by kind, imported on first use from its spec class's JOB (specs.SPECS)


def kind_names() -> list[str]:
    return sorted(set(KINDS) | set(SPECS))


def get_kind(name: str) -> Any:
    name = ALIASES.get(name, name)
    if name not in KINDS and name in SPECS:
        import importlib

        module, _, cls = SPECS[name].JOB.partition(":")
        try:
            KINDS[name] = getattr(importlib.import_module(module), cls)()
        except (ImportError, AttributeError) as exc:
            raise JobError(f"job kind {name!r} is not available here: {exc}") from None
    if name not in KINDS:
        raise JobError(f"unknown job kind {name!r}; kinds: {', '.join(kind_names())}")
    return KINDS[name]


@dataclass(frozen=True)
class JobEstimate:
    items: int
    seconds_per_item: float
    parallel: int  # shards that run at once
    source: str  # "measured on an earlier job" / "measured now"

    @property
    def seconds(self) -> float:
        return self.items * self.seconds_per_item / max(1, self.parallel)

    def text(self) -> str:
        from core.text import duration

        across = f" over {self.parallel} workers" if self.parallel > 1 else ""
        return (f"{self.items:,} items x {_ms(self.seconds_per_item)} each ({self.source}){across} = about "
                f"{duration(self.seconds)}")


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def estimate(spec: Any, workers: int = 1, root: Any = None, measure: bool = True) -> JobEstimate | None:
    """What the job will cost on this machine: its items x the per-item seconds recorded by an earlier job of
    the same shape (or, with ``measure``, measured now by the kind: the app passes False, as measuring may
    load a model), spread over the shards that run at once. None: no measurement to go on (the first job of
    its shape), or the kind has no items."""
    from pathlib import Path

    from workbench.scheduler import costs

    spec = as_dict(spec)
    kind = get_kind(spec.get("kind", ""))
    if not hasattr(kind, "items"):
        return None
    if not measure and getattr(kind, "items_need_model", False) and not spec.get("n_items"):
        return None  # counting would load the model here (the app's server, a driver)
    items = int(kind.items(spec))
    parallel = len(kind.shards(spec, workers))
    cost = costs.per_item(Path(root) if root is not None else jobs_root(), kind, spec)
    source = "measured on an earlier job"
    if cost is None and callable(getattr(kind, "prior", None)):  # a kind that knows its cost unmeasured
        cost, source = kind.prior(spec), "known in advance"
    if cost is None and measure and hasattr(kind, "measure"):
        cost, source = kind.measure(spec), "measured now"
    if cost is None or items <= 0:
        return None
    return JobEstimate(items=items, seconds_per_item=float(cost), parallel=parallel, source=source)
