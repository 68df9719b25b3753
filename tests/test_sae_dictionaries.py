"""Dictionaries from disk shards: sink exclusion, resumable caching and training, normalization
folded into the saved weights, SAELens round trips, held-out metrics, and bad input."""

from __future__ import annotations

import json

import pytest
import torch

from attribution.sae.build import BuildSpec, build_dictionary, transcoder_input
from attribution.sae.dictionary import list_dictionaries, load_dictionary
from attribution.sae.shards import ShardSet, cache_shards, shard_batches
from attribution.sae.train_shards import (
    _TopKSkipTranscoder,
    save_transcoder,
    train_topk_transcoder,
)
from core.errors import DatasetError, ModelFileError, RangeError
from core.models.tiny import tiny_model

HOOKS = ["blocks.1.hook_resid_post", "blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out"]


@pytest.fixture(scope="module")
def model():
    return tiny_model(layers=2, d_model=16, n_ctx=32)


def _texts(n: int = 120, length: int = 24, vocab: int = 10):
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (n, length), generator=gen).tolist()


@pytest.fixture(scope="module")
def shards(model, tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    train = cache_shards(model, HOOKS, _texts(), root / "train", 2000, ctx=24, shard_tokens=500, bf16=False)
    held = cache_shards(model, HOOKS, _texts(40)[::-1], root / "held", 600, ctx=24, shard_tokens=500, bf16=False)
    return train, held


def test_sink_is_left_out_unless_asked(model, tmp_path):
    s = cache_shards(model, HOOKS[:1], _texts(10), tmp_path / "a", 100, ctx=24, bf16=False)
    where = s.load(0)["where"]
    assert int(where[:, 1].min()) == 1
    kept = cache_shards(model, HOOKS[:1], _texts(10), tmp_path / "b", 100, ctx=24, bf16=False, skip_first=0)
    assert int(kept.load(0)["where"][:, 1].min()) == 0
    # the stored activation at (window, position) is the model's own activation there
    _, cache = model.run_with_cache(torch.tensor([_texts(10)[0]]), names_filter=HOOKS[:1])
    first = s.load(0)
    rows = (first["where"][:, 0] == 0).nonzero()[:, 0]
    assert torch.allclose(first[HOOKS[0]][rows].float(), cache[HOOKS[0]][0, 1:].half().float())


def test_caching_resumes_and_refuses_other_settings(model, tmp_path):
    out = tmp_path / "r"
    part = cache_shards(model, HOOKS[:1], _texts(), out, 400, ctx=24, shard_tokens=100, bf16=False)
    done = part.manifest["windows_done"]
    full = cache_shards(model, HOOKS[:1], _texts(), out, 900, ctx=24, shard_tokens=100, bf16=False)
    assert full.n_tokens >= 900 and full.manifest["windows_done"] > done
    once = cache_shards(model, HOOKS[:1], _texts(), tmp_path / "once", 900, ctx=24, shard_tokens=100, bf16=False)
    assert torch.equal(full.tensor(HOOKS[0], 900), once.tensor(HOOKS[0], 900))  # same windows, same order
    with pytest.raises(DatasetError, match="other settings"):
        cache_shards(model, HOOKS[1:2], _texts(), out, 900, ctx=24, bf16=False)


def test_shard_batches_resume_skips_what_was_served(shards):
    train, _ = shards
    a = shard_batches(train, HOOKS[0], 64, seed=3)
    first = [next(a) for _ in range(5)]
    b = shard_batches(train, HOOKS[0], 64, seed=3, skip=3)
    assert torch.equal(next(b), first[3])


def test_transcoder_normalization_folds_into_saved_weights(tmp_path):
    """Training sees x*s_in and y*s_out; the saved JumpReLU skip transcoder maps raw x to raw y."""
    d, width = 8, 12
    tc = _TopKSkipTranscoder(d, d, width, k=width, seed=0)  # k = width: TopK is plain ReLU
    with torch.no_grad():
        for p in tc.params.values():
            p.add_(torch.randn_like(p) * 0.3)
    s_in, s_out = 3.0, 0.25
    tc.standardize(torch.randn(200, d) * torch.rand(d) * 4 + torch.randn(d) * 5)  # the encoder's own scaling
    weights = tc.folded(s_in, s_out)
    save_transcoder(weights, 0.0, tmp_path, "m", "blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out")
    dic = load_dictionary(tmp_path)
    x = torch.randn(20, d)
    y_scaled, f, _ = tc.forward(x * s_in)
    assert dic.is_transcoder and dic.hook_out == "blocks.0.hook_mlp_out"
    assert torch.allclose(dic.encode(x), f, atol=1e-5)
    assert torch.allclose(dic.reconstruct(x), y_scaled / s_out, atol=1e-4)


def test_transcoder_encoder_standardizes_an_outlier_dimension():
    """An input whose first dimension is large and nearly constant (gemma3-270m's MLP inputs): unstandardized,
    a few features win TopK on every token; standardized, most features win somewhere from the start."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 16, generator=gen)
    x[:, 0] = 60 + 0.5 * torch.randn(2000, generator=gen)
    tc = _TopKSkipTranscoder(16, 16, 64, k=4, seed=0)

    def winners() -> int:
        _, f, _ = tc.forward(x)
        return int((f > 0).any(0).sum())

    plain = winners()
    tc.standardize(x)
    assert plain <= 16 and winners() >= 48


def test_transcoder_training_resumes_from_checkpoint(shards, tmp_path):
    train, _ = shards
    ckpt = tmp_path / "ckpt"
    train_topk_transcoder(train, HOOKS[1], HOOKS[2], 24, 4, 64 * 6, ckpt, batch_size=64, checkpoint_every=3)
    from safetensors.torch import load_file

    assert int(load_file(str(ckpt / "transcoder_state.safetensors"))["step"]) == 6
    w = train_topk_transcoder(train, HOOKS[1], HOOKS[2], 24, 4, 64 * 9, ckpt, batch_size=64, checkpoint_every=3)
    assert int(load_file(str(ckpt / "transcoder_state.safetensors"))["step"]) == 9
    assert w["W_enc"].shape == (16, 24) and w["scale_in"] > 0


@pytest.mark.parametrize("kind,hook", [("topk", HOOKS[0]), ("transcoder", HOOKS[1])])
def test_build_saves_saelens_format_with_heldout_metrics(model, shards, tmp_path, kind, hook):
    train, held = shards
    spec = BuildSpec(hook=hook, kind=kind, width=32, k=4, tokens=1800, batch_size=64, lr=3e-3)
    info = build_dictionary(model, spec, tmp_path / kind, None, train, held, eval_windows=8, half=True)
    cfg = json.loads((tmp_path / kind / "cfg.json").read_text())
    arch = "topk" if kind == "topk" else "jumprelu_skip_transcoder"
    assert cfg["dtype"] == "float16" and cfg["architecture"] == arch
    m = info["metrics"]
    for key in ("explained_variance", "explained_variance_no_top2", "l0", "dead_fraction", "dense_fraction",
                "ce_loss_delta"):
        assert key in m and m[key] == m[key]
    assert 0 < m["l0"] <= (4 if kind == "topk" else 32)
    assert m["explained_variance"] > 0.2  # it learned something on held-out activations
    dic = load_dictionary(tmp_path / kind)
    assert dic.W_dec.dtype == torch.float32  # stored in float16, computed in float32
    assert dic.kind == kind and dic.layer == 1 and dic.hook == hook
    if kind == "topk":
        assert info["activation_scale"] and info["activation_scale"] > 0
    assert [d.name for d in list_dictionaries(tmp_path)] == [kind]


def test_damaged_dictionary_is_skipped_in_listing(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "cfg.json").write_text("{not json")
    with pytest.warns(UserWarning, match="damaged"):
        assert list_dictionaries(tmp_path) == []
    with pytest.raises(ModelFileError):
        load_dictionary(tmp_path / "broken")


def test_bad_specs():
    with pytest.raises(RangeError):
        BuildSpec(hook="hook_embed").layer  # noqa: B018
    with pytest.raises(RangeError):
        transcoder_input("embed")
    assert transcoder_input("blocks.3.hook_mlp_out") == "blocks.3.ln2.hook_normalized"


def test_shardset_open_missing(tmp_path):
    with pytest.raises(DatasetError):
        ShardSet.open(tmp_path / "nope")


def test_cli_bad_input_exit_2(tmp_path, monkeypatch, capsys):
    from cli_helpers import run_cli

    from core.models.tiny import save_tiny

    tiny = str(save_tiny(tmp_path / "tiny", layers=2))
    code, _, err = run_cli(monkeypatch, capsys, "sae", "train", "--model", tiny, "--hook",
                           "blocks.1.hook_mlp_out", "--kind", "transcoder")
    assert code == 2 and "English corpus" in err and "Traceback" not in err
    code, _, err = run_cli(monkeypatch, capsys, "sae", "train", "--model", tiny, "--hook",
                           "blocks.9.hook_resid_post", "--tokens", "600")
    assert code == 2 and "blocks.9" in err
