"""Pretrained dictionaries by name (attribution/sae/pretrained.py, issue 53 item 5): SAELens' registry resolves
``pretrained:RELEASE/ID``; with the hub unreachable the refusal is one line; a local folder laid out as the release
(written by SAELens' own save code) loads through SAELens' from_pretrained, is converted once into the user's cache
(Gemma Scope 2's norm weight folded into the encoder and skip) and then serves `sae list`, the feature graph and
the replacement model with no model and no network."""

from __future__ import annotations

import json

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from attribution.sae.pretrained import MIRROR_ENV, load_pretrained, local_dir, parse_ref, sae_ids
from core.errors import ModelFileError, RangeError

RELEASE = "gemma-scope-2-270m-pt-transcoders-all"
REPO = "google/gemma-scope-2-270m-pt"
IDS = {3: "layer_3_width_16k_l0_small_affine", 5: "layer_5_width_16k_l0_small_affine"}
REF = f"pretrained:{RELEASE}/layer_[35]_width_16k_l0_small_affine"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    return tmp_path


def test_references_resolve_through_the_registry():
    assert parse_ref(f"pretrained:{RELEASE}/{IDS[3]}") == (RELEASE, IDS[3])
    assert sae_ids(RELEASE, "layer_[35]_width_16k_l0_small_affine") == [IDS[3], IDS[5]]
    assert len(sae_ids(RELEASE, "layer_*_width_16k_l0_small_affine")) == 18  # one per layer of gemma-3-270m
    with pytest.raises(RangeError, match="did you mean gemma-scope-2-270m-pt-transcoders"):
        sae_ids("gemma-scope-2-270m-pt-transcoder", "x")
    with pytest.raises(RangeError, match="has no id"):
        sae_ids(RELEASE, "layer_99_*")
    with pytest.raises(RangeError, match="RELEASE/SAE_ID"):
        parse_ref("pretrained:only-a-release")


def test_unreachable_hub_is_one_line(offline):
    with pytest.raises(ModelFileError, match="HF_HUB_OFFLINE is set") as e:
        load_pretrained(f"pretrained:{RELEASE}/{IDS[3]}")
    assert "\n" not in str(e.value) and "not converted" in str(e.value)


def test_unreachable_hub_cli_exit_2(offline, monkeypatch, capsys):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("WORKBENCH_HUB_TIMEOUT", "2")
    code, _, err = cli(monkeypatch, capsys, "sae", "pull", f"{RELEASE}/{IDS[3]}")
    # the bounded look-up's progress line, then the refusal: one error line, exit 2, no traceback
    lines = err.strip().splitlines()
    assert lines[0].startswith("looking up google/gemma-scope-2-270m-pt")
    assert_bad(code, lines[-1], "hub cannot be reached")
    code, _, err = cli(monkeypatch, capsys, "feature-graph", "--model", "gemma3-270m", "--prompt", "Hi", "--saes",
                       f"pretrained:{RELEASE}/layer_99_x")
    assert_bad(code, err, "has no id")


def _write_release(root, d_model: int, layers=(3, 5), width: int = 48) -> dict[int, object]:
    """A local folder laid out as the release's repository, each id's folder written by SAELens' save_model."""
    from sae_lens.saes.sae import SAEMetadata
    from sae_lens.saes.transcoder import JumpReLUSkipTranscoder, JumpReLUSkipTranscoderConfig

    from attribution.sae.pretrained import release_info

    info = release_info(RELEASE)
    out = {}
    g = torch.Generator().manual_seed(0)
    for layer in layers:
        cfg = JumpReLUSkipTranscoderConfig(
            d_in=d_model, d_sae=width, d_out=d_model, apply_b_dec_to_input=False,
            metadata=SAEMetadata(model_name="google/gemma-3-270m", hook_name=f"blocks.{layer}.hook_mlp_in",
                                 hook_name_out=f"blocks.{layer}.hook_mlp_out",
                                 hf_hook_name=f"model.layers.{layer}.pre_feedforward_layernorm.output"))
        tc = JumpReLUSkipTranscoder(cfg)
        with torch.no_grad():
            tc.W_dec.copy_(torch.randn(width, d_model, generator=g) * 0.05)
            tc.W_enc.copy_(torch.randn(d_model, width, generator=g) * 0.05)
            tc.W_skip.copy_(torch.randn(d_model, d_model, generator=g) * 0.01)
            tc.b_dec.copy_(torch.randn(d_model, generator=g) * 0.01)
            tc.threshold.fill_(0.05)
        tc.save_model(str(root / info.repo_id / info.saes_map[IDS[layer]]))
        out[layer] = tc
    return out


@pytest.fixture(scope="module")
def gemma():
    import workbench as wb

    try:
        return wb.load("gemma3-270m")
    except Exception as exc:  # not converted on this machine
        pytest.skip(f"gemma3-270m is not available offline here: {exc}")


def test_a_local_release_loads_converts_and_serves_the_graph(gemma, offline, monkeypatch, capsys):
    mirror = offline / "releases"
    originals = _write_release(mirror, gemma.arch.d_model)
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    dicts = load_pretrained(REF, gemma)
    assert [d.layer for d in dicts] == [3, 5]
    d = dicts[0]
    assert d.hook == "blocks.3.ln2.hook_normalized" and d.hook_out == "blocks.3.hook_mlp_out" and d.is_transcoder
    assert d.path == local_dir(RELEASE, IDS[3]) and json.loads((d.path / "workbench.json").read_text())["source"][
        "norm_weight_folded"]
    # the fold: the converted dictionary on ln2.hook_normalized equals the release's on the norm's output
    tokens = gemma.to_tokens("When Mary and John went to the store, John gave a drink to")
    with torch.no_grad():
        _, cache = gemma.run_with_cache(tokens, names_filter=["blocks.3.ln2.hook_normalized"])
        x = cache["blocks.3.ln2.hook_normalized"][0].float()
        w = gemma.norm_sites(3)["mlp_pre"].w.float()
        want = originals[3].encode(x * w)
        assert int((want > 0).sum()) > 10  # features fire: the comparison is not of zeros
        assert torch.allclose(d.encode(x), want, atol=1e-4, rtol=1e-3)
        assert torch.allclose(d.reconstruct(x), originals[3].decode(want) + (x * w) @ originals[3].W_skip.T,
                              atol=1e-4, rtol=1e-3)
    # converted once: read again with no model, no mirror and no network
    monkeypatch.delenv(MIRROR_ENV)
    again = load_pretrained(REF)
    assert [a.path for a in again] == [x.path for x in dicts]
    # the replacement model over them reproduces the clean logits; the gradient graph runs on them
    from circuits.feature_graph import feature_graph
    from circuits.replacement import build_replacement, replacement_forward

    rep = build_replacement(gemma, tokens, {x.layer: x for x in again})
    logits, _ = replacement_forward(gemma, rep)
    assert torch.allclose(logits.detach(), gemma.logits(tokens)[0], atol=2e-3, rtol=1e-4)
    g = feature_graph(gemma, "When Mary and John went to the store, John gave a drink to", again, target=" Mary",
                      foil=" John", method="gradient", per_layer=4)
    assert any(n.kind == "feature" for n in g.nodes) or g.n_passes > 1
    # `sae list` shows the converted copies
    code, out, err = cli(monkeypatch, capsys, "sae", "list", "--json")
    assert code == 0, err
    names = {row["path"] for row in json.loads(out)}
    assert {str(x.path) for x in again} <= names
