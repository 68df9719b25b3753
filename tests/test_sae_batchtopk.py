"""BatchTopK training for transcoder sets (issue 53): a set saves JumpReLU transcoders (one threshold), and a
transcoder trained with per-token TopK fired hundreds of features on its large-output tokens in that form (smollm2's
layers 1, 2, 9, 10 at lr 2e-3 and 3 epochs: EV 0.79-0.95 as TopK, -0.44-0.06 saved). BatchTopK picks k features per
token on average over the batch, so a token may take more than k, as the saved form lets it. New sets train so;
sets built before resume as they were built, and a set resumes only with its own choice."""

from __future__ import annotations

import json

import pytest
import torch

from attribution.sae.sets import SET_FILE, SetSpec, build_set, layer_dir, read_set
from attribution.sae.train_shards import _TopKSkipTranscoder
from core.errors import RangeError
from core.models.tiny import tiny_model


def test_batchtopk_keeps_k_per_token_on_average_and_lets_a_large_token_take_more():
    tc = _TopKSkipTranscoder(8, 8, 32, 4, seed=0, batch_topk=True)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    x[3] *= 50  # one token with a much larger input: its pre-activations win most of the batch's slots
    _, f, _ = tc.forward(x)
    active = (f > 0).sum(1)
    assert int(active.sum()) == 4 * 16
    assert int(active[3]) > 4 and int(active.min()) < 4
    per_token = _TopKSkipTranscoder(8, 8, 32, 4, seed=0)
    _, g, _ = per_token.forward(x)
    assert ((g > 0).sum(1) == 4).all()
    # the same selection as the k x batch largest relu(pre) values of the batch
    pre = torch.relu(tc.pre(x)).flatten()
    assert torch.equal((f.flatten() > 0), pre >= pre.topk(64).values.min())


def _spec(model, **kw) -> SetSpec:
    return SetSpec(model=model.name, layers=[0], width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128,
                   shard_tokens=500, eval_windows=4, ctx=24, **kw)


def _texts(n: int, seed: int) -> list[list[int]]:
    return torch.randint(0, 10, (n, 24), generator=torch.Generator().manual_seed(seed)).tolist()


def test_new_sets_train_batchtopk_and_old_sets_resume_as_built(tmp_path):
    model = tiny_model(layers=1, d_model=16, n_ctx=32)
    texts = {"train": _texts(200, 0), "heldout": _texts(60, 1)}
    out = build_set(model, _spec(model), root=tmp_path / "s", texts=texts)
    assert read_set(tmp_path / "s")["training"]["sparsity"] == "batchtopk"
    info = json.loads((layer_dir(tmp_path / "s", 0) / "workbench.json").read_text())
    assert info["sparsity"] == "batchtopk"
    assert out["quality"][0]["explained_variance"] > 0.2
    # resumed with the other choice: one line, nothing rebuilt
    with pytest.raises(RangeError, match=r"^dictionary set 's' was built with sparsity batchtopk \(not topk\)") as e:
        build_set(model, _spec(model, sparsity="topk"), root=tmp_path / "s", texts=texts)
    assert "\n" not in str(e.value)
    # a set built before the choice (no sparsity in set.json): resumes as TopK, and refuses batchtopk named
    meta = json.loads((tmp_path / "s" / SET_FILE).read_text())
    del meta["training"]["sparsity"], meta["spec"]["sparsity"]
    (tmp_path / "s" / SET_FILE).write_text(json.dumps(meta))
    del info["sparsity"]  # nor in its layers' records
    (layer_dir(tmp_path / "s", 0) / "workbench.json").write_text(json.dumps(info))
    assert build_set(model, _spec(model), root=tmp_path / "s", texts=texts)["training"]["sparsity"] == "topk"
    with pytest.raises(RangeError, match=r"sparsity topk \(not batchtopk\)"):
        build_set(model, _spec(model, sparsity="batchtopk"), root=tmp_path / "s", texts=texts)
    # topk named for a new set trains per-token TopK and records it
    build_set(model, _spec(model, sparsity="topk"), root=tmp_path / "t", texts=texts)
    assert json.loads((layer_dir(tmp_path / "t", 0) / "workbench.json").read_text())["sparsity"] == "topk"


def test_the_choice_is_checked():
    spec = dict(model="m", layers=[0], width=32, k=4, tokens=2000)
    with pytest.raises(RangeError, match=r"^--sparsity 'nosuch': one of topk, batchtopk$"):
        SetSpec(**spec, sparsity="nosuch").check()
    for good in (None, "topk", "batchtopk"):
        SetSpec(**spec, sparsity=good).check()
    assert SetSpec(**spec, sparsity="topk").recipe() is None
    assert SetSpec(**spec, sparsity="batchtopk").recipe() == {"sparsity": "batchtopk"}
