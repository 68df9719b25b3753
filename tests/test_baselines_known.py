"""Known-answer checks for the baselines on tiny models where the answer can be written down."""

from __future__ import annotations

import pytest
import torch
from test_baselines_tiny import PROMPT, VOCAB, tiny_llama

from attribution import attribute
from attribution.baselines.atp import corrupt_tokens
from attribution.baselines.attention import rollout
from core.errors import MethodError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def linear():
    """A linear toy: attention and MLP outputs are zeroed and there is no norm, so
    logit(t) - logit(f) = e_last . (W_U[:, t] - W_U[:, f]): only the last token can matter."""
    from test_baselines_tiny import _wrap

    m = _wrap(dict(n_layers=2, d_model=32, n_heads=4, d_head=8, d_mlp=64, act_fn="relu",
                   normalization_type=None, positional_embedding_type="rotary", rotary_dim=8), 1, "linear")
    with torch.no_grad():
        for block in m.tl.blocks:
            block.attn.W_O.zero_()
            block.mlp.W_out.zero_()
    return m


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(seed=3)


def _direction(m, t, f):
    return m.W_U[:, VOCAB.index(t)] - m.W_U[:, VOCAB.index(f)]


def test_gradient_on_a_linear_toy_is_the_unembedding_difference(linear):
    d = _direction(linear, "F", "C")
    grad = attribute(linear, PROMPT, "F", "C", method="gradient", level="token").scores
    assert torch.allclose(grad[-1], d.sum(), rtol=1e-4)  # signed: summed over d_model
    assert torch.allclose(grad[:-1], torch.zeros_like(grad[:-1]), atol=1e-6)
    norm = attribute(linear, PROMPT, "F", "C", method="gradient_norm", level="token").scores
    assert torch.allclose(norm[-1], d.norm(), rtol=1e-4)  # saliency: the L2 norm
    assert torch.allclose(norm[:-1], torch.zeros_like(norm[:-1]), atol=1e-6)
    ixg = attribute(linear, PROMPT, "F", "C", method="input_x_gradient", level="token").scores
    e_last = linear.W_E[linear.to_tokens(PROMPT)[0, -1]]
    assert torch.allclose(ixg[-1], e_last @ d, rtol=1e-4)
    # linear: activation patching (zero the embedding) equals input x gradient exactly
    patch = attribute(linear, PROMPT, "F", "C", method="activation_patching", level="token").scores
    assert torch.allclose(patch, ixg, atol=1e-4)


def test_patching_a_token_that_cannot_matter_gives_zero(linear):
    patch = attribute(linear, PROMPT, "F", "C", method="activation_patching", level="token").scores
    assert patch[:-1].abs().max() < 1e-5 and patch[-1].abs() > 1e-3


def test_patching_a_silenced_head_gives_zero_and_matches_a_manual_ablation():
    m = tiny_llama(seed=5)
    with torch.no_grad():
        m.tl.blocks[1].attn.W_O[2].zero_()  # head 1.2 writes nothing
    enc = m.encode(PROMPT, "F", "C")
    patch = attribute(m, PROMPT, "F", "C", method="activation_patching", level="head").scores
    assert patch[1, 2].abs().max() < 1e-5
    assert patch[..., :-1].abs().max() == 0  # whole-head scores sit at the last query
    logits = m.logits(enc.tokens)[0, -1]
    clean = logits[enc.target_id] - logits[enc.foil_id]

    def zero_head(z, hook):
        z[:, :, 1] = 0
        return z

    with torch.no_grad():
        ab = m.run_with_hooks(enc.tokens, fwd_hooks=[("blocks.0.attn.hook_z", zero_head)])[0, -1]
    assert torch.allclose(patch[0, 1, -1], clean - (ab[enc.target_id] - ab[enc.foil_id]), atol=1e-4)


def test_patching_per_position_neurons_sum_close_to_atp(llama):
    # per (layer, position, neuron) patching has the level's full shape
    p = attribute(llama, "A B C", "F", "C", method="activation_patching", level="neuron",
                  per_position=True).scores
    assert p.shape == (2, 3, 64) and p.abs().sum() > 0


def test_rollout_on_identity_attention_points_at_the_last_token():
    pat = torch.eye(5).expand(3, 4, 5, 5)
    assert torch.allclose(rollout(pat)[-1], torch.tensor([0.0, 0, 0, 0, 1]))
    # one layer attending to the first token: 0.5 A + 0.5 I read at the last row
    first = torch.zeros(1, 1, 3, 3)
    first[..., 0] = 1
    assert torch.allclose(rollout(first)[-1], torch.tensor([0.5, 0, 0.5]))


def test_attention_token_scores_are_attention_rows(llama):
    last = attribute(llama, PROMPT, "F", method="attention_last", level="token").scores
    mean = attribute(llama, PROMPT, "F", method="attention_mean", level="token").scores
    assert torch.allclose(last.sum(), torch.tensor(1.0)) and torch.allclose(mean.sum(), torch.tensor(1.0))
    edges = attribute(llama, PROMPT, "F", method="attention_last", level="edge").scores
    assert torch.allclose(edges[-1, :, -1].mean(0), last) and edges[0].abs().sum() == 0


def test_integrated_gradients_is_complete():
    # Without a norm the model is continuous at the zero embedding (an RMS/LayerNorm model is not:
    # it is scale-invariant, so IG from 0 misses the jump at 0), and IG's scores sum to f(e) - f(0).
    from test_baselines_tiny import _wrap

    m = _wrap(dict(n_layers=2, d_model=32, n_heads=4, d_head=8, d_mlp=64, act_fn="gelu_new",
                   normalization_type=None, positional_embedding_type="rotary", rotary_dim=8), 2, "nonorm")
    with torch.no_grad():
        for p in m.tl.parameters():
            p.mul_(0.5)  # a smoother function: 64 midpoint steps then integrate it to ~1e-3
    enc = m.encode(PROMPT, "F", "C")
    ig = attribute(m, PROMPT, "F", "C", method="ig", level="token", steps=64, internal_batch_size=16)
    logits = m.logits(enc.tokens)[0, -1]

    def zero_embed(x, hook):
        return torch.zeros_like(x)

    with torch.no_grad():
        base = m.run_with_hooks(enc.tokens, fwd_hooks=[("hook_embed", zero_embed)])[0, -1]
    expected = (logits[enc.target_id] - logits[enc.foil_id]) - (base[enc.target_id] - base[enc.foil_id])
    assert abs(float(expected)) > 1e-2
    assert abs(float(ig.scores.sum() - expected)) < 0.02 * abs(float(expected)) + 1e-3
    # the internal batch size changes memory, not the answer
    ig2 = attribute(m, PROMPT, "F", "C", method="ig", level="token", steps=64, internal_batch_size=64)
    assert torch.allclose(ig.scores, ig2.scores, atol=1e-4)


def test_atp_edge_is_a_first_order_estimate_of_cutting_the_edge(llama):
    enc = llama.encode(PROMPT, "F", "C")
    atp = attribute(llama, PROMPT, "F", "C", method="atp", level="edge").scores
    # exact effect of setting one small-ish edge weight to 0 (no renormalisation)
    l, h, q, k = 1, 0, enc.seq_len - 1, 2

    def cut(p, hook):
        p = p.clone()
        p[:, h, q, k] = 0
        return p

    logits = llama.logits(enc.tokens)[0, -1]
    with torch.no_grad():
        ab = llama.run_with_hooks(enc.tokens, fwd_hooks=[(f"blocks.{l}.attn.hook_pattern", cut)])[0, -1]
    effect = (logits[enc.target_id] - logits[enc.foil_id]) - (ab[enc.target_id] - ab[enc.foil_id])
    # last layer, last query: the metric is linear in that weight up to the final norm
    assert abs(float(atp[l, h, q, k] - effect)) < 0.1 * abs(float(effect)) + 1e-3


def test_atp_foil_swaps_target_and_foil_tokens(llama):
    enc = llama.encode(PROMPT, "B", "C")  # the prompt holds both B and C
    swapped = corrupt_tokens(llama, enc)
    assert llama.to_str_tokens(swapped) == ["A", "C", "B", "D", "C", "E", "="]
    s = attribute(llama, PROMPT, "B", "C", method="atp_foil", level="token").scores
    assert (s[[0, 3, 5, 6]] == 0).all() and s[[1, 2, 4]].abs().min() > 0
    with pytest.raises(MethodError, match="neither the target nor the foil"):
        attribute(llama, PROMPT, "F", "G", method="atp_foil", level="head")
    with pytest.raises(MethodError, match="needs a foil"):
        attribute(llama, PROMPT, "B", method="atp_foil", level="head")


def test_ifr_when_attention_writes_nothing_keeps_everything_at_the_last_token(linear):
    s = attribute(linear, PROMPT, "F", method="ifr", level="token").scores
    assert torch.allclose(s, torch.tensor([0, 0, 0, 0, 0, 0, 1.0]))
    heads = attribute(linear, PROMPT, "F", method="ifr", level="head").scores
    assert heads.abs().sum() == 0


def test_ifr_token_importances_are_a_distribution(llama):
    s = attribute(llama, PROMPT, "F", method="ifr", level="token").scores
    assert (s >= 0).all() and torch.allclose(s.sum(), torch.tensor(1.0), atol=1e-5)


def test_random_is_reproducible_per_prompt_and_differs_between_prompts(llama):
    a = attribute(llama, PROMPT, "F", method="random", level="head").scores
    b = attribute(llama, PROMPT, "F", method="random", level="head").scores
    c = attribute(llama, "A B C D B F =", "F", method="random", level="head").scores
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert ((a >= 0) & (a < 1)).all()


def test_gradient_norm_is_the_magnitude_of_the_signed_gradient(llama):
    """Both reduce the same gradient: per neuron the norm is |gradient|; over a head's d_head the L2
    norm bounds the signed sum (Cauchy-Schwarz: |sum g| <= sqrt(d) * ||g||) and is never negative."""
    for level, dim in (("neuron", 1), ("head", llama.arch.d_head), ("token", llama.arch.d_model)):
        signed = attribute(llama, PROMPT, "F", "C", method="gradient", level=level).scores
        norm = attribute(llama, PROMPT, "F", "C", method="gradient_norm", level=level).scores
        assert (norm >= 0).all() and (signed < 0).any(), level
        assert (signed.abs() <= norm * dim**0.5 + 1e-6).all(), level
        if level == "neuron":
            assert torch.allclose(norm, signed.abs())
