"""The transcoder set's massive-token rule (issue 53: smollm2-135m's layer 11 writes an MLP output ~800x its median
norm at a few position-1 tokens, which held 99.5% of the held-out variance): such tokens are left out of training
and of the held-out figures, counted in the set's quality record; sets built before the rule load and resume as
they were built, and a set resumes only with its own rule."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from attribution.sae.evaluate import reconstruction
from attribution.sae.sets import (
    SET_FILE,
    SetSpec,
    build_set,
    cache_layers,
    load_set,
    read_set,
    summary,
    transcoder_hooks,
)
from attribution.sae.train_shards import count_massive, massive_norm, train_topk_transcoder
from core.errors import RangeError
from core.models.tiny import tiny_model

PLANTED = [3, 50, 200]  # rows of the first training shard given a massive output


def _texts(n: int, seed: int) -> list[list[int]]:
    return torch.randint(0, 10, (n, 24), generator=torch.Generator().manual_seed(seed)).tolist()


def _plant(shards, rows: list[int]) -> None:
    """Give ``rows`` of the first shard an MLP output 1000x the median norm, in one dimension (as smollm2's)."""
    hout = transcoder_hooks(0)[1]
    f = shards.files()[0]
    t = load_file(str(f))
    med = float(t[hout].float().norm(dim=1).median())
    t[hout][rows] = 0
    t[hout][rows, 0] = 1000 * med
    save_file(t, str(f))


@pytest.fixture(scope="module")
def acts(tmp_path_factory):
    model = tiny_model(layers=1, d_model=16, n_ctx=32)
    root = tmp_path_factory.mktemp("acts")
    clean = cache_layers(model, [0], _texts(200, 0), root / "clean", 2000, ctx=24, shard_tokens=500)[0]
    planted = cache_layers(model, [0], _texts(200, 0), root / "planted", 2000, ctx=24, shard_tokens=500)[0]
    _plant(planted, PLANTED)
    return clean, planted


def _train(shards, tmp_path, massive_above: float):
    hin, hout = transcoder_hooks(0)
    return train_topk_transcoder(shards, hin, hout, 32, 4, 2000, tmp_path / f"ck{massive_above}", batch_size=128,
                                 recipe={"massive_above": massive_above}, checkpoint_every=10**9)


def _ev_ordinary(w, clean) -> float:
    hin, hout = transcoder_hooks(0)
    x, y = clean.tensor(hin).float(), clean.tensor(hout).float()
    pre = torch.relu(x @ w["W_enc"] + w["b_enc"])
    v, i = pre.topk(4, dim=-1)
    y_hat = torch.zeros_like(pre).scatter(-1, i, v) @ w["W_dec"] + w["b_dec"] + x @ w["W_skip"].T
    return 1 - float(((y - y_hat) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())


def test_a_planted_massive_token_is_left_out_of_training(acts, tmp_path):
    clean, planted = acts
    hout = transcoder_hooks(0)[1]
    limit = massive_norm(planted.load(0, [hout])[hout], 100)
    assert count_massive(planted, hout, limit) == len(PLANTED) and count_massive(clean, hout, limit) == 0
    w = _train(planted, tmp_path, 100)
    assert w["massive_train"] == len(PLANTED) and w["massive_norm"] == pytest.approx(limit)
    base = _ev_ordinary(_train(clean, tmp_path / "c", 100), clean)
    # with the rule the three tokens change nothing that matters; without it they set the scale and the skip fit
    assert _ev_ordinary(w, clean) == pytest.approx(base, abs=0.03)
    kept = _train(planted, tmp_path / "k", 0)
    assert kept["massive_norm"] is None and kept["massive_train"] == 0
    assert _ev_ordinary(kept, clean) < base - 0.1


def test_the_held_out_figures_leave_them_out(tmp_path):
    from attribution.sae.evaluate import evaluate_dictionary
    from attribution.sae.sets import layer_dir

    model = tiny_model(layers=1, d_model=16, n_ctx=32)
    texts = {"train": _texts(200, 0), "heldout": _texts(60, 1)}
    spec = dict(model=model.name, layers=[0], width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128,
                shard_tokens=500, eval_windows=4, ctx=24)
    build_set(model, SetSpec(**spec), root=tmp_path / "s", texts=texts)
    info = json.loads((layer_dir(tmp_path / "s", 0) / "workbench.json").read_text())
    assert info["massive_above"] == 100 and info["massive_norm"] > 0  # the default for a new set
    dic = load_set(str(tmp_path / "s"))[0]
    held = cache_layers(model, [0], texts["heldout"], tmp_path / "held", 500, ctx=24, shard_tokens=500)[0]
    _plant(held, [0, 7])
    hin, hout = transcoder_hooks(0)
    x, y = held.tensor(hin).float(), held.tensor(hout).float()
    m = evaluate_dictionary(model, dic, held, eval_windows=0, massive_norm=info["massive_norm"])
    ok = torch.ones(len(y), dtype=torch.bool)
    ok[[0, 7]] = False
    assert m["massive_tokens"] == 2
    assert m["explained_variance"] == pytest.approx(reconstruction(dic, x[ok], y[ok])["explained_variance"], abs=1e-6)
    everything = evaluate_dictionary(model, dic, held, eval_windows=0)
    assert "massive_tokens" not in everything and everything["explained_variance"] < m["explained_variance"] - 0.5


def _planting(monkeypatch) -> dict[str, int]:
    """Cached activations get a massive MLP output at position 1 of every 7th window (smollm2's pattern); the
    count of planted tokens, by split (told apart by the shard's window count, as the test's texts give)."""
    import attribution.sae.shards as shards_mod

    real = shards_mod.shard_tensors
    planted = {"n": 0}

    def plant(model, hooks, *args, **kwargs):
        t = real(model, hooks, *args, **kwargs)
        rows = (t["where"][:, 0] % 7 == 0) & (t["where"][:, 1] == 1)
        for h in hooks:
            if h.endswith("hook_mlp_out"):
                med = float(t[h].float().norm(dim=1).median())
                t[h][rows] = 0
                t[h][rows, 0] = 1000 * med
        planted["n"] += int(rows.sum())
        return t

    monkeypatch.setattr(shards_mod, "shard_tensors", plant)
    return planted


def test_the_quality_record_counts_them_and_old_sets_resume_without_the_rule(tmp_path, monkeypatch):
    from attribution.sae.sets import layer_dir

    model = tiny_model(layers=1, d_model=16, n_ctx=32)
    texts = {"train": _texts(200, 0), "heldout": _texts(60, 1)}
    spec = dict(model=model.name, layers=[0], width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128,
                shard_tokens=500, eval_windows=4, ctx=24)
    planted = _planting(monkeypatch)
    out = build_set(model, SetSpec(**spec), root=tmp_path / "s", texts=texts)  # a new set: the rule on (100x)
    row = out["quality"][0]
    assert read_set(tmp_path / "s")["training"]["massive_above"] == 100
    left = row["massive_left_out"]
    assert left["train"] > 0 and left["heldout"] > 0 and left["train"] + left["heldout"] == planted["n"]
    # the same tokens without the rule: they hold the held-out variance and the EV reported collapses
    off = build_set(model, SetSpec(**spec, massive_above=0), root=tmp_path / "off", texts=texts)["quality"][0]
    assert off["massive_left_out"] == {"train": 0, "heldout": 0}
    assert row["explained_variance"] > 0.2 and off["explained_variance"] < row["explained_variance"] - 0.2
    for other in (0, 3):  # resumed with another rule: one line, as for epochs
        with pytest.raises(RangeError, match=r"^dictionary set 's' was built with massive_above 100 \(not") as e:
            build_set(model, SetSpec(**spec, massive_above=other), root=tmp_path / "s", texts=texts)
        assert "\n" not in str(e.value)
    assert build_set(model, SetSpec(**spec), root=tmp_path / "s", texts=texts)["training"]["massive_above"] == 100

    # the same set as built before the rule: no massive_above in set.json's training nor in the layer's record
    meta = json.loads((tmp_path / "s" / SET_FILE).read_text())
    del meta["training"]["massive_above"], meta["spec"]["massive_above"]
    (tmp_path / "s" / SET_FILE).write_text(json.dumps(meta))
    path = layer_dir(tmp_path / "s", 0) / "workbench.json"
    info = json.loads(path.read_text())
    for k in ("massive_above", "massive_norm", "massive_train_tokens"):
        del info[k]
    del info["metrics"]["massive_tokens"]
    path.write_text(json.dumps(info))
    assert len(load_set(str(tmp_path / "s"))) == 1
    assert summary(tmp_path / "s")["quality"][0]["massive_left_out"] == {"train": 0, "heldout": 0}
    # it resumes with no rule (the default takes the set's own), and refuses the new default named
    assert build_set(model, SetSpec(**spec), root=tmp_path / "s", texts=texts)["training"]["massive_above"] == 0
    with pytest.raises(RangeError, match=r"massive_above 0 \(not 100\)"):
        build_set(model, SetSpec(**spec, massive_above=100), root=tmp_path / "s", texts=texts)


def test_the_multiple_is_checked():
    spec = dict(model="m", layers=[0], width=32, k=4, tokens=2000)
    for bad in (0.5, 1.0, -3.0):
        with pytest.raises(RangeError, match="--massive-above"):
            SetSpec(**spec, massive_above=bad).check()
    for good in (None, 0, 2, 100):
        SetSpec(**spec, massive_above=good).check()
    assert SetSpec(**spec).recipe() is None and SetSpec(**spec, massive_above=0, epochs=3).recipe() == {"epochs": 3}
    assert SetSpec(**spec, massive_above=100).recipe() == {"massive_above": 100}
