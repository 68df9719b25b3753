"""Models by Hugging Face name, offline: tiny random models written into a temporary cache in the hub's layout
(models--ORG--NAME/snapshots/REV/... with refs/main), loaded by hub id and by TransformerLens short name;
uncached ids, unsupported architectures and damaged snapshots are one line (exit 2 from the CLI)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from family_models import IDS, save_family

import workbench as wb
from core.errors import ModelFileError

REV = "0123456789abcdef0123456789abcdef01234567"


def _put(cache, repo: str, src) -> object:
    """Copy a model folder into ``cache`` as the hub's cache layout holds it (blobs linked from a snapshot)."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / REV
    blobs = repo_dir / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir(exist_ok=True)
    for i, file in enumerate(sorted(src.iterdir())):
        blob = blobs / f"blob{i:04d}"
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(blob)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(REV)
    return snapshot


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    cache = root / "hub"
    made = {}
    for family, repo in (("llama", "tiny-org/tiny-llama"), ("gpt_neox", "EleutherAI/pythia-70m"),
                         ("gpt2", "openai-community/gpt2"), ("qwen3", "tiny-org/tiny-qwen3")):
        src = save_family(root / "src" / family, family)
        made[repo] = (_put(cache, repo, src), src)
    bloom = save_family(root / "src" / "bloom", "llama")
    config = json.loads((bloom / "config.json").read_text())
    config["architectures"] = ["BloomForCausalLM"]
    (bloom / "config.json").write_text(json.dumps(config))
    _put(cache, "tiny-org/tiny-bloom", bloom)
    return cache, made


@pytest.fixture
def offline(hub_cache, monkeypatch):
    cache, made = hub_cache
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache, made


def test_hub_id_loads_from_the_cache(offline):
    _, made = offline
    m = wb.load("tiny-org/tiny-llama")
    direct = wb.load(str(made["tiny-org/tiny-llama"][1]))
    tokens = torch.tensor([IDS])
    assert m.name == "tiny-org/tiny-llama"
    assert torch.equal(m.logits(tokens), direct.logits(tokens))
    assert wb.load("tiny-org/tiny-qwen3").arch.qk_norm == "head"


def test_transformer_lens_short_names(offline):
    pythia = wb.load("pythia-70m")  # TransformerLens alias -> EleutherAI/pythia-70m
    assert pythia.info["architecture"] == "GPTNeoXForCausalLM" and pythia.arch.parallel
    gpt2 = wb.load("gpt2-small")  # alias -> gpt2, which the hub now keeps as openai-community/gpt2
    assert gpt2.info["architecture"] == "GPT2LMHeadModel"


def test_models_lists_cached_supported_models(offline):
    from core.models.zoo import list_models

    names = {e.name: e for e in list_models()}
    assert {"tiny-org/tiny-llama", "EleutherAI/pythia-70m", "openai-community/gpt2"} <= set(names)
    assert "tiny-org/tiny-bloom" not in names  # unsupported architecture: not offered
    assert names["tiny-org/tiny-llama"].params > 1000 and names["tiny-org/tiny-llama"].kind == "llm"


def test_uncached_unsupported_and_damaged_are_one_line(offline):
    cache, made = offline
    with pytest.raises(ModelFileError, match="'nobody/nothing' is not in the Hugging Face cache") as err:
        wb.load("nobody/nothing")
    assert "hf download nobody/nothing" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ModelFileError, match="BloomForCausalLM is not supported; supported families"):
        wb.load("tiny-org/tiny-bloom")
    snapshot = made["tiny-org/tiny-llama"][0]
    weights = snapshot / "model.safetensors"
    blob = weights.resolve()
    data = blob.read_bytes()
    try:
        blob.write_bytes(data[: len(data) // 2])
        with pytest.raises(ModelFileError, match="truncated|corrupt"):
            wb.load("tiny-org/tiny-llama")
        blob.write_bytes(data)
        config = (snapshot / "config.json").resolve()
        saved = config.read_bytes()
        config.unlink()
        with pytest.raises(ModelFileError, match="no config.json"):
            wb.load("tiny-org/tiny-llama")
        config.write_bytes(saved)
    finally:
        blob.write_bytes(data)


def test_pickle_only_folder_is_refused_up_front(tmp_path, offline):
    _, made = offline
    folder = tmp_path / "pickled"
    shutil.copytree(made["tiny-org/tiny-llama"][1], folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(ModelFileError, match="only pickle weights \\(pytorch_model.bin\\); the workbench loads "
                                             "safetensors only"):
        wb.load(str(folder))


def test_cli_one_line_exit_2(offline, tmp_path):
    cache, _ = offline
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           "WORKBENCH_RUNS": str(tmp_path / "runs"), "HOME": str(tmp_path)}
    for args in (["info", "nobody/nothing"], ["info", "tiny-org/tiny-bloom"], ["info", "tiny-org/tiny-llama",
                                                                                  "--dtype", "float64"],
                 ["attribute", "nobody/nothing", "a b", "--target", " c", "--json"]):
        out = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
    ok = subprocess.run([sys.executable, "-m", "workbench.cli", "info", "tiny-org/tiny-llama", "--json"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["arch"]["n_layers"] == 2
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(p for p in runs.iterdir() if not p.name.startswith("."))


def test_damaged_converted_cache_and_absurd_config(tmp_path, monkeypatch, offline):
    """A built-in model's converted cache that is truncated says how to rebuild it; a config asking for 10^9
    layers or holding garbage is refused before anything is built."""
    _, made = offline
    cache = tmp_path / "wbcache"
    target = cache / "smollm2-135m"
    shutil.copytree(made["tiny-org/tiny-llama"][1], target)
    (target / "workbench.json").write_text(json.dumps({"cache_version": 1}))
    weights = target / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    monkeypatch.setenv("WORKBENCH_CACHE", str(cache))
    hint = "rebuild it with `workbench prepare --model smollm2-135m --force`"
    with pytest.raises(ModelFileError, match="(truncated|corrupt).*" + hint):
        wb.load("smollm2-135m")
    folder = tmp_path / "huge"
    shutil.copytree(made["tiny-org/tiny-llama"][1], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10**9}))
    with pytest.raises(ModelFileError, match="num_hidden_layers is '1000000000', not a whole number in 1..1024"):
        wb.load(str(folder))
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="config.json"):
        wb.load(str(folder))
