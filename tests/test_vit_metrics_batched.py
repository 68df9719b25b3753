"""The batched evaluation path gives the per-step numbers: deletion / insertion / perturbation AUCs from the
deduplicated, batched forwards (with and without the shared clean and baseline ends), IG's batched steps, and a
whole evaluate() against the per-step definition."""

from __future__ import annotations

import pytest
import torch

from attribution.vit import metrics as M
from attribution.vit.data import ImageBatch
from attribution.vit.evaluate import evaluate, prepare
from attribution.vit.methods import explain
from core.models.vit import HookedViT, ViTConfig

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny() -> HookedViT:
    torch.manual_seed(0)
    m = HookedViT(ViTConfig(image_size=16, patch_size=4, d_model=16, n_layers=2, n_heads=2, d_mlp=32,
                            n_classes=3)).eval()
    with torch.no_grad():  # confident enough that the hits along a curve change
        m.W_head.mul_(8)
    return m


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.rand(5, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=0), (k, a[k], b[k])


@pytest.mark.parametrize("steps", [4, 10, 20, 32])
@pytest.mark.parametrize("baseline", ["zeros", "blur"])
def test_batched_curves_equal_per_step(tiny, images, steps, baseline):
    g = torch.Generator().manual_seed(steps)
    targets = torch.tensor([0, 1, 2, 0, 1])
    for maps in (torch.randn(5, 16, generator=g), torch.zeros(5, 16)):  # a constant map: ties broken alike
        ref = M.perturbation_scores_per_step(tiny, images, targets, maps, baseline, steps)
        for rows in (1, 7, 64):
            _close(M.perturbation_scores(tiny, images, targets, maps, baseline, steps, rows=rows), ref)
        with torch.no_grad():
            base = torch.zeros_like(images) if baseline == "zeros" else M.blur(images)
            ends = (tiny(images), tiny(base))
        _close(M.perturbation_scores(tiny, images, targets, maps, baseline, steps, ends=ends), ref)
    # the curves are not flat: the test could fail
    assert ref["deletion_auc"].std() > 0 and ref["negative_perturbation_auc"].std() > 0


def _ig_per_step(model, images, targets, steps):
    total = torch.zeros_like(images)
    for k in range(steps):
        x = (images * (k + 0.5) / steps).detach().requires_grad_(True)
        total += torch.autograd.grad(model(x).gather(1, targets.view(-1, 1)).sum(), x)[0]
    return model.patchify(images * total / steps).sum(-1)


@pytest.mark.parametrize("steps", [1, 7, 20])
def test_ig_batched_steps_equal_per_step(tiny, images, steps):
    targets = torch.tensor([2, 1, 0, 0, 1])
    got = explain(tiny, images, "ig", targets, steps=steps).flat
    want = _ig_per_step(tiny, images, targets, steps)
    assert want.abs().max() > 1e-3
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_evaluate_equals_per_step_definition(tiny, images):
    masks = torch.zeros(5, 16, 16, dtype=torch.bool)
    masks[:, 4:12, 4:12] = True
    batch = ImageBatch(images, torch.tensor([0, 1, 2, 0, 1]), masks, "synthetic", ("a", "b", "c"))
    res = evaluate(tiny, batch, ["rollout", "ig", "random"], batch_size=2, steps=10,
                   params={"ig": {"steps": 5}})
    prep = prepare(tiny, batch)
    with torch.no_grad():
        assert prep.accuracy == float((tiny(images).argmax(-1) == batch.labels).float().mean())
    for name in ("rollout", "ig", "random"):
        rows = res.per_image[res.per_image.method == name]
        maps = res.maps[name].flat
        ref = M.perturbation_scores_per_step(tiny, images, batch.labels, maps, steps=10)
        for k, v in ref.items():
            assert torch.allclose(torch.tensor(rows[k].to_numpy()), v, atol=1e-5), (name, k)
