"""Sharding over items and corpus shards (issue 16): activation patching computed in item ranges, and SAE
activation caching computed shard by shard, give exactly the single-process numbers and files; one Ray test
checks two local workers against one process for both."""

from __future__ import annotations

import gzip
import json

import pytest
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

PROMPT = "the cat sat on a mat and the dog ran to"


def _enc(model):
    top = model.logits(model.to_tokens(PROMPT))[0, -1].topk(2).indices.tolist()
    return model.encode(PROMPT, model.decode([top[0]]), model.decode([top[1]]))


@pytest.mark.parametrize("level,per_position", [("head", False), ("neuron", False), ("head", True)])
def test_patching_ranges_add_up_to_the_whole(tiny_llama, one_thread, level, per_position):
    import math

    import torch

    from attribution.baselines.patching import item_shape, patching_scores
    from workbench.scheduler.kinds import split

    enc = _enc(tiny_llama)
    args = dict(level=level, per_position=per_position, batch_size=2)
    whole = patching_scores(tiny_llama, enc, **args)
    n = math.prod(item_shape(tiny_llama, enc.seq_len, level, per_position))
    ranges = split(n, 3, 2)
    assert len(ranges) == 3 and all(a % 2 == 0 for a, _ in ranges)
    parts = [patching_scores(tiny_llama, enc, items=r, **args) for r in ranges]
    total = sum(p.scores for p in parts[1:]) + parts[0].scores
    assert torch.equal(total, whole.scores) and whole.scores.abs().sum() > 0
    assert all(p.target_logit == whole.target_logit for p in parts)
    with pytest.raises(Exception, match="out of range"):
        patching_scores(tiny_llama, enc, items=(0, n + 1), **args)


def test_attribute_job_parts_merge_to_the_single_run(tiny_llama_dir, one_thread):
    """The attribute kind's shards (k of K), run here one after another, finish into the one-shard result."""
    import torch

    import workbench as wb
    from workbench.scheduler.kinds import get_kind
    from workbench.scheduler.worker import Report

    model = wb.load(str(tiny_llama_dir))
    enc = _enc(model)
    spec = {"kind": "attribute", "model": str(tiny_llama_dir), "prompt": PROMPT, "target": enc.target,
            "foil": enc.foil, "method": "activation_patching", "level": "neuron", "position": None,
            "params": {"batch_size": 16}}
    kind = get_kind("attribute")
    steps = []
    report = Report(lambda n: None, steps.append)

    def run(workers):
        shards = kind.shards(spec, workers)
        return kind.finish(spec, [kind.run_shard(spec, s, report) for s in shards])

    one, three = run(1), run(3)
    assert torch.equal(one.scores, three.scores) and one.scores.abs().sum() > 0
    assert sum(steps) == 2 * kind.items(spec) == 2 * 2 * 64
    assert kind.cost_key(spec).startswith(f"{tiny_llama_dir}|activation_patching|neuron|0|")
    assert kind.measure(spec) > 0
    dpa = {**spec, "method": "dpa", "level": "head"}
    assert kind.shards(dpa, 4) == [(0, 1)] and kind.items(dpa) == 1


# -- SAE activation caching over corpus shards --------------------------------------------------------
HOOKS = ["blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny English-corpus file (the format of data/corpus/english.jsonl.gz)."""
    words = "the cat sat on a mat while a dog ran to the big red house and we all went home".split()
    path = tmp_path_factory.mktemp("corpus") / "english.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for i in range(60):
            text = " ".join(words[(i * 7 + j * (i % 5 + 1)) % len(words)] for j in range(40 + i % 30))
            fh.write(json.dumps({"text": text.capitalize() + ".", "split": "train"}) + "\n")
    return path


def _files(root) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if not p.name.startswith(".")}


def _cache_spec(model_dir, corpus, out, tokens=1500) -> dict:
    return {"kind": "sae_cache", "model": str(model_dir), "hooks": HOOKS, "split": "train", "corpus": str(corpus),
            "out": str(out), "tokens": tokens, "ctx": 32, "batch_size": 4, "shard_tokens": 200, "skip_first": 1,
            "bf16": True}


def test_sae_cache_shards_written_apart_are_the_single_pass_files(tiny_llama_dir, corpus, tmp_path, one_thread):
    """Three pieces of the sae_cache job, run one after another here, write exactly cache_shards' files; a
    second job asking for more tokens extends the cache as one pass would."""
    import workbench as wb
    from attribution.sae.shards import cache_shards
    from core.corpus import english_texts
    from workbench.scheduler.kinds import get_kind
    from workbench.scheduler.worker import Report

    model = wb.load(str(tiny_llama_dir))
    kind = get_kind("sae_cache")
    steps = []
    for tokens in (1500, 2500):
        cache_shards(model, HOOKS, english_texts("train", corpus), tmp_path / "one", tokens, ctx=32, batch_size=4,
                     shard_tokens=200)
        spec = _cache_spec(tiny_llama_dir, corpus, tmp_path / "three", tokens)
        parts = [kind.run_shard(spec, s, Report(lambda n: None, steps.append)) for s in kind.shards(spec, 3)]
        res = kind.finish(spec, parts)
        one, three = _files(tmp_path / "one"), _files(tmp_path / "three")
        assert len(one) > 4 and one == three
        assert res.to_json()["shards"] == len(one) - 1 and res.to_json()["tokens"] >= tokens
    assert sum(steps) == res.to_json()["tokens"]


def test_sae_cache_command_runs_a_job_and_refuses_bad_input(tiny_llama_dir, corpus, tmp_path, monkeypatch, capsys,
                                                            one_thread):
    from core.store import RunStore

    base = ("sae", "cache", "--model", str(tiny_llama_dir), "--corpus", str(corpus), "--ctx", "32",
            "--tokens", "600", "--shard-tokens", "200", "--out", str(tmp_path / "c"))
    code, out, err = cli(monkeypatch, capsys, *base, "--hooks", ",".join(HOOKS), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["shards"] >= 2 and got["tokens"] >= 600 and got["hooks"] == HOOKS
    assert RunStore().get(got["run"]).meta["kind"] == "sae-cache"
    assert_bad(*cli(monkeypatch, capsys, *base, "--hooks", "blocks.9.hook_resid_post")[::2], "blocks.9")
    assert_bad(*cli(monkeypatch, capsys, *base, "--hooks", " , ")[::2], "--hooks")
    assert_bad(*cli(monkeypatch, capsys, *base, "--hooks", HOOKS[0], "--split", "dev")[::2], "split")
    assert_bad(*cli(monkeypatch, capsys, *base, "--hooks", HOOKS[0], "--workers", "0")[::2], "--workers")
    assert_bad(*cli(monkeypatch, capsys, "sae", "cache", "--model", str(tiny_llama_dir), "--hooks", HOOKS[0],
                    "--corpus", str(tmp_path / "none.gz"))[::2], "no English corpus")


def test_sae_cache_default_directory_leaves_another_hooks_shards_alone(tiny_llama_dir, corpus, tmp_path,
                                                                       monkeypatch, capsys, one_thread):
    """README lines 112 then 192: `sae train` on one hook caches into the split's default directory; `sae cache`
    of another hook without --out then goes to that hook's own directory (the one `sae train` reads back), not
    into the first one's, which it used to refuse ("holds shards cached with other settings")."""
    from attribution.sae.build import shard_dir, shards_root
    from core.models import zoo

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    base = ("sae", "cache", "--model", str(tiny_llama_dir), "--corpus", str(corpus), "--ctx", "32",
            "--tokens", "400", "--shard-tokens", "200", "--json")
    outs = []
    for hook in HOOKS:
        code, out, err = cli(monkeypatch, capsys, *base, "--hooks", hook)
        assert code == 0, err
        got = json.loads(out)
        assert got["hooks"] == [hook] and got["tokens"] >= 400
        outs.append(got["out"])
    name = zoo.resolve(str(tiny_llama_dir)).name
    root = (shards_root(name) / "train").resolve()
    assert outs == [str(root), str(root.parent / "train-blocks_1_hook_mlp_out")]
    assert [str(shard_dir(name, [h], "train").resolve()) for h in HOOKS] == outs  # where `sae train` reads
    code, out, err = cli(monkeypatch, capsys, *base, "--hooks", HOOKS[1], "--tokens", "600")  # resumes its own
    assert code == 0, err
    assert json.loads(out)["out"] == outs[1] and json.loads(out)["tokens"] >= 600


def test_sae_train_job_counts_training_steps(tmp_path, one_thread):
    """sae_train as a job (here): progress is training steps, and the run is the one `sae train` saves."""
    from core.models.tiny import save_tiny
    from core.store import RunStore
    from workbench.scheduler import run

    tiny = str(save_tiny(tmp_path / "tiny", layers=2))
    spec = {"kind": "sae_train", "model": tiny, "hook": "blocks.1.hook_resid_post", "tokens": 600,
            "sae_kind": "topk", "width": 32, "k": 4, "epochs": 1.0, "lr": 4e-4, "batch_size": 64, "l1": 0.5,
            "l0": 1.0, "ctx": 32, "corpus": None, "out": str(tmp_path / "sae"), "seed": 0, "keep_first": False}
    job, res = run(spec)
    assert job.state == "done" and job.total == job.done and 5 <= job.total <= 10  # ~570 tokens / 64
    run_ = RunStore().get(job.run_id)
    assert run_.meta["kind"] == "sae" and res.result["path"] == str(tmp_path / "sae")
    assert (tmp_path / "sae" / "cfg.json").exists()


@pytest.mark.slow
def test_two_ray_workers_match_one_process(tiny_llama_dir, corpus, tmp_path, monkeypatch, capsys, one_thread):
    """On a local Ray instance: activation patching of heads sharded over two workers gives exactly the
    in-process scores; SAE caching over two workers writes exactly the one-process files; sae train runs
    as a job with --ray-address."""
    import workbench as wb
    from workbench.scheduler import JobBoard

    model = wb.load(str(tiny_llama_dir))
    enc = _enc(model)
    base = ("attribute", str(tiny_llama_dir), PROMPT, "--target", enc.target, "--foil", enc.foil, "--method",
            "activation_patching", "--level", "head", "--param", "batch_size=2", "--no-save", "--json")
    code, out, err = cli(monkeypatch, capsys, *base)
    assert code == 0, err
    here = json.loads(out)
    code, out, err = cli(monkeypatch, capsys, *base, "--workers", "2")
    assert code == 0, err
    on_ray = json.loads(out)
    assert on_ray["scores"] == here["scores"] and any(any(row) for row in here["scores"][0])
    job = JobBoard().get(on_ray["job_id"])
    assert job.state == "done" and job.total == 8 and sum("started (pid" in line for line in job.log) == 2

    from attribution.sae.shards import cache_shards
    from core.corpus import english_texts

    spec = _cache_spec(tiny_llama_dir, corpus, tmp_path / "one")
    cache_shards(model, HOOKS, english_texts("train", corpus), tmp_path / "one", spec["tokens"], ctx=32,
                 batch_size=4, shard_tokens=200)
    code, out, err = cli(monkeypatch, capsys, "sae", "cache", "--model", str(tiny_llama_dir), "--hooks",
                         ",".join(HOOKS), "--corpus", str(corpus), "--ctx", "32", "--batch-size", "4",
                         "--tokens", str(spec["tokens"]), "--shard-tokens", "200", "--out", str(tmp_path / "two"),
                         "--workers", "2", "--json")
    assert code == 0, err
    assert len(_files(tmp_path / "one")) > 4 and _files(tmp_path / "one") == _files(tmp_path / "two")
    job = JobBoard().get(json.loads(out)["job_id"])
    assert job.workers == 2 and sum("started (pid" in line for line in job.log) == 2

    from core.models.tiny import save_tiny

    tiny = str(save_tiny(tmp_path / "toy", layers=2))
    code, out, err = cli(monkeypatch, capsys, "sae", "train", "--model", tiny, "--hook", "blocks.1.hook_resid_post",
                         "--tokens", "600", "--width", "32", "--k", "4", "--epochs", "1", "--batch-size", "64",
                         "--out", str(tmp_path / "sae"), "--ray-address", "local", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["run"] and (tmp_path / "sae" / "cfg.json").exists()
    assert JobBoard().get(got["job_id"]).ray_address == "local"
