"""Probes and concept vectors as jobs: the same numbers as the engine called directly, the finished job found
by its spec (the app's cross-session cache), its run read back, bad input and an unreachable Ray address."""

from __future__ import annotations

import json
import random
import time

import pytest
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from core.models.tiny import save_tiny

WORDS = {"negative": ["bad", "awful", "poor", "dull"], "positive": ["good", "great", "fine", "nice"]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(save_tiny(tmp_path_factory.mktemp("models") / "tiny", layers=2))


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "d.jsonl"
    with open(path, "w") as fh:
        for i in range(32):
            lab = ("negative", "positive")[i % 2]
            w = rng.choice(WORDS[lab])
            fh.write(json.dumps({"text": f"the {rng.choice(['movie', 'meal', 'book'])} was {w} .", "label": lab,
                                 "word": w}) + "\n")
    return str(path)


def _spec(kind: str, tiny: str, data_file: str, **extra):
    from attribution.probes.activations import load_dataset
    from workbench.scheduler.kind_probes import dataset_spec

    base = {"kind": kind, "model": tiny, "device": "cpu", **dataset_spec(data_file, load_dataset(data_file))}
    if kind == "probe":
        base.update(hook=None, layers="all", pooling="last", test_frac=0.3, seed=0)
    else:
        base.update(concept="positive", layers="all", steer_layers=None, pooling="last", scale=1.0, n_steer=8)
    return base | extra


def test_probe_job_matches_engine_and_is_found_by_spec(tiny, data_file, one_thread):
    import torch

    import workbench
    from attribution.probes.activations import load_dataset
    from attribution.probes.run import ProbeRun, probe_hooks, run_probe
    from core.store import RunStore
    from workbench.scheduler import JobBoard, run

    spec = _spec("probe", tiny, data_file, concept="positive", n_boot=100, keep_activations=True)
    totals, steps = [], []
    model = workbench.load(tiny)
    hooks, names = probe_hooks(model, None, "all")
    direct = run_probe(model, load_dataset(data_file), hooks, names, n_boot=100, concept="positive",
                       keep_activations=True, on_total=totals.append, on_step=steps.append)
    assert totals == [3 * 32] and sum(steps) == 3 * 32  # every phase's example passes, no more
    job, res = run(spec, save=True)
    assert job.state == "done" and job.done == job.total == 3 * 32
    assert res.probe.to_json() == direct.probe.to_json() and res.concepts.to_json() == direct.concepts.to_json()
    assert all(torch.equal(res.acts[h], direct.acts[h]) for h in hooks)

    found = JobBoard().latest_done(dict(spec))  # the same work asked for again: this job, its run stored
    assert found is not None and found.id == job.id
    assert JobBoard().latest_done(spec | {"pooling": "mean"}) is None
    back = ProbeRun.from_run(RunStore().get(found.run_id))
    assert back.probe.to_json() == direct.probe.to_json() and back.concepts.to_json() == direct.concepts.to_json()
    assert back.labels == direct.labels and all(torch.equal(back.acts[h], direct.acts[h]) for h in hooks)


def test_concepts_job_matches_engine(tiny, data_file, one_thread):
    import workbench
    from attribution.probes.activations import load_dataset
    from attribution.probes.run import concept_hooks, run_concepts
    from workbench.scheduler import run

    model = workbench.load(tiny)
    hooks, steer = concept_hooks(model, "all", None)
    direct = run_concepts(model, load_dataset(data_file), "positive", hooks, steer, n_steer=8)
    job, res = run(_spec("concepts", tiny, data_file), save=False)
    assert job.state == "done" and job.run_id is None and job.total == 2 * 32
    assert res.to_json() == direct.to_json()


def test_cli_records_a_job_and_estimates_the_next(tiny, data_file, monkeypatch, capsys, one_thread):
    from workbench.scheduler import JobBoard

    args = ["probe", "--model", tiny, "--dataset", data_file, "--layers", "1", "--json"]
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    first = json.loads(out)
    jobs = JobBoard().list()
    assert len(jobs) == 1 and jobs[0].kind == "probe" and jobs[0].run_id == first["run"]
    assert jobs[0].spec["rows"] and jobs[0].spec["n"] == 32
    code, out, err = cli(monkeypatch, capsys, *args)  # same shape: its measured cost gives an estimate
    assert code == 0 and "estimate: 64 items" in err
    assert {k: v for k, v in json.loads(out).items() if k != "run"} == {k: v for k, v in first.items() if k != "run"}


@pytest.mark.parametrize("case", ["pooling", "missing", "concept", "hook", "layers"])
def test_bad_input_exit_2(case, tiny, data_file, tmp_path, monkeypatch, capsys):
    from workbench.scheduler import JobBoard

    command = "concepts" if case == "concept" else "probe"
    args = [command, "--model", tiny, "--dataset", data_file, "--no-save"]
    extra = {"pooling": ["--pooling", "max"], "concept": ["--concept", "meh"],
             "hook": ["--hook", "blocks.7.hook_nothing"], "layers": ["--layers", "9"]}
    if case == "missing":
        args[4] = str(tmp_path / "nope.jsonl")
    code, out, err = cli(monkeypatch, capsys, *args, *extra.get(case, []))
    assert_bad(code, err)
    assert out == "" and not JobBoard().list()  # refused before any job started


@pytest.mark.parametrize("command", ["probe", "concepts"])
def test_unreachable_ray_address_exit_2_fast(command, tiny, data_file, monkeypatch, capsys):
    started = time.monotonic()
    code, out, err = cli(monkeypatch, capsys, command, "--model", tiny, "--dataset", data_file, "--ray-address",
                         "127.0.0.1:1", "--json")
    assert_bad(code, err, "127.0.0.1:1")
    assert out == "" and time.monotonic() - started < 20  # Ray itself retries for a minute
