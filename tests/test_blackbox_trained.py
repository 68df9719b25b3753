"""A trained attention-only TransformerLens layer as the oracle."""

import numpy as np
import pytest

from attribution.blackbox.canonical import canonicalize, compare_heads
from attribution.blackbox.oracle import mha_value
from attribution.blackbox.recovery import expected_queries, recover
from core.errors import UnknownModelError

pytest.importorskip("transformer_lens")


@pytest.fixture(scope="module")
def tiny():
    from attribution.blackbox.trained import train_tiny_attn

    return train_tiny_attn(steps=150)


def test_oracle_matches_spec_model_with_biases(tiny):
    import copy

    import torch

    from attribution.blackbox.trained import attention_oracle

    model = copy.deepcopy(tiny)
    attn = model.blocks[0].attn
    with torch.no_grad():  # biases the read-out must cancel, subtract or drop
        for b in (attn.b_K, attn.b_V, attn.b_O, attn.b_Q):
            b.copy_(torch.randn_like(b))
    t = attention_oracle(model)
    assert t.dropped_b_Q_norm > 0
    rng = np.random.default_rng(0)
    for n in (1, 3, 6):
        X = rng.standard_normal((n, model.cfg.d_model))
        assert abs(t.oracle(X) - mha_value(t.truth, X, exact=False)) < 1e-10


def test_trained_layer_recovered_below_1e_4(tiny):
    from attribution.blackbox.trained import attention_oracle

    t = attention_oracle(tiny)
    rec = recover(t.oracle, tiny.cfg.n_heads, dps=30, basis_scale=t.token_scale)
    d = tiny.cfg.d_model
    assert rec.queries == expected_queries(d, 2) and rec.max_query_length == 5
    cmp = compare_heads(canonicalize(t.truth), rec.W, rec.v)
    assert cmp.max_rel_error_W < 1e-4 and cmp.max_rel_error_v < 1e-4


def test_absent_zoo_model_and_rotary_refused():
    from transformer_lens import HookedTransformerConfig

    from attribution.blackbox.trained import attention_oracle, load_toy
    from core.errors import MethodError
    from core.models.hooked import hooked_transformer

    with pytest.raises(UnknownModelError):
        load_toy("no-such-toy-model")
    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=8, d_head=4, n_heads=2, d_vocab=5,
                                  attn_only=True, positional_embedding_type="rotary", rotary_dim=4)
    with pytest.raises(MethodError):
        attention_oracle(hooked_transformer(cfg))
