"""The transcoder trainer's recipe options (issue 53 item 1: scripts/transcoder_recipes.py measures them): the
defaults are the set builder's recipe unchanged, each ingredient trains to finite weights that explain the
held-out MLP output, and the learning-rate schedule has the shape it names."""

from __future__ import annotations

import pytest
import torch

from attribution.sae.sets import cache_layers, transcoder_hooks
from attribution.sae.train_shards import lr_factor, train_topk_transcoder
from core.models.tiny import tiny_model


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    model = tiny_model(layers=1, d_model=16, n_ctx=32)
    texts = torch.randint(0, 10, (200, 24), generator=torch.Generator().manual_seed(0)).tolist()
    root = tmp_path_factory.mktemp("acts")
    return cache_layers(model, [0], texts, root, 2000, ctx=24, shard_tokens=500)[0]


def _train(shards, tmp_path, recipe):
    hin, hout = transcoder_hooks(0)
    return train_topk_transcoder(shards, hin, hout, 32, 4, 2000, tmp_path / str(abs(hash(str(recipe)))),
                                 batch_size=128, recipe=recipe, checkpoint_every=10**9)


def _ev(w, shards):
    hin, hout = transcoder_hooks(0)
    x, y = shards.tensor(hin).float(), shards.tensor(hout).float()
    pre = torch.relu(x @ w["W_enc"] + w["b_enc"])
    v, i = pre.topk(4, dim=-1)
    y_hat = torch.zeros_like(pre).scatter(-1, i, v) @ w["W_dec"] + w["b_dec"] + x @ w["W_skip"].T
    return 1 - float(((y - y_hat) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())


def test_default_recipe_is_the_set_builders(shards, tmp_path):
    a, b = _train(shards, tmp_path, None), _train(shards, tmp_path / "b", {"init": "small", "aux": True,
                                                                         "warmup": 0, "schedule": "decay"})
    for k in ("W_enc", "W_dec"):
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    # W_skip up to its null space: the tiny model's LayerNorm centres the input, so the least-squares start
    # is not unique along the all-ones direction, which no input reads
    x = shards.tensor(transcoder_hooks(0)[0]).float()
    assert torch.allclose(x @ a["W_skip"].T, x @ b["W_skip"].T, atol=1e-3)


@pytest.mark.parametrize("recipe", [{"init": "transpose"}, {"aux": False}, {"aux_window": 2},
                                    {"warmup": 3, "schedule": "cosine"}, {"epochs": 2}])
def test_each_ingredient_trains(shards, tmp_path, recipe):
    w = _train(shards, tmp_path, recipe)
    assert all(bool(torch.isfinite(torch.as_tensor(w[k])).all()) for k in ("W_enc", "b_enc", "W_dec", "W_skip"))
    # a unit-norm decoder starts far off beside the least-squares skip term: 15 steps do not bring it back here
    assert _ev(w, shards) > (0.2 if recipe.get("init") != "transpose" else -5.0)


def test_schedules():
    assert lr_factor(0, 100, 10, "cosine", 80) == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, "cosine", 80) == pytest.approx(1.0)
    assert lr_factor(99, 100, 10, "cosine", 80) < 0.06
    assert lr_factor(50, 100, 0, "decay", 80) == 1.0 and lr_factor(90, 100, 0, "decay", 80) == pytest.approx(0.5)
    assert lr_factor(99, 100, 0, "constant", 80) == 1.0


def test_a_set_trains_several_epochs_and_resumes_only_with_them(tmp_path):
    from attribution.sae.sets import SetSpec, build_set, read_set
    from core.errors import RangeError

    model = tiny_model(layers=1, d_model=16, n_ctx=32)
    texts = {"train": torch.randint(0, 10, (200, 24), generator=torch.Generator().manual_seed(0)).tolist(),
             "heldout": torch.randint(0, 10, (60, 24), generator=torch.Generator().manual_seed(1)).tolist()}
    spec = dict(model=model.name, layers=[0], width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128,
                shard_tokens=500, eval_windows=4, ctx=24)
    out = build_set(model, SetSpec(**spec, epochs=2), root=tmp_path / "s", texts=texts)
    assert out["complete"] and read_set(tmp_path / "s")["training"]["epochs"] == 2
    for other in (1, 3):  # resumed with other settings: refused, as for lr or width
        with pytest.raises(RangeError, match="epochs 2"):
            build_set(model, SetSpec(**spec, epochs=other), root=tmp_path / "s", texts=texts)
    with pytest.raises(RangeError, match="--epochs 0"):
        SetSpec(**spec, epochs=0).check()
