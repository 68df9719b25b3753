"""The hooked-model interface on tiny random models and the three backends."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from core.errors import ModelFileError, PromptError, RangeError, TokenError, UnknownModelError


def test_arch_facts_llama(tiny_llama):
    a = tiny_llama.arch
    assert (a.n_layers, a.n_heads, a.n_kv_heads, a.d_model, a.d_head) == (2, 4, 2, 32, 8)
    assert (a.norm, a.mlp, a.positional) == ("rmsnorm", "swiglu", "rope")


def test_arch_facts_gpt2(tiny_gpt2):
    a = tiny_gpt2.arch
    assert (a.norm, a.mlp, a.positional, a.n_kv_heads) == ("layernorm", "gelu", "learned", 4)


def test_hooked_forward_matches_hf(tiny_llama_dir, tiny_llama):
    from core.models.files import load_hf_model

    hf, tok = load_hf_model(tiny_llama_dir)
    enc = tiny_llama.encode("The capital of France is", " Paris")
    with torch.no_grad():
        ref = hf(enc.tokens).logits
    ours = tiny_llama.logits(enc.tokens)
    assert torch.allclose(ours, ref, atol=1e-4)


def test_cache_exposes_interface(tiny_llama):
    enc = tiny_llama.encode("When Mary and John went", " to", " Mary")
    _, cache = tiny_llama.run_with_cache(enc.tokens)
    s = enc.seq_len
    assert cache["blocks.1.hook_resid_pre"].shape == (1, s, 32)
    assert cache["blocks.0.attn.hook_pattern"].shape == (1, 4, s, s)
    assert cache["blocks.0.attn.hook_z"].shape == (1, s, 4, 8)
    assert cache["blocks.0.mlp.hook_pre"].shape == (1, s, 64)  # gate
    assert cache["blocks.0.mlp.hook_pre_linear"].shape == (1, s, 64)  # up
    assert cache["blocks.0.ln1.hook_scale"].shape == (1, s, 1)
    writes = tiny_llama.head_writes(cache["blocks.0.attn.hook_z"], 0)
    # per-head writes sum to the attention output (no output bias in Llama)
    assert torch.allclose(writes.sum(2), cache["blocks.0.hook_attn_out"], atol=1e-5)
    w = tiny_llama.weights(1)
    assert w["W_K"].shape == (4, 32, 8)  # kv heads repeated to the 4 query heads
    assert torch.equal(w["W_K"][0], w["W_K"][1])
    grouped = tiny_llama.weights(1, repeat_kv=False)
    assert grouped["W_K"].shape == (2, 32, 8) and torch.equal(grouped["W_V"][1], w["W_V"][2])
    assert grouped["b_O"] is None or grouped["b_O"].abs().max() == 0  # every key present, None if absent


def test_interface_pieces_engines_need(tiny_llama, tiny_gpt2):
    """rope tables, the final norm's bias and last-position logits from a residual, without reaching into
    TransformerLens modules."""
    tokens = tiny_llama.to_tokens("The capital of France is")
    s = tokens.shape[-1]
    cos, sin, adjacent, dim = tiny_llama.rope(0, s)
    assert cos.shape == (s, dim) and not adjacent and torch.allclose(cos[0], torch.ones(dim))
    assert tiny_gpt2.rope(0, s) is None
    assert tiny_llama.final_norm_bias() is None and tiny_gpt2.final_norm_bias().shape == (32,)
    assert tiny_llama.attn_scale(0) == pytest.approx(8 ** 0.5)
    assert torch.allclose(tiny_llama.act_fn(0)(torch.tensor([0.0, 1.0])), torch.nn.functional.silu(
        torch.tensor([0.0, 1.0])))
    for model in (tiny_llama, tiny_gpt2):
        toks = model.to_tokens("The capital of France is")
        with torch.no_grad():
            resid = model(toks, stop_at_layer=model.arch.n_layers)
            assert torch.allclose(model.final_logits(resid), model.logits(toks)[:, -1], atol=1e-5)
    with pytest.raises(RangeError):
        tiny_llama.rope(5, s)


def test_gradients_on_activations(tiny_llama):
    enc = tiny_llama.encode("The capital of France is", " Paris")
    grads = {}

    def keep(act, hook):  # weights are frozen: engines ask for gradients on activations
        act = act.detach().requires_grad_(True)
        grads["resid"] = act
        return act

    logits = tiny_llama.run_with_hooks(enc.tokens, fwd_hooks=[("blocks.0.hook_resid_pre", keep)])
    logits[0, -1, enc.target_id].backward()
    assert grads["resid"].grad is not None and grads["resid"].grad.abs().sum() > 0


def test_bad_inputs_typed(tiny_llama):
    with pytest.raises(PromptError):
        tiny_llama.encode("   ", " Paris")
    with pytest.raises(PromptError):
        tiny_llama.encode("word " * 200, " Paris")  # context is 128
    with pytest.raises(TokenError):
        tiny_llama.encode("The capital of France is", " Parisians and more")
    with pytest.raises(TokenError):
        tiny_llama.encode("The capital of France is", " Paris", " Paris")
    with pytest.raises(RangeError):
        tiny_llama.check_layer(2)
    with pytest.raises(RangeError):
        tiny_llama.check_head(-1)
    with pytest.raises(RangeError):
        tiny_llama.check_hook("blocks.9.hook_resid_post")
    with pytest.raises(UnknownModelError):
        wb.load("no-such-model")
    with pytest.raises(ModelFileError):
        wb.load("/no/such/dir")


def test_corrupt_and_truncated_weights(tiny_llama_dir, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_llama_dir, bad)
    weights = bad / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        wb.load(str(bad))
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ModelFileError, match="corrupt"):
        wb.load(str(bad))


def test_bridge_backend_matches(tiny_llama_dir, tiny_llama):
    bridge = wb.load(str(tiny_llama_dir), backend="bridge")
    enc = tiny_llama.encode("The capital of France is", " Paris")
    _, c1 = tiny_llama.run_with_cache(enc.tokens, names_filter=["blocks.1.hook_resid_post"])
    _, c2 = bridge.run_with_cache(enc.tokens, names_filter=["blocks.1.hook_resid_post"])
    assert torch.allclose(c1["blocks.1.hook_resid_post"], c2["blocks.1.hook_resid_post"], atol=1e-4)


def test_nnsight_backend_matches(tiny_llama_dir, tiny_llama):
    nn = wb.load(str(tiny_llama_dir), backend="nnsight")
    assert nn.backend == "nnsight" and nn.remote is False
    enc = tiny_llama.encode("The capital of France is", " Paris")
    names = ["blocks.0.hook_resid_pre", "blocks.1.hook_attn_out", "blocks.1.hook_resid_post"]
    logits, cache = nn.run_with_cache(enc.tokens, names=names)
    ref_logits, ref = tiny_llama.run_with_cache(enc.tokens, names_filter=names)
    assert torch.allclose(logits, ref_logits, atol=1e-4)
    for name in names:
        assert torch.allclose(cache[name], ref[name], atol=1e-4), name
    with pytest.raises(RangeError):
        nn.run_with_cache(enc.tokens, names=["blocks.0.no_such_hook"])
