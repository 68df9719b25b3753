"""The circuit benchmark as a job (workbench/scheduler/kind_bench.py, circuits/bench/cells.py): its (task, method)
cells split over workers and merged back equal the in-process runner's result; each cell's edge scores are kept
in the run and draw its circuit; the spec checks and keys its fields; the command runs as a job."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli

from circuits.bench.runner import BenchConfig, run

ROWS = [{"prompt": f"The cat number {i} sat on the mat", "corrupt": f"The dog number {i} sat on the mat",
         "target": " and", "foil": " or", "split": "train" if i < 5 else "test"} for i in range(10)]
TIMES = ("seconds", "eval_seconds", "ends_seconds")


def _task(tmp_path, name, rows=ROWS):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _untimed(x):
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if k not in TIMES}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


class _Report:
    def __init__(self):
        self.totals, self.steps = [], 0

    def total(self, n):
        self.totals.append(n)

    def step(self, n):
        self.steps += n


def test_cells_split_over_workers_merge_to_the_runners_result(tiny_llama, tmp_path, one_thread):
    from circuits.bench.cells import cell_scores, cell_subgraph
    from core.errors import RunStoreError
    from core.store import RunStore
    from workbench.scheduler.kind_bench import BenchCircuitsJob
    from workbench.scheduler.kinds import lend
    from workbench.scheduler.specs import BenchCircuitsSpec

    swapped = [dict(r, target=" or", foil=" and") for r in ROWS]  # a second task: the same prompts, flipped
    tasks = [_task(tmp_path, "a"), _task(tmp_path, "b", swapped)]
    methods = ["random", "eap", "activation_patching"]
    cfg = BenchConfig(model=tiny_llama.name, tasks=tasks, methods=methods, levels=["edge", "node"], n_train=4,
                      n_test=4, n_patch=4, n_boot=20, batch_size=4, filter_rows=False)
    expected = run(cfg, model=tiny_llama)

    spec = BenchCircuitsSpec(model=tiny_llama.name, tasks=tasks, methods=methods, levels=["edge", "node"],
                             n_train=4, n_test=4, n_patch=4, n_boot=20, batch_size=4, filter_rows=False).to_dict()
    job = BenchCircuitsJob()
    shards = job.shards(spec, 3)
    assert [len(s) for s in shards] == [2, 2, 2]  # 6 cells, contiguous: the middle worker has both tasks
    assert [c for s in shards for c in s] == [(t, m) for t in tasks for m in methods]
    parts, steps = [], 0
    with lend({tiny_llama.name: (tiny_llama, None)}):
        for shard in reversed(shards):  # the order the parts arrive in does not matter
            report = _Report()
            parts.append(job.run_shard(spec, shard, report))
            assert report.steps == report.totals[0]  # each (cell, level) once
            steps += report.steps
    assert steps == job.items(spec) == 2 * (2 + 2 + 2)  # activation patching: node level and its edge sample
    got = job.finish(spec, parts)
    assert _untimed(got.result) == _untimed(expected)  # every CPR, CMD, interval and curve, bit for bit
    assert list(got.result["tasks"][1]["methods"]) == methods and got.result["tasks"][1]["task"] == tasks[1]
    assert set(got.result["tasks"][1]["patching_agreement"]["methods"]) == {"random", "eap"}  # equal, above

    run_ = got.save(RunStore())
    assert [(c["task"], c["method"]) for c in run_.result()["cells"]] == [(t, m) for t in tasks
                                                                          for m in ("random", "eap")]
    graph, scores = cell_scores(run_, tasks[0], "random")
    import torch

    want = torch.randn(graph.n_edges, generator=torch.Generator().manual_seed(0))  # the random method's scores
    assert torch.allclose(scores, want, rtol=1e-3, atol=1e-3 * float(want.abs().max()))
    sub = cell_subgraph(run_, tasks[1], "eap", 12)
    assert len(sub.edges) == 12 and sub.provenance.method == "eap"
    assert json.loads((run_.path / "results.json").read_text())["tasks"][0]["m_full"] == expected["tasks"][0]["m_full"]
    with pytest.raises(RunStoreError, match="node-level-only"):
        cell_scores(run_, tasks[0], "activation_patching")


def test_spec_checks_and_keys(tmp_path):
    from core.errors import WorkbenchError
    from workbench.scheduler.specs import SPECS, BenchCircuitsSpec, key_of, parse

    assert SPECS["bench_circuits"] is BenchCircuitsSpec
    a = BenchCircuitsSpec(model="smollm2-135m", tasks=["ioi", "facts"], methods=["eap", "random"])
    b = BenchCircuitsSpec(model="smollm2-135m", tasks=["facts", "ioi"], methods=["random", "eap"], threads=1)
    assert a.key() == b.key()  # order and threads are not the work
    assert a.key() != BenchCircuitsSpec(model="smollm2-135m", tasks=["ioi"], methods=["eap", "random"]).key()
    assert parse(a.to_dict()) == a and key_of(a.to_dict()) == a.key()
    assert "threads" not in a.to_dict() and a.to_dict()["levels"] == ["edge"]
    for bad, words in (({"tasks": ["ioi", "nonsense"]}, "unknown task"), ({"methods": ["acdc"]}, "unknown method"),
                       ({"n_train": 2}, "n-train"), ({"methods": []}, "methods is empty"),
                       ({"batch_size": 0}, "batch_size")):
        with pytest.raises(WorkbenchError, match=words):
            BenchCircuitsSpec(**{"model": "smollm2-135m", "tasks": ["ioi"], "methods": ["eap"], **bad})


def test_the_command_runs_as_a_job(monkeypatch, capsys, tmp_path, tiny_llama_dir):
    from workbench.scheduler import JobBoard

    out = tmp_path / "doc.md"
    code, stdout, err = run_cli(monkeypatch, capsys, "bench", "circuits", "--model", str(tiny_llama_dir),
                                "--tasks", _task(tmp_path, "t"), "--methods", "random,eap", "--n-train", "4",
                                "--n-test", "4", "--boot", "20", "--batch-size", "4", "--out", str(out), "--json",
                                "--no-filter")
    assert code == 0, err
    summary = json.loads(stdout)
    job = JobBoard().get(summary["job_id"])
    assert job.state == "done" and job.kind == "bench_circuits" and job.run_id == summary["run"]
    assert job.done == job.total == 2
    assert {r["method"] for r in summary["rows"]} == {"random", "eap"} and out.exists()
    assert "Edge level: CPR" in out.read_text()


def test_bad_input_starts_no_job(monkeypatch, capsys, tmp_path):
    from cli_helpers import assert_bad

    from workbench.scheduler import JobBoard

    small = _task(tmp_path, "small", ROWS[:6])  # 5 train rows but a test split of 1
    code, _, err = run_cli(monkeypatch, capsys, "bench", "circuits", "--model", "smollm2-135m", "--tasks", small,
                           "--n-train", "4", "--n-test", "4", "--out", str(tmp_path / "doc.md"))
    assert_bad(code, err, "test split has 1 prompts")
    assert JobBoard().scan()[0] == [] and not (tmp_path / "doc.md").exists()
