"""The hooked ViT, its checkpoints, HF conversion, data generators and metrics."""

from __future__ import annotations

import json

import pytest
import torch

from attribution.vit import data
from attribution.vit import metrics as M
from core.errors import WorkbenchError
from core.models.vit import HookedViT, ImageError, ViTConfig, load_checkpoint, save_checkpoint

torch.set_num_threads(1)
SMALL = ViTConfig(image_size=16, patch_size=4, d_model=16, n_layers=2, n_heads=2, d_mlp=32, n_classes=4)


def test_hooks_like_transformer_lens():
    torch.manual_seed(0)
    m = HookedViT(SMALL).eval()
    x = torch.rand(2, 3, 16, 16)
    logits, cache = m.run_with_cache(x)
    assert logits.shape == (2, 4)
    assert cache["blocks.1.attn.hook_pattern"].shape == (2, 2, 17, 17)
    assert cache["blocks.0.attn.hook_z"].shape == (2, 17, 2, 8)
    assert cache["blocks.0.attn.hook_result"].shape == (2, 17, 2, 16)
    assert torch.allclose(cache["blocks.1.attn.hook_pattern"].sum(-1), torch.ones(2, 2, 17))
    # per-head writes add up to the attention output
    out = cache["blocks.0.attn.hook_result"].sum(2) + m.blocks[0].attn.b_O
    assert torch.allclose(out, cache["blocks.0.hook_attn_out"], atol=1e-5)
    # patches are row-major like a stride-p convolution
    conv = torch.nn.functional.conv2d(x, m.W_patch.view(16, 3, 4, 4), m.b_patch, stride=4)
    assert torch.allclose(conv.flatten(2).transpose(1, 2), cache["hook_embed"][:, 1:], atol=1e-5)
    zero = [("blocks.1.hook_resid_post", lambda t, hook: torch.zeros_like(t))]
    zeroed = m.run_with_hooks(x, fwd_hooks=zero)
    assert torch.allclose(zeroed, zeroed[0].expand(2, -1))  # the intervention reached the logits


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 16, 16), (4, 16, 16), (2, 3, 16)])
def test_wrong_image_shape_is_a_workbench_error(shape):
    m = HookedViT(SMALL)
    with pytest.raises(ImageError, match="expects"):
        m(torch.rand(*shape))
    assert issubclass(ImageError, WorkbenchError)


def test_checkpoint_round_trip(tmp_path):
    import workbench

    torch.manual_seed(0)
    m = HookedViT(SMALL).eval()
    info = {"name": "tiny-vit", "kind": "vit", "params": 1, "loader": "core.models.vit:load_checkpoint"}
    save_checkpoint(m, tmp_path / "ck", info, {"test_accuracy": 0.5})
    back = workbench.load(str(tmp_path / "ck"))
    x = torch.rand(2, 3, 16, 16)
    assert torch.allclose(m(x), back(x))
    (tmp_path / "ck" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(WorkbenchError):
        load_checkpoint(str(tmp_path / "ck"))


def test_hf_vit_round_trip(tmp_path):
    """A small random ViTForImageClassification saved to disk loads through workbench.load."""
    from transformers import ViTConfig as HFConfig
    from transformers import ViTForImageClassification

    import workbench
    from attribution.vit.methods import METHODS, explain

    torch.manual_seed(0)
    cfg = HFConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                   num_attention_heads=2, intermediate_size=32, num_labels=3)
    hf = ViTForImageClassification(cfg).eval()
    hf.save_pretrained(tmp_path / "hfvit")
    (tmp_path / "hfvit" / "preprocessor_config.json").write_text(json.dumps(
        {"do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}))
    m = workbench.load(str(tmp_path / "hfvit"))
    assert isinstance(m, HookedViT) and m.cfg.grid == 4
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        ref = hf(pixel_values=(x - 0.5) / 0.5).logits
    assert torch.allclose(m(x), ref, atol=1e-5)
    for name in METHODS:
        params = {"steps": 2} if name in ("tam", "ig") else {}
        assert explain(m, x, name, **params).scores.shape == (2, 4, 4)


def test_synthetic_is_deterministic_with_masks():
    a, b = data.synthetic(6, seed=5), data.synthetic(6, seed=5)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    assert a.images.shape == (6, 3, 32, 32) and a.masks.shape == (6, 32, 32)
    assert (a.masks.flatten(1).sum(1) > 0).all()
    # the decisive object is the red one: its pixels are red, and it has the label's shape
    for i in range(6):
        px = a.images[i][:, a.masks[i]]
        assert (px[0] > 0.6).all() and (px[1] < 0.35).all()
        assert int(a.masks[i].sum()) == int(data.TEMPLATES[a.labels[i]].sum())
    assert not torch.equal(a.images, data.synthetic(6, seed=6).images)


def test_digits_dataset():
    d = data.digits(10)
    assert d.images.shape == (10, 3, 32, 32) and d.labels.max() <= 9
    assert d.masks.any() and d.images.max() <= 1
    with pytest.raises(WorkbenchError):
        data.sample_images("imagenet")


def test_localization_metrics_on_handmade_maps():
    masks = torch.zeros(1, 8, 8, dtype=torch.bool)
    masks[0, :4, :4] = True  # exactly patch 0 of a 2x2 grid of 4 px patches
    frac = M.patch_fraction(masks, 4)
    assert frac.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    good, bad = torch.tensor([[1.0, 0, 0, 0]]), torch.tensor([[0.0, 1, 0, 0]])
    assert M.pointing_game(good, frac).item() == 1 and M.pointing_game(bad, frac).item() == 0
    assert M.energy_pointing_game(good, frac).item() == 1 and M.energy_pointing_game(bad, frac).item() == 0
    assert M.mask_iou(good, frac).item() == 1 and M.mask_iou(bad, frac).item() == 0
    half = torch.tensor([[1.0, 1, 0, 0]])
    assert M.mask_iou(half, frac).item() == pytest.approx(0.5)
    assert M.class_sensitivity(good, good).item() == 1
    assert M.class_sensitivity(good, bad).item() == pytest.approx(-1 / 3)
    const = torch.ones(1, 4)
    assert M.class_sensitivity(const, const).item() == 1


def test_ties_are_broken_randomly_not_top_left():
    ranks = M.order(torch.zeros(1, 64))
    assert ranks[0, 0] != 0 and sorted(ranks[0].tolist()) == list(range(64))
    assert M.order(torch.arange(4.0)[None]).tolist() == [[3, 2, 1, 0]]


def test_perturbation_curves_are_bounded():
    torch.manual_seed(0)
    m = HookedViT(SMALL).eval()
    x = torch.rand(3, 3, 16, 16)
    t = m(x).argmax(-1)
    s = M.perturbation_scores(m, x, t, torch.rand(3, 16), steps=4)
    for v in s.values():
        assert v.shape == (3,) and (v >= 0).all() and (v <= 1).all()
