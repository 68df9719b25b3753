"""The nnsight backend on the tiny random models of tests/family_models.py (norm gains random, sequences longer than
the sliding windows): every hook it gives equals TransformerLens' on the same weights, the post-norm families'
hook_attn_out / hook_mlp_out included (Gemma 2 and OLMo-2 add the post-norm's output, not the sublayer's), Gemma 2's
soft-capped attention scores, OLMo-2's whole-projection q/k norm scales and Phi-3's slices of its fused projections
too. Where the backend maps the hooks only (GPT-2) an engine needing every internal refuses in one BackendError line
naming why; Qwen 3, Gemma 2, OLMo-2 and Phi-3 run every engine (tests/test_backend_matrix.py)."""

from __future__ import annotations

import pytest
import torch
from family_models import IDS, save_family

import workbench as wb
from core.errors import BackendError

# the families whose every internal the nnsight backend gives, as its refusal names them
SERVED = ("qwen3", "gemma2", "olmo2", "phi3")
SERVED_WORDS = "Qwen 3, Gemma 2, OLMo-2, Phi-3 (full rotary) and Gemma 3 without soft caps only"


@pytest.fixture(scope="module", params=["gemma2", "olmo2", "qwen3", "phi3", "gpt2"])
def pair(request, tmp_path_factory, one_thread):
    path = save_family(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, wb.load(str(path)), wb.load(str(path), backend="nnsight")


def test_every_hook_equals_transformer_lens(pair):
    family, tl, nn = pair
    tokens = torch.tensor([IDS])
    names = [n for n in nn.hook_names() if n in set(tl.hook_names())]
    assert "blocks.0.hook_attn_out" in names and "blocks.1.hook_mlp_out" in names
    ref_logits, ref = tl.run_with_cache(tokens, names_filter=lambda n: n in names)
    logits, got = nn.run_with_cache(tokens, names=names)
    for name in ["logits", *names]:
        a, b = (ref_logits, logits) if name == "logits" else (ref[name], got[name])
        assert a.shape == b.shape, (family, name)
        seen = torch.isfinite(a)  # the attention scores are -inf where masked, on both
        assert torch.equal(seen, torch.isfinite(b)), (family, name)
        a, b = a[seen], b[seen]
        scale = float(a.abs().max())
        assert scale > 0, (family, name)
        assert float((a - b).abs().max()) <= 1e-4 * scale, (family, name)


def test_an_engine_needing_internals_refuses_in_one_line(pair):
    family, _, nn = pair
    if family in SERVED:  # every engine, with TransformerLens' numbers: tests/test_backend_matrix.py
        assert nn.internals
        return
    with pytest.raises(BackendError) as err:
        wb.attribute(nn, "The capital of France is", target=" Paris", foil=" London", method="dpa", level="head")
    msg = str(err.value)
    assert "\n" not in msg and "the nnsight backend" in msg and SERVED_WORDS in msg, msg
