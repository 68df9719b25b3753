"""Tiny random models for the baseline and faithfulness tests (built in well under a second), and the
baselines' shape checks on them. Other test files import ``tiny_llama`` / ``tiny_gelu`` from here."""

from __future__ import annotations

import pytest
import torch

from attribution import attribute
from attribution.methods import LEVEL_AXES, METHODS
from core.errors import MethodError

VOCAB = ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "=", ".", "x", "y"]
PROMPT = "A B C D B E ="


def _wrap(cfg_kwargs: dict, seed: int, name: str):
    from transformer_lens import HookedTransformerConfig

    from core.models.hooked import HookedModel, hooked_transformer
    from core.models.tokens import SymbolTokenizer

    cfg = HookedTransformerConfig(d_vocab=len(VOCAB), n_ctx=32, seed=seed, device="cpu", **cfg_kwargs)
    tl = hooked_transformer(cfg, move_to_device=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # larger weights than TL's init, so attributions are not all ~0
        for pname, p in tl.named_parameters():
            if pname.endswith(".w") and ("ln" in pname):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() > 1:
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))
    tl.eval()
    for p in tl.parameters():
        p.requires_grad_(False)
    return HookedModel(tl, SymbolTokenizer(VOCAB), name=name, kind="toy")


def tiny_llama(seed: int = 0, layers: int = 2):
    """SwiGLU + RMSNorm + RoPE + grouped-query attention (4 heads, 2 kv-heads), d_model 32."""
    return _wrap(dict(n_layers=layers, d_model=32, n_heads=4, n_key_value_heads=2, d_head=8, d_mlp=64,
                      act_fn="silu", gated_mlp=True, normalization_type="RMS", final_rms=True,
                      positional_embedding_type="rotary", rotary_dim=8), seed, "tiny-llama")


def tiny_gelu(seed: int = 0, layers: int = 2):
    """GPT-2 style: LayerNorm, GELU MLP, learned positions."""
    return _wrap(dict(n_layers=layers, d_model=32, n_heads=4, d_head=8, d_mlp=64, act_fn="gelu_new",
                      normalization_type="LN", positional_embedding_type="standard"), seed, "tiny-gelu")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def llama():
    return tiny_llama()


BASELINES = [m for m in METHODS if m != "dpa"]


@pytest.mark.parametrize("method", BASELINES)
def test_every_baseline_level_has_the_level_shape(llama, method):
    enc = llama.encode(PROMPT, "F", "C")
    a, s = llama.arch, enc.seq_len
    sizes = {"token": (s,), "head": (a.n_layers, a.n_heads, s), "qk": (a.n_layers, a.n_heads, s, s),
             "neuron": (a.n_layers, s, a.d_mlp)}
    for level in METHODS[method].levels:
        res = attribute(llama, PROMPT, "F", "C", method=method, level=level)
        assert tuple(res.scores.shape) == sizes[level], (method, level)
        assert res.axes == LEVEL_AXES[level]
        assert torch.isfinite(res.scores).all()


@pytest.mark.parametrize("method", ["gradient", "input_x_gradient", "atp", "ifr", "integrated_gradients"])
def test_baselines_run_on_gelu_layernorm(method):
    model = tiny_gelu()
    for level in METHODS[method].levels:
        res = attribute(model, PROMPT, "F", "C", method=method, level=level)
        assert torch.isfinite(res.scores).all() and res.scores.abs().sum() > 0


def test_missing_level_is_a_method_error(llama):
    with pytest.raises(MethodError, match="no head level"):
        attribute(llama, PROMPT, "F", method="rollout", level="head")
    with pytest.raises(MethodError, match="unknown method"):
        attribute(llama, PROMPT, "F", method="nope", level="token")


def load_tiny(entry, device: str = "cpu", **kwargs):
    """Zoo loader for the CLI tests: ModelEntry(loader="test_baselines_tiny:load_tiny")."""
    return tiny_llama()


def make_examples(model, n: int, seed: int = 0, length: int = 8) -> list[dict]:
    """Random symbol prompts whose target is the tiny model's top-1 answer and foil its second."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = " ".join(rng.choice(VOCAB[:16]) for _ in range(length))
        top = model.logits(model.to_tokens(prompt))[0, -1].topk(2).indices.tolist()
        out.append({"prompt": prompt, "target": VOCAB[top[0]], "foil": VOCAB[top[1]]})
    return out
