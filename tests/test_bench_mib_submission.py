"""A bench run's edge scores in MIB's submission layout (circuits/bench/submission.py): one folder
per method and TASK_MODEL, one importance file or 9 circuits of at most 0.1% ... 50% of the edges."""

from __future__ import annotations

import json

import pytest
import torch

from circuits.graph import CircuitGraph


class _Run:  # what submission reads of a stored bench run
    id = "r1"
    meta = {"model": "tiny"}

    def __init__(self, graph: CircuitGraph, scores: torch.Tensor, d_model: int | None = 32) -> None:
        g = {"n_layers": graph.n_layers, "n_heads": graph.n_heads, "has_mlp": graph.has_mlp, "parallel": False}
        self._result = {"cells": [{"task": "add", "method": "dpa_path:steps=4", "tensor": "edges.0", "scale": 1.0},
                                  {"task": "ioi:counterfactual=abc", "method": "eap", "tensor": "edges.1",
                                   "scale": 1.0}],
                        "graph": {**g, **({"d_model": d_model} if d_model else {})}}
        self._tensors = {"edges.0": scores, "edges.1": -scores}

    def result(self):
        return self._result

    def tensors(self):
        return self._tensors


def test_importances_and_nine_circuits_in_mibs_layout(tmp_path):
    from circuits.bench.submission import submission
    from core.errors import ExportError

    g = CircuitGraph(3, 2, True)
    scores = torch.randn(g.n_edges, generator=torch.Generator().manual_seed(0))
    written = submission(_Run(g, scores), tmp_path)
    assert written == ["dpa_path_steps-4/arithmetic-addition_tiny/importances.json",
                       "eap/ioi-abc_tiny/importances.json"]
    doc = json.loads((tmp_path / written[0]).read_text())
    assert doc["cfg"]["d_model"] == 32 and len(doc["edges"]) == g.n_edges
    assert sorted(e["score"] for e in doc["edges"].values()) == pytest.approx(sorted(scores.tolist()), abs=1e-6)

    written = submission(_Run(g, scores), tmp_path / "c", circuits=True)
    assert len(written) == 18 and written[0].endswith("arithmetic-addition_tiny/edges_0.1.json")
    for pct, name in zip((0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50), written[:9], strict=True):
        doc = json.loads((tmp_path / "c" / name).read_text())
        kept = sum(e["in_graph"] for e in doc["edges"].values())
        assert kept <= int(pct / 100 * g.n_edges)  # at most P% of the edges, as MIB asks
    assert kept > 0  # 50% of a connected ranking keeps something
    with pytest.raises(ExportError, match="d_model"):
        submission(_Run(g, scores, d_model=None), tmp_path / "d")


def test_the_command_writes_a_stored_bench_run_in_mibs_layout(monkeypatch, capsys, tmp_path, tiny_llama_dir):
    """`workbench bench mib-submission RUN --out DIR` over a real (tiny) bench run; a non-bench run, an existing
    folder and an unknown run are one line, exit 2, nothing written."""
    from cli_helpers import assert_bad, run_cli

    rows = [{"prompt": f"The cat number {i} sat on the mat", "corrupt": f"The dog number {i} sat on the mat",
             "target": " and", "foil": " or", "split": "train" if i < 5 else "test"} for i in range(10)]
    task = tmp_path / "t.jsonl"
    task.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run_cli(monkeypatch, capsys, "bench", "circuits", "--model", str(tiny_llama_dir), "--tasks",
                             str(task), "--methods", "eap,dpa", "--n-train", "4", "--n-test", "4", "--boot", "20",
                             "--batch-size", "4", "--no-filter", "--json")
    assert code == 0, err
    run = json.loads(out)["run"]
    code, out, err = run_cli(monkeypatch, capsys, "bench", "mib-submission", run, "--out", str(tmp_path / "sub"),
                             "--json")
    assert code == 0, err
    files = json.loads(out)["files"]
    # the task file (recorded by its absolute path) by its stem, the model folder by its name: one component
    assert sorted(files) == [f"{m}/t_{tiny_llama_dir.name}/importances.json" for m in ("dpa", "eap")]
    for name in files:
        doc = json.loads((tmp_path / "sub" / name).read_text())
        assert doc["cfg"]["d_model"] > 0 and doc["edges"]
    code, out, err = run_cli(monkeypatch, capsys, "bench", "mib-submission", run, "--out", str(tmp_path / "c"),
                             "--circuits", "--json")
    assert code == 0 and len(json.loads(out)["files"]) == 18, err
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["dpa", "eap"]  # nothing outside --out
    code, _, err = run_cli(monkeypatch, capsys, "bench", "mib-submission", run, "--out", str(tmp_path / "sub"))
    assert_bad(code, err, "already exists")
    code, _, err = run_cli(monkeypatch, capsys, "bench", "mib-submission", "nosuchrun", "--out",
                           str(tmp_path / "x"))
    assert code == 2 and not (tmp_path / "x").exists(), err
