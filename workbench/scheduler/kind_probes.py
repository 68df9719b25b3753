"""Job kinds ``probe`` and ``concepts`` (``workbench probe`` / ``workbench concepts`` and the Probes page).

A spec is self-contained: the model, the parameters, and the labelled set inline as ``rows`` (what
``attribution.probes.activations.dataset_rows`` writes) when it is small, else ``dataset_path`` (absolute,
read by the worker); ``dataset`` is the name the run records. ``n`` is the set's size, so the driver knows the
items without reading it. One shard: the work is one model pass over the set and per-hook fits.

probe spec: model, device, dataset, rows | dataset_path, n, hook, layers, pooling, test_frac, seed, and
optionally n_boot, concept (concept vectors from the same activations) and keep_activations (the app).
concepts spec: model, device, dataset, rows | dataset_path, n, concept, layers, steer_layers, pooling, scale,
n_steer, saes (extra SAE directories).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from workbench.scheduler.kinds import prompt_length_bucket, worker_model
from workbench.scheduler.specs import model_ref  # noqa: F401 - where the commands have always found it

INLINE_MAX = 5000  # rows kept inline in a spec (a job's record holds its spec)


def dataset_spec(path: str | Path | None, data: Any, name: str | None = None) -> dict[str, Any]:
    """The dataset part of a spec for a checked LabeledSet ``data`` read from ``path`` (None: an upload or a
    subset, always inline)."""
    from attribution.probes.activations import dataset_rows

    out: dict[str, Any] = {"dataset": name if name is not None else (str(path) if path else None), "n": len(data)}
    if path is None or len(data) <= INLINE_MAX:
        out["rows"] = dataset_rows(data)
    else:
        out["dataset_path"] = str(Path(path).resolve())
    return out


def spec_data(spec: dict[str, Any]) -> Any:
    from attribution.probes.activations import from_rows, load_dataset

    if spec.get("rows") is not None:
        return from_rows(spec["rows"])
    return load_dataset(spec["dataset_path"], min_per_class=4)


_LOAD_S: dict[tuple[str, str], float] = {}  # seconds each model took to load in this process


def _load(spec: dict[str, Any]) -> tuple[Any, float]:
    """The spec's model and the seconds its load took (also when ``check_here`` loaded it earlier)."""
    key = (spec["model"], spec.get("device", "cpu"))
    started = time.perf_counter()
    model = worker_model(spec)
    took = time.perf_counter() - started
    if took > 0.05 or key not in _LOAD_S:  # a real load, not the cached model
        _LOAD_S[key] = took
    return model, _LOAD_S[key]


def check_here(spec: dict[str, Any]) -> None:
    """For a job about to run in this process: load its model (the job reuses it) and resolve its hooks, so a
    bad hook or layer is a one-line error before the job starts, as it was before these ran as jobs."""
    from attribution.probes.run import concept_hooks, probe_hooks

    model, _ = _load(spec)
    if spec["kind"] == "probe":
        probe_hooks(model, spec.get("hook"), spec.get("layers", "all"))
    else:
        concept_hooks(model, spec.get("layers", "all"), spec.get("steer_layers"))


def _bucket(spec: dict[str, Any]) -> int:
    return prompt_length_bucket([{"prompt": r["text"]} for r in spec["rows"]]) if spec.get("rows") else 0


class ProbeJob:
    def label(self, spec: dict[str, Any]) -> str:
        what = spec.get("hook") or f"layers {spec.get('layers', 'all')}"
        extra = f" + concept {spec['concept']!r}" if spec.get("concept") else ""
        return (f"probe{extra} · {what} · {spec.get('pooling', 'last')} · {spec.get('n', '?')} examples · "
                f"{spec['model']}")

    def shards(self, spec: dict[str, Any], workers: int) -> list[int]:
        return [0]

    def items(self, spec: dict[str, Any]) -> int:
        from attribution.probes.run import probe_phases

        return probe_phases(spec.get("concept")) * int(spec["n"])

    def cost_key(self, spec: dict[str, Any]) -> str:
        return "|".join(map(str, (spec["model"], spec.get("hook") or spec.get("layers", "all"),
                                  spec.get("pooling", "last"), spec.get("n_boot", 1000), bool(spec.get("concept")),
                                  _bucket(spec))))

    def measure_lent(self, spec: dict[str, Any]) -> float | None:
        """(The app, on a model its server holds: see app/jobs_view.py estimate_here.) Seconds per item before
        any job of this shape ran: the pooled activations of a few examples at the
        job's hooks, timed (an item is one example pass; the later phases are taken to cost as much)."""
        from attribution.probes.activations import LabeledSet, pooled_activations
        from attribution.probes.run import probe_hooks
        from workbench.scheduler.kinds import model_lock

        data = spec_data(spec)
        m = min(8, len(data.texts))
        if m == 0:
            return None
        few = LabeledSet(texts=data.texts[:m], labels=data.labels[:m], words=data.words[:m], marked=data.marked[:m])
        model, _ = _load(spec)
        with model_lock(spec):
            hooks, _ = probe_hooks(model, spec.get("hook"), spec.get("layers", "all"))
            started = time.perf_counter()
            pooled_activations(model, few, hooks, spec.get("pooling", "last"))
            return (time.perf_counter() - started) / m

    def run_shard(self, spec: dict[str, Any], shard: int, report: Any) -> Any:
        from attribution.probes.run import probe_hooks, run_probe

        data = spec_data(spec)
        model, t_load = _load(spec)
        hooks, names = probe_hooks(model, spec.get("hook"), spec.get("layers", "all"))
        out = run_probe(model, data, hooks, names, spec.get("pooling", "last"), spec.get("test_frac", 0.3),
                        spec.get("seed", 0), spec.get("n_boot", 1000), spec.get("concept"), spec.get("dataset"),
                        bool(spec.get("keep_activations")), on_total=report.total, on_step=report.step)
        out.timings = {"load_s": t_load, "activations_s": out.timings["activations_s"],
                       "total_s": t_load + out.timings["total_s"]}
        return out

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        return parts[0]


class ConceptsJob:
    def label(self, spec: dict[str, Any]) -> str:
        return (f"concepts {spec['concept']!r} · layers {spec.get('layers', 'all')} · {spec.get('n', '?')} examples · "
                f"{spec['model']}")

    def shards(self, spec: dict[str, Any], workers: int) -> list[int]:
        return [0]

    def items(self, spec: dict[str, Any]) -> int:
        from attribution.probes.run import CONCEPT_PHASES

        return CONCEPT_PHASES * int(spec["n"])

    def cost_key(self, spec: dict[str, Any]) -> str:
        return "|".join(map(str, (spec["model"], spec.get("layers", "all"), spec.get("steer_layers"),
                                  spec.get("pooling", "last"), spec.get("n_steer", 32), _bucket(spec))))

    def run_shard(self, spec: dict[str, Any], shard: int, report: Any) -> Any:
        from attribution.probes.run import concept_hooks, run_concepts

        data = spec_data(spec)
        model, t_load = _load(spec)
        hooks, steer = concept_hooks(model, spec.get("layers", "all"), spec.get("steer_layers"))
        out = run_concepts(model, data, spec["concept"], hooks, steer, spec.get("saes"), spec.get("pooling", "last"),
                           spec.get("scale", 1.0), spec.get("n_steer", 32), spec.get("dataset"),
                           on_total=report.total, on_step=report.step)
        out.timings["total_s"] += t_load  # as the command measured it: from before the model load
        return out

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        return parts[0]
