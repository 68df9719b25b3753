"""The ``bench_circuits`` job: the circuit benchmark (``workbench bench circuits``) over (task, method) cells.

The cells, task by task, are cut into ``workers`` contiguous runs, so a worker holds whole tasks where it can
and builds each task's prompts, references and m(full), m(empty) once (circuits/bench/cells.py says how the
merge takes them). Each worker loads the model once; progress counts (cell, level) steps, as the in-process
runner's progress did; cancel stops at the next step here and kills the workers on Ray. The merged result is
the dict ``circuits.bench.runner.run`` returns, so circuits/bench/report.py writes the same document; the run
also keeps every cell's edge scores (float16) for the app's leaderboard to draw a cell's circuit.

Spec: workbench/scheduler/specs.py BenchCircuitsSpec.
"""

from __future__ import annotations

import time
from typing import Any

from workbench.scheduler.kinds import split, worker_model
from workbench.scheduler.specs import bench_config


class BenchCircuitsJob:
    def label(self, spec: dict[str, Any]) -> str:
        return (f"bench circuits {len(spec['tasks'])} tasks x {len(spec['methods'])} methods · "
                f"{','.join(spec.get('levels', ['edge']))} · {spec['model']}")

    def shards(self, spec: dict[str, Any], workers: int) -> list[list[tuple[str, str]]]:
        from circuits.bench.cells import cells

        todo = cells(bench_config(spec))
        return [todo[a:b] for a, b in split(len(todo), workers)]

    def items(self, spec: dict[str, Any]) -> int:
        from circuits.bench.cells import cells
        from circuits.bench.runner import method_steps

        cfg = bench_config(spec)
        return sum(method_steps(cfg, m) for _, m in cells(cfg))

    def cost_key(self, spec: dict[str, Any]) -> str:
        return "|".join(map(str, ("bench", spec["model"], ",".join(sorted(spec["methods"])),
                                  ",".join(spec.get("levels", ["edge"])), spec.get("n_train"), spec.get("n_test"),
                                  spec.get("selection"), spec.get("batch_size"))))

    def run_shard(self, spec: dict[str, Any], shard: list[tuple[str, str]], report: Any) -> list[dict[str, Any]]:
        from circuits.bench.cells import run_cells
        from circuits.bench.runner import method_steps

        cfg = bench_config(spec)
        model = worker_model(spec)
        report.total(sum(method_steps(cfg, m) for _, m in shard))
        last = [time.monotonic()]
        note = getattr(report, "note", None)  # a caller's own report may only count

        def step(what: str) -> None:  # a finished (task, method, level): counted, and a log line with its time
            now = time.monotonic()
            report.step(1)
            if note is not None:
                note(f"{what}: {now - last[0]:.1f} s")
            last[0] = now

        return run_cells(model, cfg, [tuple(c) for c in shard], on_step=step)

    def finish(self, spec: dict[str, Any], parts: list[list[dict[str, Any]]]) -> Any:
        from circuits.bench.cells import merge

        return merge(bench_config(spec), [p for part in parts for p in part])
