"""The nnsight backend beyond caching (nnsight 0.8's public API): device, tokens, generation, top
predictions, forward hooks and activation patching, with the TransformerLens backend's numbers."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from core.errors import RangeError

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def nn_llama(tiny_llama_dir):
    return wb.load(str(tiny_llama_dir), backend="nnsight")


def test_device_tokens_generate_and_top_predictions(nn_llama, tiny_llama, one_thread):
    assert nn_llama.device == torch.device("cpu")
    prompt = "The capital of France is"
    assert torch.equal(nn_llama.to_tokens(prompt), tiny_llama.to_tokens(prompt))
    assert nn_llama.to_str_tokens(prompt) == tiny_llama.to_str_tokens(prompt)
    assert nn_llama.generate(prompt, 5) == tiny_llama.generate(prompt, 5)
    top, ref = nn_llama.top_predictions(prompt, 3), tiny_llama.top_predictions(prompt, 3)
    assert [t for t, _ in top] == [t for t, _ in ref]
    assert all(abs(p - q) < 1e-5 for (_, p), (_, q) in zip(top, ref, strict=True))
    with torch.no_grad():
        assert torch.allclose(nn_llama(prompt), tiny_llama(prompt), atol=1e-4)


def test_forward_hooks_and_starting_at_a_layer(nn_llama, tiny_llama, one_thread):
    tokens = tiny_llama.to_tokens(CLEAN)

    def zero(act, hook):  # noqa: ARG001
        return torch.zeros_like(act)

    hooks = [("blocks.1.hook_attn_out", zero), ("blocks.1.hook_mlp_out", zero)]
    with torch.no_grad():
        ref = tiny_llama.run_with_hooks(tokens, fwd_hooks=hooks)
        assert torch.allclose(nn_llama.run_with_hooks(tokens, fwd_hooks=hooks), ref, atol=1e-4)
        with nn_llama.hooks(fwd_hooks=hooks):
            assert torch.allclose(nn_llama(tokens), ref, atol=1e-4)
        assert not torch.allclose(nn_llama(tokens), ref, atol=1e-4)  # the hooks are gone after the block
        _, cache = tiny_llama.run_with_cache(tokens, names_filter=["blocks.1.hook_resid_pre"])
        resid = cache["blocks.1.hook_resid_pre"]
        assert torch.allclose(nn_llama(resid, start_at_layer=1), tiny_llama(resid, start_at_layer=1), atol=1e-4)
    for name in ("blocks.0.attn.hook_q_input", "blocks.0.ln1.hook_scale"):  # absent here; derived, read-only
        with pytest.raises(RangeError):
            nn_llama.run_with_hooks(tokens, fwd_hooks=[(name, zero)])


def test_patching_matches_transformer_lens(nn_llama, tiny_llama, one_thread):
    for site in ("resid", "mlp"):
        res = wb.patch(nn_llama, CLEAN, CORRUPTED, " Mary", " John", site=site)
        ref = wb.patch(tiny_llama, CLEAN, CORRUPTED, " Mary", " John", site=site)
        assert res.effect.shape == ref.effect.shape
        assert torch.allclose(res.patched, ref.patched, atol=1e-4), site
