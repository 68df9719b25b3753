"""The circuit jobs: ``circuit_discover`` (score every edge, keep the top K, the faithfulness curve) and
``circuit_evaluate`` (a saved circuit's curve again, or one hand-picked circuit). One shard each: the
scoring needs every prompt's gradients summed on one model. Progress counts prompts (circuits.discover).

Specs: workbench/scheduler/specs.py CircuitDiscoverSpec and CircuitEvaluateSpec (``keep``: [[src, dst], ...]).
"""

from __future__ import annotations

import json
from typing import Any

from workbench.scheduler.kinds import prompt_length_bucket, worker_model


def _discover_args(spec: dict[str, Any]) -> dict[str, Any]:
    return {"method": spec["method"], "edges": int(spec.get("edges", 100)), "ablation": spec.get("ablation"),
            "metric": spec.get("metric"), "grid": spec.get("grid") or None, "selection": spec.get("selection", "topk"),
            "evaluate": bool(spec.get("evaluate", True)), "batch_size": int(spec.get("batch_size", 16)),
            **(spec.get("params") or {})}


class CircuitDiscoverJob:
    def __init__(self) -> None:
        self._measured: dict[str, float] = {}  # spec key -> seconds per item, so the CLI measures once

    def label(self, spec: dict[str, Any]) -> str:
        return f"circuit {spec['method']} · {len(spec['rows'])} prompts · {spec['model']}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[int]:
        return [0]

    def items(self, spec: dict[str, Any]) -> int:
        return len(spec["rows"]) * (2 if spec.get("evaluate", True) else 1)

    def cost_key(self, spec: dict[str, Any]) -> str:
        grid = spec.get("grid")
        return "|".join(map(str, (spec["model"], spec["method"], json.dumps(spec.get("params") or {}, sort_keys=True),
                                  spec.get("ablation"), spec.get("evaluate", True), len(grid) if grid else 8,
                                  spec.get("batch_size", 16), prompt_length_bucket(spec["rows"]))))

    def measure(self, spec: dict[str, Any]) -> float | None:
        """Seconds per item from one masked forward of the model (loaded here, and kept for the run);
        path patching over too many edges is refused here, before the job starts."""
        from circuits.counterfactual import prepare
        from circuits.discover import check_patching, estimate
        from circuits.edges import get_method
        from circuits.evaluate import DEFAULT_GRID
        from circuits.graph import CircuitGraph
        from workbench.scheduler.board import spec_key

        key = spec_key(spec)
        if key not in self._measured:
            args = _discover_args(spec)
            method = get_method(spec["method"])
            params = method.check_params(spec.get("params") or {})
            model = worker_model(spec)
            graph = CircuitGraph.of(model)
            prepared = prepare(model, spec["rows"], args["ablation"], args["metric"], args["batch_size"])
            if method.exact:
                check_patching(model, graph, prepared, params)
            grid = (args["grid"] or DEFAULT_GRID) if args["evaluate"] else None
            seconds = estimate(model, graph, prepared, spec["method"], params, grid=grid)
            self._measured[key] = seconds / max(1, self.items(spec))
        return self._measured[key]

    def run_shard(self, spec: dict[str, Any], shard: int, report: Any) -> Any:
        from circuits.discover import circuit
        from circuits.evaluate import DEFAULT_GRID

        args = _discover_args(spec)
        args["grid"] = args["grid"] or DEFAULT_GRID
        return circuit(worker_model(spec), spec["rows"], on_total=report.total, on_step=report.step, **args)

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        return parts[0]


class CircuitCheck:
    """One hand-picked circuit of a saved run, evaluated: ``out`` is what ``circuit evaluate --keep`` prints."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out

    def save(self, store: Any) -> Any:
        from core.store import RunDraft

        return store.save(RunDraft(kind="circuit-check", model=self.out["model"], args={"run": self.out["run"]},
                                   result=self.out))


def _saved(run_id: str) -> Any:
    from circuits.discover import CircuitResult
    from core.store import RunStore

    return CircuitResult.from_run(RunStore().get(run_id))


class CircuitEvaluateJob:
    """The saved circuit travels in the shard (read by the driver, which holds the run store)."""

    def label(self, spec: dict[str, Any]) -> str:
        what = f"{len(spec['keep'])} chosen edges" if spec.get("keep") else "faithfulness curve"
        return f"circuit evaluate {spec['run']} · {what}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[Any]:
        return [_saved(spec["run"])]

    def items(self, spec: dict[str, Any]) -> int:
        return _saved(spec["run"]).n_prompts

    def cost_key(self, spec: dict[str, Any]) -> str:
        res = _saved(spec["run"])
        grid = spec.get("grid")
        return "|".join(map(str, (res.model, "keep" if spec.get("keep") else len(grid) if grid else 8,
                                  spec.get("ablation") or res.ablation, prompt_length_bucket(res.rows))))

    def run_shard(self, spec: dict[str, Any], res: Any, report: Any) -> Any:
        import torch

        from circuits.evaluate import DEFAULT_GRID

        model = worker_model({"model": res.model, "device": spec.get("device", "cpu"), "dtype": spec.get("dtype")})
        report.total(res.n_prompts)
        if spec.get("edges") is not None:
            res.edges = min(int(spec["edges"]), res.graph.n_edges)
        if not spec.get("keep"):
            res.evaluate(model, grid=spec.get("grid") or DEFAULT_GRID, ablation=spec.get("ablation"),
                         selection=spec.get("selection", "topk"), on_step=report.step)
            res.selection = spec.get("selection", "topk")
            return res
        from circuits.counterfactual import prepare
        from circuits.evaluate import check_span, metrics
        from circuits.intervene import References

        pairs = [tuple(p) for p in spec["keep"]]
        mask = torch.zeros(res.graph.n_edges, dtype=torch.bool)
        mask[[res.graph.edge_id(s, d) for s, d in pairs]] = True
        prompts = prepare(model, res.rows, spec.get("ablation") or res.ablation, res.metric)
        refs = References(model, res.graph, prompts)
        everything = torch.ones_like(mask)
        full, empty, kept, rest = metrics(model, res.graph, prompts, refs,
                                          torch.stack([everything, ~everything, mask, ~mask]),
                                          on_step=report.step).tolist()
        span = check_span(full, empty)
        return CircuitCheck({"run": spec["run"], "model": res.model,
                             "edges": [{"src": s, "dst": d, "score": res.score_of(s, d)} for s, d in pairs],
                             "normalized": (kept - empty) / span, "complement": (rest - empty) / span,
                             "metric_full": full, "metric_empty": empty, "ablation": prompts.ablation})

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> Any:
        return parts[0]
