"""SAE training with SAELens on synthetic activations, save/load format, metrics, corpus, cache."""

from __future__ import annotations

import json

import pytest
import torch

from attribution.sae.train import (
    check_fits,
    fit,
    load_sae,
    reconstruction_metrics,
    save_sae,
    training_sae,
)
from core.errors import ModelFileError, RangeError


def _sparse_data(n, seed=0, d=16, n_feat=40):
    gen = torch.Generator().manual_seed(seed)
    D = torch.randn(n_feat, d, generator=torch.Generator().manual_seed(99))
    D = D / D.norm(dim=1, keepdim=True)
    f = (torch.rand(n, n_feat, generator=gen) < 0.08).float() * torch.rand(n, n_feat, generator=gen) * 3
    return f @ D + 5.0  # a large mean, as residual streams have


@pytest.mark.parametrize(
    "kind,kw,saved_as", [("topk", {"k": 6}, "topk"), ("batchtopk", {"k": 6}, "jumprelu")]
)
def test_train_recovers_sparse_structure_and_round_trips(kind, kw, saved_as, tmp_path):
    torch.manual_seed(0)
    X, Xe = _sparse_data(8000), _sparse_data(2000, seed=1)
    sae = fit(
        training_sae(kind, 16, 64, model="m", hook="blocks.0.hook_resid_post", **kw),
        X,
        32000,
        batch_size=256,
        lr=2e-3,
    )
    m = reconstruction_metrics(sae, Xe)
    assert m["explained_variance"] > 0.6 and m["l0"] <= 8 and m["dead_fraction"] < 0.5
    path = save_sae(sae, tmp_path / "sae", {"note": "test"})
    assert (path / "cfg.json").exists() and (path / "sae_weights.safetensors").exists()
    cfg = json.loads((path / "cfg.json").read_text())
    assert cfg["architecture"] == saved_as and cfg["metadata"]["hook_name"] == "blocks.0.hook_resid_post"
    back = load_sae(path)
    assert reconstruction_metrics(back, Xe)["explained_variance"] > 0.6
    if kind == "topk":  # BatchTopK's batch-level selection becomes a per-token threshold on saving
        x = Xe[:50]
        assert torch.allclose(back.decode(back.encode(x)), sae.decode(sae.encode(x)), atol=1e-4)


def test_jumprelu_and_l1_train():
    X = _sparse_data(4000)
    for kind in ("jumprelu", "l1"):
        sae = fit(training_sae(kind, 16, 32), X, 2048, batch_size=256, lr=1e-3)
        assert reconstruction_metrics(sae, X[:500])["n_eval_tokens"] == 500


def test_bad_configs_raise():
    with pytest.raises(RangeError):
        training_sae("relu6", 16, 64)
    with pytest.raises(RangeError):
        training_sae("topk", 16, 0)
    with pytest.raises(RangeError):
        training_sae("topk", 16, 8, k=9)
    sae = training_sae("topk", 16, 32, k=4)
    with pytest.raises(RangeError, match="does not match"):
        check_fits(sae, 24, "blocks.0.hook_resid_post")


def test_load_sae_rejects_non_sae(tmp_path):
    with pytest.raises(ModelFileError):
        load_sae(tmp_path)


def test_corpus_builder_records_sources(tmp_path):
    from attribution.sae.corpus import build_corpus, load_corpus

    root = tmp_path / "site"
    (root / "pkg-1.0.dist-info").mkdir(parents=True)
    (root / "pkg-1.0.dist-info" / "METADATA").write_text(
        "Name: pkg\nVersion: 1.0\n\n" + "This package does useful things for people who read. " * 10
    )
    (root / "pkg").mkdir()
    (root / "pkg" / "README.md").write_text("A readme that explains the package in plain words. " * 10)
    (root / "pkg" / "LICENSE.txt").write_text("Permission is hereby granted to anyone at all. " * 10)
    (root / "pkg" / "mod.py").write_text(
        '"""' + "A module docstring with enough prose in it. " * 10 + '"""\n'
    )
    summary = build_corpus(tmp_path / "out", roots=[root])
    docs = load_corpus(tmp_path / "out")
    kinds = {d.kind for d in docs}
    assert kinds == {"metadata", "docs", "docstring"} and summary["documents"] == 3
    assert not any("LICENSE" in d.source for d in docs)
    assert "pkg/README.md" in json.loads((tmp_path / "out" / "sources.json").read_text())["sources"][
        0
    ] or any(d.source.endswith("README.md") for d in docs)


def test_cache_on_tiny_model():
    from attribution.sae.cache import cache_activations, model_texts
    from core.models.tiny import tiny_model

    m = tiny_model()
    texts = model_texts(m, None, 600, 32)
    cache = cache_activations(m, "blocks.1.hook_resid_post", texts, 600, ctx=32, batch_size=8)
    assert cache.acts.shape == (600, 16) and cache.acts.dtype == torch.float16
    w, p = cache.where[0].tolist()
    assert p == 1  # the first position of each window is skipped
