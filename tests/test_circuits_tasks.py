"""Toy tasks: determinism, disjoint splits, correct targets; model builders and MoE hooks."""

import pytest
import torch

from core.models.toy import ConfigError, ModelSpec, build_model
from core.models.toy_tasks import UnknownTaskError, get_task


def test_ioi_targets_and_split():
    t = get_task("ioi")
    train, test = t.batch("train"), t.batch("test")
    assert len(train) + len(test) == len(t.all_triples())
    key = lambda b: {tuple(r) for r in b.tokens.tolist()}  # noqa: E731
    assert not key(train) & key(test)
    # the answer is the name that is not repeated
    for row, tgt in zip(test.tokens.tolist(), test.targets[:, -1].tolist(), strict=False):
        assert row.count(tgt) == 1 and row[4] != tgt and tgt in (row[0], row[2])
    assert torch.equal(t.batch("test").tokens, test.tokens)  # deterministic
    bad = t.corrupt(test)
    assert torch.equal(bad.targets[:, -1], test.meta["s"])


def test_modadd_split_covers_all_pairs():
    t = get_task("modadd", p=7)
    a, b = t.batch("train"), t.batch("test")
    assert len(a) + len(b) == 49
    assert torch.equal(a.targets[:, 2], (a.meta["a"] + a.meta["b"]) % 7)


def test_carry_digits_and_disjoint_split():
    t = get_task("carry")
    b = t.batch("test", 200, seed=1)
    assert t._is_test(b.meta["a"], b.meta["b"]).all()
    assert not t._is_test(*(lambda x: (x.meta["a"], x.meta["b"]))(t.batch("train", 200))).any()
    s = b.meta["a"] + b.meta["b"]
    digits = b.targets[:, 7:]
    assert torch.equal((digits * torch.tensor([1, 10, 100, 1000])).sum(1), s)


def test_histogram_counts():
    t = get_task("histogram")
    b = t.make(torch.tensor([[0, 1, 0, 0, 2, 1, 3, 3, 3, 3]]))
    assert b.meta["counts"][0].tolist() == [1, 1, 2, 3, 1, 2, 1, 2, 3, 4]


def test_markov_and_icl_shapes():
    m = get_task("markov").batch("train", 8)
    assert m.tokens.shape == (8, 32) and 0 < m.meta["optimal_loss"] < 2
    s = get_task("icl-regression").sample(4, seed=0)
    assert s["inputs"].shape == (4, 24, 4)
    assert torch.allclose(s["inputs"][:, 1::2, -1], s["ys"])
    assert torch.allclose(torch.einsum("bpd,bd->bp", s["xs"], s["w"]), s["ys"])


def test_unknown_task_and_bad_config():
    with pytest.raises(UnknownTaskError):
        get_task("nope")
    t = get_task("carry")
    with pytest.raises(ConfigError):
        build_model(ModelSpec(task="carry", heads=5, d_model=48), t)
    with pytest.raises(ConfigError):
        build_model(ModelSpec(task="carry", ffn="moe", top_k=5), t)
    with pytest.raises(ConfigError):
        build_model(ModelSpec(task="carry", ffn="sparse"), t)


@pytest.mark.parametrize("ffn", ["none", "dense", "glu", "moe", "moe-glu"])
def test_ffn_variants_forward_and_hooks(ffn):
    t = get_task("carry")
    spec = ModelSpec(task="carry", ffn=ffn, layers=1, heads=2, d_model=16, norm="LN", top_k=2, qk_norm=True)
    tl = build_model(spec, t)
    b = t.batch("train", 4)
    logits, cache = tl.run_with_cache(b.tokens)
    assert logits.shape == (4, t.n_ctx, len(t.vocab))
    if ffn.startswith("moe"):
        w = cache["blocks.0.mlp.hook_router_weights"]
        assert ((w > 0).sum(-1) == 2).all()  # top-2
        assert torch.allclose(
            cache["blocks.0.mlp.hook_expert_out"].sum(-2), cache["blocks.0.hook_mlp_out"], atol=1e-5
        )
        assert "blocks.0.mlp.experts.3.hook_post" in cache
    if ffn == "glu":
        assert "blocks.0.mlp.hook_pre_linear" in cache


def test_frozen_router_is_not_trained():
    from circuits.toy.train import TrainConfig, train

    t = get_task("carry")
    spec = ModelSpec(task="carry", ffn="moe", layers=1, heads=2, d_model=16, norm="LN", router="frozen")
    before = build_model(spec, t, seed=3).blocks[0].mlp.W_router.detach().clone()
    tl, metrics, _ = train(t, spec, TrainConfig(steps=3, lr=1e-2, batch_size=8, seed=3, eval_every=10))
    assert torch.equal(tl.blocks[0].mlp.W_router, before)
    assert metrics["steps"] == 3 and "test_accuracy" in metrics
