"""ViT evaluation and circuit discovery/evaluation as jobs: the kinds give the engines' own numbers, two
local Ray workers give the single-process vit-eval numbers, and bad options fail fast with exit 2."""

from __future__ import annotations

import json
import time

import pytest
import torch
from cli_helpers import assert_bad, here_and_on_two_workers
from cli_helpers import run_cli as cli

from workbench.scheduler import JobBoard, run

TOY = "ioi-attn-2l1h"
VIT_METHODS = ["dap", "rollout", "random"]
TIME = "seconds_per_image"


def _same_vit(a, b) -> None:
    assert a.methods.keys() == b.methods.keys() and a.accuracy == b.accuracy
    for name, row in a.methods.items():
        for key in set(row) - {TIME}:
            assert row[key] == pytest.approx(b.methods[name][key], rel=0, abs=0, nan_ok=True), (name, key)
        assert torch.equal(a.maps[name].scores, b.maps[name].scores)


def test_vit_kind_matches_the_engine_and_shards_combine(vit_dir, one_thread):
    import workbench as wb
    from attribution.vit import data
    from attribution.vit.evaluate import evaluate
    from workbench.scheduler.kinds import get_kind

    spec = {"kind": "vit_eval", "model": vit_dir, "methods": VIT_METHODS, "n": 6, "seed": 2,
            "dataset": "synthetic", "batch_size": 4}
    job, res = run(spec, save=True)
    direct = evaluate(wb.load(vit_dir), data.sample_images("synthetic", 6, 2), VIT_METHODS, model_name=vit_dir,
                      batch_size=4, seed=2)
    _same_vit(res, direct)
    assert job.state == "done" and job.total == job.done == 18 and res.cost["dap_over_forward_backward"] > 0
    assert JobBoard().get(job.id).run_id == job.run_id
    # three shards run one after another in this process: the (method, batch) pairs recombine exactly
    kind = get_kind("vit_eval")
    shards = kind.shards(spec, 3)
    assert len(shards) == 3 and sorted(u for s in shards for u in s) == sorted(u for s in kind.shards(spec, 1)
                                                                                for u in s)

    class Quiet:
        total = step = staticmethod(lambda n: None)

    _same_vit(kind.finish(spec, [kind.run_shard(spec, s, Quiet) for s in shards]), direct)


def test_circuit_kinds_match_the_engine(tmp_path, one_thread):
    import workbench as wb
    from circuits.discover import CircuitResult, circuit
    from circuits.toy.prompts import task_rows
    from core.store import RunStore

    model = wb.load(TOY)
    rows = task_rows(model, 12)
    spec = {"kind": "circuit_discover", "model": TOY, "rows": rows, "method": "eap", "params": {}, "edges": 5,
            "ablation": None, "metric": None, "selection": "topk", "evaluate": True, "grid": [2, 4, 8],
            "batch_size": 16}
    job, res = run(spec, save=True)
    direct = circuit(model, rows, method="eap", edges=5, grid=[2, 4, 8])
    assert torch.equal(res.scores, direct.scores) and res.faithfulness == direct.faithfulness
    assert job.total == job.done == 24  # each prompt scored, then evaluated
    saved_id = job.run_id
    saved = CircuitResult.from_run(RunStore().get(saved_id))
    assert torch.equal(saved.scores, direct.scores)

    # path patching reports whole prompts too
    job, res = run({**spec, "method": "activation_patching", "evaluate": False}, save=False)
    assert job.total == job.done == 12
    assert torch.equal(res.scores, circuit(model, rows, method="activation_patching", evaluate=False).scores)

    ev = {"kind": "circuit_evaluate", "run": saved_id, "edges": None, "ablation": "mean",
          "selection": "greedy", "grid": [3, 6], "keep": []}
    job, again = run(ev, save=False)
    direct.evaluate(model, grid=[3, 6], ablation="mean", selection="greedy")
    assert again.faithfulness == direct.faithfulness and job.total == job.done == 12
    job, check = run({**ev, "keep": [["L1.H0", "logits"]]}, save=False)
    assert 0.0 < check.out["normalized"] < 1.0 and check.out["edges"][0]["src"] == "L1.H0"


def test_bad_options_fail_fast(monkeypatch, capsys, vit_dir, tmp_path):
    started = time.monotonic()
    base = ("vit-eval", "--model", vit_dir, "--methods", "rollout", "--n", "2")
    assert_bad(*cli(monkeypatch, capsys, *base, "--workers", "0")[::2], "--workers")
    assert_bad(*cli(monkeypatch, capsys, *base, "--ray-address", "127.0.0.1:9")[::2],
               "cannot reach the Ray cluster at 127.0.0.1:9")
    assert_bad(*cli(monkeypatch, capsys, *base, "--dataset", "digits")[::2], "does not fit the digits set")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "N3 and N7 then N7", "target": "N3", "foil": "N7",
                                   "corrupt": "N7 and N3 then N3"}) + "\n")
    disc = ("circuit", "discover", "--model", TOY, "--prompts", str(prompts), "--grid", "4")
    assert_bad(*cli(monkeypatch, capsys, *disc, "--ray-address", "127.0.0.1:9")[::2], "cannot reach the Ray")
    code, out, err = cli(monkeypatch, capsys, *disc, "--json")
    assert code == 0, err
    run_id = json.loads(out)["run"]
    assert_bad(*cli(monkeypatch, capsys, "circuit", "evaluate", "--run", run_id, "--ray-address",
                    "nonsense")[::2], "bad Ray address")
    assert time.monotonic() - started < 60
    assert not [j for j in JobBoard().list() if j.kind == "vit_eval"]  # refused before any job was made


@pytest.mark.slow
def test_vit_eval_on_two_ray_workers_matches_one_process(monkeypatch, capsys, vit_dir):
    base = ("vit-eval", "--model", vit_dir, "--methods", ",".join(VIT_METHODS), "--n", "12", "--batch-size", "4",
            "--no-save", "--json")
    here, on_ray = here_and_on_two_workers(monkeypatch, capsys, *base)
    assert on_ray["accuracy"] == here["accuracy"] and on_ray["cost"]
    for name, row in here["methods"].items():
        for key in set(row) - {TIME}:
            assert on_ray["methods"][name][key] == pytest.approx(row[key], rel=1e-9, abs=1e-9, nan_ok=True), \
                (name, key)
