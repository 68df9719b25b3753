"""Hardening, second round (issue 29): every file the workbench writes and reads again, damaged in each way
(truncated, zeroed, garbage, wrong JSON types, unknown keys, absurd sizes, NaN/Infinity, symlinks), gives one
line and exit 2 from every command that reads it, or is listed as damaged while the sound entries go on."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.errors import ModelFileError, RunStoreError
from tests.cli_helpers import assert_bad, run_cli
from tests.damage import edit_json, nan_tensor, symlink

TOY = "ioi-attn-1l2h"


# -- ways to damage a file ---------------------------------------------------------------------------------
def truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[:20])


def zero(f: Path) -> None:
    f.write_bytes(b"\0" * f.stat().st_size)


def garbage(f: Path) -> None:
    f.write_bytes(os.urandom(300))


def on(name: str, fn):
    """fn applied to the file ``name`` of a directory."""
    return lambda d: fn(d / name)


SAFETENSORS_DAMAGE = {"truncated": truncate, "zeroed": zero, "garbage": garbage, "symlink": symlink,
                      "nan": nan_tensor}


# -- runs: a saved circuit ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def circuit_store(tmp_path_factory):
    """A run store holding one real circuit run of the toy (scores, prompts, a faithfulness curve)."""
    import workbench as wb
    from circuits.discover import circuit
    from circuits.toy.prompts import task_rows
    from core.store import RunStore

    torch.set_num_threads(1)
    m = wb.load(TOY)
    res = circuit(m, task_rows(m, 8), method="eap", edges=5, grid=(2, 4))
    root = tmp_path_factory.mktemp("circuit-store")
    run = res.save(RunStore(root))
    return root, run.id


@pytest.fixture
def circuit_copy(circuit_store, tmp_path, monkeypatch):
    root, run_id = circuit_store
    dst = tmp_path / "runs"
    shutil.copytree(root, dst, symlinks=True)
    monkeypatch.setenv("WORKBENCH_RUNS", str(dst))
    return dst / run_id, run_id


def _meta(change):
    return lambda run: edit_json(run / "meta.json", change)


def _args(key, value):
    return _meta(lambda m: m["args"].update({key: value}))


def _faith(change):
    return lambda run: edit_json(run / "result.json", lambda r: change(r["faithfulness"]))


CIRCUIT_DAMAGE = {
    **{f"tensors {k}": on("tensors.safetensors", fn) for k, fn in SAFETENSORS_DAMAGE.items()},
    "scores of another length": lambda run: save_file({"scores": torch.zeros(3)}, str(run / "tensors.safetensors")),
    "args a string": _meta(lambda m: m.update(args="abc")),
    "n_layers 'abc'": _args("n_layers", "abc"),
    "n_layers 10^9": _args("n_layers", 10**9),
    "n_heads -1": _args("n_heads", -1),
    "has_mlp 'yes'": _args("has_mlp", "yes"),
    "edges 'abc'": _args("edges", "abc"),
    "ablation unknown": _args("ablation", "bogus"),
    "params a list": _args("params", [1]),
    "timings scoring 'abc'": _meta(lambda m: m.update(timings={"scoring": "abc"})),
    "result.json a list": lambda run: (run / "result.json").write_text("[1, 2]"),
    "result.json NaN": lambda run: (run / "result.json").write_text('{"faithfulness": {"auc": NaN}}'),
    "result.json garbage": lambda run: garbage(run / "result.json"),
    "faithfulness unknown key": _faith(lambda f: f.update(bogus=1)),
    "faithfulness k strings": _faith(lambda f: f.update(k=["a", "b"])),
    "faithfulness lists of other lengths": _faith(lambda f: f.update(normalized=[0.5])),
    "prompts.jsonl garbage": lambda run: garbage(run / "prompts.jsonl"),
    "prompts.jsonl a list row": lambda run: (run / "prompts.jsonl").write_text("[1, 2]\n"),
    "prompts.jsonl empty": lambda run: (run / "prompts.jsonl").write_text(""),
    "prompts.jsonl missing": lambda run: (run / "prompts.jsonl").unlink(),
    "prompts.jsonl bad prompt type": lambda run: (run / "prompts.jsonl").write_text('{"prompt": {}, "target": 1}\n'),
}


@pytest.mark.parametrize("how", list(CIRCUIT_DAMAGE))
def test_damaged_circuit_run_is_one_line(circuit_copy, monkeypatch, capsys, how):
    run, run_id = circuit_copy
    CIRCUIT_DAMAGE[how](run)
    code, _out, err = run_cli(monkeypatch, capsys, "circuit", "evaluate", "--run", run_id, "--json")
    assert_bad(code, err, run_id)
    assert any(w in err for w in ("damaged", "symlink", "no prompts.jsonl")), err
    # the API: a typed error, never a KeyError, TypeError or allocation
    from circuits.discover import CircuitResult
    from core.store import RunStore

    with pytest.raises(RunStoreError):
        CircuitResult.from_run(RunStore().get(run_id))


def test_sound_circuit_run_reads_back(circuit_copy):
    from circuits.discover import CircuitResult
    from core.store import RunStore

    _run, run_id = circuit_copy
    res = CircuitResult.from_run(RunStore().get(run_id))
    assert res.faithfulness is not None and res.scores.shape == (res.graph.n_edges,) and res.n_prompts == 8


def test_keep_on_prompts_equal_to_their_counterfactuals(circuit_copy, monkeypatch, capsys):
    run, run_id = circuit_copy
    rows = [json.loads(line) for line in (run / "prompts.jsonl").read_text().splitlines()]
    (run / "prompts.jsonl").write_text("".join(json.dumps({**r, "corrupt": r["prompt"]}) + "\n" for r in rows))
    for extra in (["--keep", "L0.H0->logits"], []):
        code, _out, err = run_cli(monkeypatch, capsys, "circuit", "evaluate", "--run", run_id, *extra, "--json")
        assert_bad(code, err, "faithfulness is undefined")


def test_damaged_tensors_of_any_run_kind(tmp_path, monkeypatch):
    """Run.tensors / result / rows (what every run kind's reader uses) refuse damage with RunStoreError."""
    from attribution.prompt_set import AttributionSet
    from core.store import RunDraft, RunStore

    store = RunStore(tmp_path)
    for how, fn in SAFETENSORS_DAMAGE.items():
        run = store.save(RunDraft(kind="attribute_set", result={"model": "m"}, tensors={"scores.0": torch.ones(2)},
                                  files={"rows.jsonl": "[1]\n"}))
        fn(run.path / "tensors.safetensors")
        if how == "symlink":
            with pytest.raises(RunStoreError, match="damaged"):
                store.get(run.id)  # a symlink inside a run makes the whole run damaged
            continue
        with pytest.raises(RunStoreError, match="damaged"):
            store.get(run.id).tensors()
        with pytest.raises(RunStoreError, match="damaged"):
            AttributionSet.from_run(store.get(run.id))
    run = store.save(RunDraft(kind="x", result={"a": 1}, files={"rows.jsonl": "[1]\n"}))
    (run.path / "result.json").write_text('{"a": Infinity}')
    with pytest.raises(RunStoreError, match="damaged"):
        store.get(run.id).result()
    with pytest.raises(RunStoreError, match="line 1"):
        store.get(run.id).rows("rows.jsonl")


# -- job records -------------------------------------------------------------------------------------------
JOB_DAMAGE = {
    "a JSON list": lambda rec, f: f.write_text("[1, 2]"),
    "missing label": lambda rec, f: f.write_text(json.dumps({k: v for k, v in rec.items() if k != "label"})),
    "driver a list": lambda rec, f: f.write_text(json.dumps({**rec, "driver": [1, 2]})),
    "string ETA": lambda rec, f: f.write_text(json.dumps({**rec, "state": "running", "eta_s": "soon",
                                                          "driver": {"host": "elsewhere", "pid": 1}})),
    "NaN ETA": lambda rec, f: f.write_text(json.dumps({**rec, "eta_s": 1.0}).replace("1.0", "NaN")),
    "spec a string": lambda rec, f: f.write_text(json.dumps({**rec, "spec": "abc"})),
    "unknown key": lambda rec, f: f.write_text(json.dumps({**rec, "bogus": 1})),
    "negative done": lambda rec, f: f.write_text(json.dumps({**rec, "done": -5})),
    "unknown state": lambda rec, f: f.write_text(json.dumps({**rec, "state": "exploded"})),
    "truncated": lambda rec, f: f.write_text(json.dumps(rec)[:40]),
    "garbage": lambda rec, f: garbage(f),
    "symlink": lambda rec, f: (f.with_name("elsewhere").write_text(json.dumps(rec)),
                               f.symlink_to(f.with_name("elsewhere"))),
    "another job's id": lambda rec, f: f.write_text(json.dumps({**rec, "id": "20250101-000000-sleep-000000"})),
}


@pytest.mark.parametrize("how", list(JOB_DAMAGE))
def test_damaged_job_record_is_listed_and_skipped(monkeypatch, capsys, how):
    from workbench.scheduler import JobBoard, run

    good, _ = run({"kind": "sleep", "seconds": 0.02, "steps": 2})
    board = JobBoard()
    record = json.loads((board.root / f"{good.id}.json").read_text())
    bad_id = "20260101-120000-sleep-abcdef"
    JOB_DAMAGE[how]({**record, "id": bad_id}, board.root / f"{bad_id}.json")
    assert [j.id for j in board.list()] == [good.id]
    assert [d["id"] for d in board.damaged()] == [bad_id]
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "list", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [good.id] and "damaged" in err, err
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "list")
    assert code == 0 and good.id in out and bad_id in out and "damaged" in out, err
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "list", "--damaged", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [bad_id]
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "show", bad_id, "--json")
    assert_bad(code, err, bad_id)
    assert "damaged" in err or "symlink" in err
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "show", good.id, "--json")
    assert code == 0 and json.loads(out)["id"] == good.id


def test_costs_table_with_non_finite_entries_is_ignored(tmp_path):
    from workbench.scheduler import costs

    (tmp_path / costs.FILE).write_text('{"a": Infinity, "b": NaN, "c": "x", "d": true, "e": 2.5}')
    assert costs._read(tmp_path) == {"e": 2.5}


# -- dictionaries and dashboards ---------------------------------------------------------------------------
HOOK = "blocks.1.hook_resid_post"
TEXTS = ["the movie was very good and the meal was great . the book was bad",
         "the show was dull . it was not good and the meal was awful"] * 6


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from core.models.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("models") / "tiny-files", name="tiny-files")


def _dictionary(root: Path, model: str) -> Path:
    from attribution.sae.train import save_sae, training_sae

    torch.manual_seed(0)
    sae = training_sae("topk", 16, 24, k=4, model=model, hook=HOOK)
    return save_sae(sae, root, {"model": model, "hook": HOOK, "kind": "topk", "k": 4, "layer": 1,
                                "metrics": {"explained_variance": 0.5, "l0": 4.0}})


@pytest.fixture(scope="module")
def dict_with_dashboards(tiny_dir, tmp_path_factory) -> Path:
    import workbench as wb
    from attribution.sae.dashboard import build_dashboards
    from attribution.sae.units import open_dictionary

    path = _dictionary(tmp_path_factory.mktemp("dict") / "tiny-sae", str(tiny_dir))
    model = wb.load(str(tiny_dir))
    [db] = build_dashboards(model, [open_dictionary(path)], n_tokens=200, ctx=16,
                            texts=[model.to_tokens(t)[0].tolist() for t in TEXTS])
    db.save(path)
    return path


def _cfg(change):
    return lambda d: edit_json(d / "cfg.json", change)


def _info(change):
    return lambda d: edit_json(d / "workbench.json", change)


DICT_DAMAGE = {
    "cfg.json a list": lambda d: (d / "cfg.json").write_text("[1, 2]"),
    "cfg.json garbage": lambda d: garbage(d / "cfg.json"),
    "cfg d_sae 10^9": _cfg(lambda c: c.update(d_sae=10**9)),
    "cfg d_in 'abc'": _cfg(lambda c: c.update(d_in="abc")),
    "workbench.json a list": lambda d: (d / "workbench.json").write_text("[1]"),
    "layer 'abc'": _info(lambda i: i.update(layer="abc")),
    "model a number": _info(lambda i: i.update(model=3)),
    "metrics NaN": lambda d: (d / "workbench.json").write_text(
        json.dumps(json.loads((d / "workbench.json").read_text())).replace('"l0": 4.0', '"l0": NaN')),
    "weights NaN": lambda d: nan_tensor(d / "sae_weights.safetensors", "W_dec"),
    "weights truncated": lambda d: truncate(d / "sae_weights.safetensors"),
    "weights garbage": lambda d: garbage(d / "sae_weights.safetensors"),
    "weights of another shape": lambda d: save_file({k: torch.zeros(2, 2) for k in
                                                     load_file(str(d / "sae_weights.safetensors"))},
                                                    str(d / "sae_weights.safetensors")),
    "cfg.json symlink": lambda d: symlink(d / "cfg.json"),
}


@pytest.fixture
def dict_root(tiny_dir, tmp_path):
    root = tmp_path / "saes"
    good = _dictionary(root / "good", str(tiny_dir))
    bad = _dictionary(root / "bad", str(tiny_dir))
    return root, good, bad


@pytest.mark.parametrize("how", list(DICT_DAMAGE))
def test_damaged_dictionary_is_refused_and_never_hides_the_good_ones(dict_root, tiny_dir, monkeypatch, capsys,
                                                                     how):
    from attribution.sae.dictionary import load_dictionary

    root, good, bad = dict_root
    DICT_DAMAGE[how](bad)
    with pytest.raises(ModelFileError):
        load_dictionary(bad)
    code, out, err = run_cli(monkeypatch, capsys, "sae", "list", "--root", str(root), "--json")
    assert code == 0, err
    assert [r["name"] for r in json.loads(out)] == ["good"] and "damaged" in err and "bad" in err
    code, out, err = run_cli(monkeypatch, capsys, "sae", "steer", "--sae", str(bad), "--model", str(tiny_dir),
                             "--feature", "0", "--prompt", "the movie", "--alpha", "1", "--tokens", "2", "--json")
    assert_bad(code, err, "bad")
    code, out, err = run_cli(monkeypatch, capsys, "feature-graph", "--model", str(tiny_dir), "--prompt",
                             "the movie was", "--saes", str(bad), "--no-save", "--json")
    assert_bad(code, err, "bad")


def test_symlinked_dictionary_and_bad_roots(dict_root, tmp_path, monkeypatch, capsys):
    root, good, bad = dict_root
    shutil.rmtree(bad)
    (root / "bad").symlink_to(good, target_is_directory=True)
    code, out, err = run_cli(monkeypatch, capsys, "sae", "list", "--root", str(root), "--json")
    assert code == 0 and [r["name"] for r in json.loads(out)] == ["good"] and "symlink" in err, err
    for where in (tmp_path / "nowhere", good / "cfg.json"):
        assert_bad(*run_cli(monkeypatch, capsys, "sae", "list", "--root", str(where))[::2], str(where))


def _dash(change_meta=None, change_tensors=None):
    def fn(d: Path) -> None:
        from safetensors import safe_open

        f = d / "dashboards.safetensors"
        with safe_open(str(f), framework="pt") as fh:
            meta = json.loads(fh.metadata()["dashboards"])
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
        if change_meta:
            change_meta(meta)
        if change_tensors:
            change_tensors(tensors)
        save_file(tensors, str(f), metadata={"dashboards": json.dumps(meta)})

    return fn


def _nan_density(t):
    t["density"] = t["density"].clone()
    t["density"][0] = float("inf")


DASH_DAMAGE = {
    "truncated": lambda d: truncate(d / "dashboards.safetensors"),
    "zeroed": lambda d: zero(d / "dashboards.safetensors"),
    "garbage": lambda d: garbage(d / "dashboards.safetensors"),
    "symlink": lambda d: symlink(d / "dashboards.safetensors"),
    "Infinity in density": _dash(change_tensors=_nan_density),
    "labels of another count": _dash(change_meta=lambda m: m.update(labels=["x"])),
    "labels a string": _dash(change_meta=lambda m: m.update(labels="x")),
    "vocab a list": _dash(change_meta=lambda m: m.update(vocab=[1])),
    "a tensor missing": _dash(change_tensors=lambda t: t.pop("ctx_token")),
    "token index out of range": _dash(change_tensors=lambda t: t.update(tok_feat=t["tok_feat"] + 10**6)),
    "context out of range": _dash(change_tensors=lambda t: t.update(ctx_token=t["ctx_token"] + 10**6)),
}


@pytest.mark.parametrize("how", list(DASH_DAMAGE))
def test_damaged_dashboards_are_one_line(dict_with_dashboards, tmp_path, monkeypatch, capsys, how):
    d = tmp_path / "tiny-sae"
    shutil.copytree(dict_with_dashboards, d)
    code, out, err = run_cli(monkeypatch, capsys, "sae", "features", "--sae", str(d), "--feature", "0", "--json")
    assert code == 0, err  # the sound copy opens
    DASH_DAMAGE[how](d)
    code, out, err = run_cli(monkeypatch, capsys, "sae", "features", "--sae", str(d), "--feature", "0", "--json")
    assert_bad(code, err, "dashboards")
    code, out, err = run_cli(monkeypatch, capsys, "sae", "features", "--sae", str(d), "--label", "the", "--json")
    assert_bad(code, err, "dashboards")


# -- tuned lenses ------------------------------------------------------------------------------------------
def _lens_dir(tmp_path: Path, n_layers: int = 2, d: int = 8) -> Path:
    from attribution.lens.tuned import TunedLens

    lens = TunedLens("m", torch.randn(n_layers, d, d) * 0.01, torch.zeros(n_layers, d))
    lens.save(tmp_path / "lens")
    return tmp_path / "lens"


def _lens_tensors(change):
    return lambda d: save_file(change(load_file(str(d / "tuned.safetensors"))), str(d / "tuned.safetensors"))


LENS_DAMAGE = {
    **{k: on("tuned.safetensors", fn) for k, fn in
       {"truncated": truncate, "zeroed": zero, "garbage": garbage, "symlink": symlink}.items()},
    "Infinity in the bias": _lens_tensors(lambda t: {**t, "bias": torch.full_like(t["bias"], float("inf"))}),
    "a tensor missing": _lens_tensors(lambda t: {k: v for k, v in t.items() if k != "weight_scale"}),
    "shapes that do not fit": _lens_tensors(lambda t: {**t, "bias": torch.zeros(5, 3, dtype=t["bias"].dtype)}),
    "tuned.json a list": lambda d: (d / "tuned.json").write_text("[1]"),
    "tuned.json model a number": lambda d: edit_json(d / "tuned.json", lambda j: j.update(model=3)),
    "tuned.json missing": lambda d: (d / "tuned.json").unlink(),
}


@pytest.mark.parametrize("how", list(LENS_DAMAGE))
def test_damaged_tuned_lens_is_refused(tmp_path, how):
    from attribution.lens.tuned import TunedLens

    d = _lens_dir(tmp_path)
    assert TunedLens.load(d).weight.shape == (2, 8, 8)
    LENS_DAMAGE[how](d)
    with pytest.raises(ModelFileError, match="tuned lens"):
        TunedLens.load(d)


def test_symlinked_lens_directory_is_refused(tmp_path):
    from attribution.lens.tuned import TunedLens

    d = _lens_dir(tmp_path)
    (tmp_path / "linked").symlink_to(d, target_is_directory=True)
    with pytest.raises(ModelFileError, match="symlink"):
        TunedLens.load(tmp_path / "linked")


# -- model folders (a toy model's converted safetensors + config.json) -------------------------------------
MODEL_DAMAGE = {
    "weights truncated": lambda d: truncate(d / "model.safetensors"),
    "weights zeroed": lambda d: zero(d / "model.safetensors"),
    "weights garbage": lambda d: garbage(d / "model.safetensors"),
    "config layers 10^9": lambda d: edit_json(d / "config.json", lambda c: c["tiny"].update(layers=10**9)),
    "config d_model 'abc'": lambda d: edit_json(d / "config.json", lambda c: c["tiny"].update(d_model="abc")),
    "config vocab a number": lambda d: edit_json(d / "config.json", lambda c: c["tiny"].update(vocab=3)),
}


@pytest.mark.parametrize("how", list(MODEL_DAMAGE))
def test_damaged_model_folder_is_one_line(tiny_dir, tmp_path, monkeypatch, capsys, how):
    d = tmp_path / "model"
    shutil.copytree(tiny_dir, d)
    MODEL_DAMAGE[how](d)
    code, out, err = run_cli(monkeypatch, capsys, "info", str(d), "--json")
    assert_bad(code, err)
    assert "damaged" in err or "within" in err or "not" in err, err


# -- commands that accepted what they cannot do (class 4) and refused results that left files (class 6) -----
def test_lens_of_a_vision_model(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "lens", "vit-synth", "a b", "--no-save", "--json")
    assert_bad(code, err, "not for vision models")


@pytest.mark.parametrize("args, words", [
    (["circuit", "discover", "--model", TOY, "--prompts", "task", "--method", "eap_ig", "--param", "steps=abc"],
     ("steps",)),
    (["circuit", "discover", "--model", TOY, "--prompts", "task", "--method", "eap_ig", "--param", "steps=10000000"],
     ("steps",)),
    (["circuit", "discover", "--model", TOY, "--prompts", "task", "--method", "dpa", "--param", "act_mode=3"],
     ("act_mode",)),
    (["sae", "steer", "--sae", "nosuch", "--feature", "0", "--prompt", "x", "--alpha", "1", "--tokens", "1000000"],
     ("--tokens",)),
])
def test_options_refused_before_work(monkeypatch, capsys, args, words):
    assert_bad(*run_cli(monkeypatch, capsys, *args)[::2], *words)


def test_sae_train_out_an_existing_file(tmp_path, monkeypatch, capsys):
    f = tmp_path / "existing.txt"
    f.write_text("x")
    code, out, err = run_cli(monkeypatch, capsys, "sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post",
                             "--tokens", "256", "--out", str(f))
    assert_bad(code, err, "not a directory")
    assert f.read_text() == "x"


def test_diverged_sae_leaves_nothing(tmp_path, monkeypatch, capsys):
    runs = Path(os.environ["WORKBENCH_RUNS"])
    out_dir = tmp_path / "sae-out"
    code, out, err = run_cli(monkeypatch, capsys, "sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post",
                             "--tokens", "512", "--width", "16", "--k", "4", "--epochs", "1", "--lr", "1e30",
                             "--out", str(out_dir), "--json")
    assert_bad(code, err, "not saved", "not finite")
    assert not out_dir.exists() and out == ""
    left = [p for p in runs.rglob("*") if p.is_file() and not p.name.startswith(("index.sqlite", "costs"))
            and ".jobs" not in p.parts]
    assert left == []


def test_estimate_is_never_printed_before_an_error(tmp_path, monkeypatch, capsys):
    """A job whose shape has a recorded cost prints its estimate, but only once its inputs are checked: bad
    input (a target of two tokens) is its one error line."""
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    rows = [{"prompt": "N1 and N2 then N2", "target": "N1", "foil": "N2"}] * 2
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad.write_text("".join(json.dumps({**r, "target": "N1 N2"}) + "\n" for r in rows))
    args = ("faithfulness", "--model", TOY, "--methods", "random", "--no-save", "--json", "--prompts")
    for _ in range(2):
        code, out, err = run_cli(monkeypatch, capsys, *args, str(good))
        assert code == 0, err
    assert "estimate:" in err
    code, out, err = run_cli(monkeypatch, capsys, *args, str(bad))
    assert_bad(code, err, "N1 N2")


CHECKPOINT_DAMAGE = {
    "weights truncated": lambda d: truncate(d / "model.safetensors"),
    "weights garbage": lambda d: garbage(d / "model.safetensors"),
    "layers 10^9": lambda d: edit_json(d / "config.json", lambda c: c["model"].update(layers=10**9)),
    "d_model 'abc'": lambda d: edit_json(d / "config.json", lambda c: c["model"].update(d_model="abc")),
    "model a list": lambda d: edit_json(d / "config.json", lambda c: c.update(model=[1])),
    "task params a string": lambda d: edit_json(d / "config.json", lambda c: c["task"].update(params="x")),
    "config.json garbage": lambda d: garbage(d / "config.json"),
}


@pytest.mark.parametrize("how", list(CHECKPOINT_DAMAGE))
def test_damaged_toy_checkpoint_is_one_line(tmp_path, monkeypatch, capsys, how):
    from core.models.zoo import DATA_DIR

    d = tmp_path / "toy"
    shutil.copytree(DATA_DIR / "models" / TOY, d)
    CHECKPOINT_DAMAGE[how](d)
    code, out, err = run_cli(monkeypatch, capsys, "info", str(d), "--json")
    assert_bad(code, err)
