"""Hugging Face vision models from local directories (ViT, DeiT, DINOv2 bare and with its classifier, CLIP's
vision tower), on tiny random configs written here: the HookedViT computes what transformers computes, every
ViT method runs on it, and DPA's linearised propagation stays exact through what each family adds (layer
scale, a distillation token, [CLS, mean] pooling, a LayerNorm before block 0, quick GELU)."""

from __future__ import annotations

import pytest
import torch

from attribution.vit.methods import METHODS, explain
from attribution.vit.methods._common import capture
from core.models.vit_heads import LinearHead, with_linear_head

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             image_size=32, patch_size=8)


def _save(path, model):
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    import transformers as T

    torch.manual_seed(0)
    out = {}
    root = tmp_path_factory.mktemp("hf-vision")
    out["vit"] = _save(root / "vit", T.ViTForImageClassification(T.ViTConfig(**SMALL, num_labels=3)).eval())
    out["deit"] = _save(root / "deit", T.DeiTForImageClassification(T.DeiTConfig(**SMALL, num_labels=3)).eval())
    dino = {k: v for k, v in SMALL.items() if k != "intermediate_size"}
    bare = T.Dinov2Model(T.Dinov2Config(**dino, mlp_ratio=2, layerscale_value=0.5)).eval()
    with torch.no_grad():  # layer scale away from 1, so folding it is tested
        for layer in bare.encoder.layer:
            layer.layer_scale1.lambda1.uniform_(0.2, 1.5)
            layer.layer_scale2.lambda1.uniform_(0.2, 1.5)
    out["dinov2"] = _save(root / "dinov2", bare)
    out["dinov2-cls"] = _save(root / "dinov2-cls", T.Dinov2ForImageClassification(
        T.Dinov2Config(**dino, mlp_ratio=2, num_labels=3)).eval())
    out["clip"] = _save(root / "clip", T.CLIPVisionModel(T.CLIPVisionConfig(**SMALL)).eval())
    return out


def _hf(path):
    import json

    import transformers as T

    cfg = json.loads((path / "config.json").read_text())
    arch = cfg["architectures"][0]
    return getattr(T, arch).from_pretrained(str(path), use_safetensors=True, local_files_only=True).eval()


def _head(d: int, n: int = 3) -> LinearHead:
    g = torch.Generator().manual_seed(3)
    return LinearHead("probe", torch.randn(n, d, generator=g), torch.randn(n, generator=g), ["a", "b", "c"])


def _ours(kind, hf_dirs, **kw):
    from core.models.zoo import load, resolve

    entry = resolve(str(hf_dirs[kind]))
    assert entry.kind == "vit"
    m = load(str(hf_dirs[kind]), **kw)
    if m.cfg.n_classes == 0:  # a bare backbone: attach a head
        m = with_linear_head(m, _head(m.cfg.d_model))
    return m


@pytest.mark.parametrize("kind", ["vit", "deit", "dinov2", "dinov2-cls", "clip"])
def test_same_numbers_as_transformers(hf_dirs, kind):
    hf = _hf(hf_dirs[kind])
    m = _ours(kind, hf_dirs)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = m(x)
        if kind in ("vit", "deit", "dinov2-cls"):
            ref = hf(pixel_values=x).logits
        else:  # bare backbones: the head on their pooled class token (after the final LayerNorm)
            pooled = hf(pixel_values=x).pooler_output
            head = _head(m.cfg.d_model)
            ref = pooled @ head.weight.T + head.bias
    assert ours.shape == ref.shape
    assert torch.allclose(ours, ref, atol=1e-4), (ours - ref).abs().max()


def test_dinov2_positions_interpolated_as_transformers_does(hf_dirs):
    hf = _hf(hf_dirs["dinov2"])
    m = _ours("dinov2", hf_dirs, image_size=48)  # 6 x 6 patches from a 4 x 4 grid of positions
    assert m.cfg.grid == 6
    x = torch.rand(1, 3, 48, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        _, acts, _ = capture(m, x, [f"blocks.{m.cfg.n_layers - 1}.hook_resid_post"], grad=False)
        ours = m.ln_final(acts[f"blocks.{m.cfg.n_layers - 1}.hook_resid_post"])
        ref = hf(pixel_values=x).last_hidden_state
    assert torch.allclose(ours, ref, atol=1e-4)


@pytest.mark.parametrize("kind", ["deit", "dinov2-cls", "clip"])
def test_every_method_runs(hf_dirs, kind):
    m = _ours(kind, hf_dirs)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    for method in METHODS:
        pm = explain(m, x, method, **({"steps": 2} if method in ("tam", "ig") else {}))
        assert pm.scores.shape == (2, 4, 4) and bool(torch.isfinite(pm.scores).all()), method


@pytest.mark.parametrize("kind", ["deit", "dinov2", "dinov2-cls", "clip"])
def test_dpa_exact_when_linearised(hf_dirs, kind):
    from attribution.vit.methods import dpa

    m = _ours(kind, hf_dirs)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    targets = torch.tensor([2, 0])
    t0, const, acts = dpa.propagate(m, m.check_images(x), targets, w_q=0, w_k=0, w_v=1, w_mlp=1,
                                    mlp_mode="ratio")
    with torch.no_grad():
        _, emb, _ = capture(m, x, ["hook_embed", "hook_pos_embed"], grad=False)
        entry = emb["hook_embed"] + emb["hook_pos_embed"]  # CLIP: t0 is before its LayerNorm on the embeddings
        if not m.cfg.ln_pre:
            entry = acts["blocks.0.hook_resid_pre"]
        total = (t0 * entry).sum((1, 2)) + const
        logit = m(x).gather(1, targets[:, None])[:, 0]
    assert torch.allclose(total, logit, atol=1e-3), (total - logit)


def test_vision_model_by_hub_id_from_the_local_cache(hf_dirs, tmp_path, monkeypatch):
    """A hub id resolves through the local HF cache (the LLMs' resolution, core.models.hub) to the same ViT."""
    import shutil

    from huggingface_hub import constants

    import workbench as wb

    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--tiny-org--tiny-dinov2"
    snap = repo / "snapshots" / rev
    shutil.copytree(hf_dirs["dinov2-cls"], snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    for key, value in (("HF_HUB_CACHE", str(tmp_path / "hub")), ("HF_HUB_OFFLINE", True)):
        monkeypatch.setenv(key, str(value) if key == "HF_HUB_CACHE" else "1")
        monkeypatch.setattr(constants, key, value)
    m = wb.load("tiny-org/tiny-dinov2")
    x = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert torch.allclose(m(x), _ours("dinov2-cls", hf_dirs)(x), atol=1e-6)
