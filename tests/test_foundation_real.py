"""Integration tests on the real SmolLM2-135M through the hooked-model interface."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.real


def test_paris(smollm2):
    assert smollm2.generate("The capital of France is", max_new_tokens=1) == " Paris"


def test_ioi_ranks_mary_first(smollm2):
    top = smollm2.top_predictions("When Mary and John went to the store, John gave a drink to", k=3)
    assert top[0][0] == " Mary"


def test_tokenizer_special_ids_match_gguf(smollm2):
    import json

    from core.models.llm import smollm2_cache_dir

    meta = json.loads((smollm2_cache_dir() / "workbench.json").read_text())["gguf_special_tokens"]
    assert smollm2.tokenizer.bos_token_id == meta["bos_token_id"] == 1
    assert smollm2.tokenizer.eos_token_id == meta["eos_token_id"] == 2
    # the GGUF says no BOS is added, and the hooked model follows it
    assert meta["add_bos_token"] is False
    assert smollm2.to_tokens("Hi")[0, 0].item() != 1


def test_real_arch_and_gqa(smollm2):
    a = smollm2.arch
    assert (a.n_layers, a.n_heads, a.n_kv_heads, a.d_model, a.norm, a.mlp, a.positional) == (
        30, 9, 3, 576, "rmsnorm", "swiglu", "rope")
    enc = smollm2.encode("The capital of France is", " Paris", " London")
    _, cache = smollm2.run_with_cache(enc.tokens, names_filter=lambda n: n.startswith("blocks.29"))
    assert cache["blocks.29.attn.hook_pattern"].shape == (1, 9, 5, 5)
    assert torch.allclose(cache["blocks.29.attn.hook_pattern"].sum(-1), torch.ones(1, 9, 5), atol=1e-5)
