"""ViT maps: the slips public implementations made, shapes, the DAP and DPA rules."""

from __future__ import annotations

import pytest
import torch

from attribution.vit.methods import METHODS, explain
from attribution.vit.methods._common import capture, pattern_name, resid_pre_name
from core.errors import MethodError, RangeError
from core.models.vit import HookedViT, ViTConfig

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny() -> HookedViT:
    torch.manual_seed(0)
    m = HookedViT(ViTConfig(image_size=16, patch_size=4, d_model=16, n_layers=3, n_heads=2, d_mlp=32,
                            n_classes=3)).eval()
    with torch.no_grad():  # larger logits so gradients are not tiny
        m.W_head.mul_(4)
    return m


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def _identity_pattern(pattern, hook):
    return torch.eye(pattern.shape[-1]).expand_as(pattern).clone()


@pytest.mark.parametrize("method", list(METHODS))
def test_maps_have_patch_grid_shape(tiny, images, method):
    params = {"steps": 3} if method in ("tam", "ig") else {}
    pm = explain(tiny, images, method, **params)
    assert pm.scores.shape == (3, 4, 4)  # (image, row, col): a 16 px image of 4 px patches
    assert pm.axes == ("image", "row", "col")
    assert torch.isfinite(pm.scores).all()
    assert pm.targets.shape == (3,)
    assert pm.upsample().shape == (3, 16, 16)


def test_rollout_identity_attention_is_cls_only(tiny, images):
    with tiny.hooks(fwd_hooks=[(lambda n: n.endswith("hook_pattern"), _identity_pattern)]):
        pm = explain(tiny, images, "rollout")
        raw = explain(tiny, images, "attention")
    # all of CLS's mass stays on CLS: the patch map is uniform (zero)
    assert torch.allclose(pm.scores, torch.zeros_like(pm.scores))
    assert torch.allclose(raw.scores, torch.zeros_like(raw.scores))


def test_rollout_rows_sum_to_one_and_multiply_in_layer_order():
    from attribution.vit.methods.rollout import rollout_matrix

    g = torch.Generator().manual_seed(0)
    pats = [torch.rand(1, 2, 5, 5, generator=g).softmax(-1) for _ in range(2)]
    r = rollout_matrix(pats)
    assert torch.allclose(r.sum(-1), torch.ones(1, 5))  # row-normalised (key axis), not columns
    bars = [(p.mean(1) + torch.eye(5)) / (p.mean(1) + torch.eye(5)).sum(-1, keepdim=True) for p in pats]
    assert torch.allclose(r, bars[1] @ bars[0], atol=1e-6)  # later layer on the left
    assert not torch.allclose(r, bars[0] @ bars[1], atol=1e-4)


def test_gradients_pair_with_their_own_layer(tiny, images):
    """Only layer 1's attention reaches the output: its pattern alone may get a gradient."""
    m = HookedViT(tiny.cfg)
    m.load_state_dict(tiny.state_dict())
    with torch.no_grad():
        for l in (0, 2):
            m.blocks[l].attn.W_O.zero_()
    names = [pattern_name(l) for l in range(3)]
    targets = torch.tensor([0, 1, 2])
    _, acts, grads = capture(m, images, names, grad=True, targets=targets)
    assert grads[names[0]].abs().max() == 0 and grads[names[2]].abs().max() == 0
    assert grads[names[1]].abs().max() > 0
    # and it is the gradient of that very tensor: compare with an independent autograd pass
    store = {}
    logits = m.run_with_hooks(images, fwd_hooks=[(names[1], lambda t, hook: store.setdefault("a", t))])
    ref = torch.autograd.grad(logits.gather(1, targets[:, None]).sum(), store["a"])[0]
    assert torch.allclose(grads[names[1]], ref, atol=1e-6)


def test_gradcam_uses_last_layer_gradient(tiny, images):
    m = HookedViT(tiny.cfg)
    m.load_state_dict(tiny.state_dict())
    with torch.no_grad():
        m.blocks[-1].attn.W_O.zero_()  # the last layer's attention no longer matters
    pm = explain(m, images, "gradcam", target_class=0)
    assert torch.allclose(pm.scores, torch.zeros_like(pm.scores))
    assert max(explain(tiny, images, "gradcam", target_class=c).scores.max() for c in range(3)) > 0


def test_gae_with_zero_gradients_is_cls_only(tiny, images):
    m = HookedViT(tiny.cfg)
    m.load_state_dict(tiny.state_dict())
    with torch.no_grad():
        for b in m.blocks:
            b.attn.W_O.zero_()
    assert torch.allclose(explain(m, images, "gae").scores, torch.zeros(3, 4, 4))


def test_dap_with_flat_prior_is_rollout(tiny, images):
    from attribution.vit.methods import dap
    from attribution.vit.methods.rollout import rollout_matrix

    pats, pgrads, feats, fgrads = dap.capture_for_dap(tiny, images, torch.tensor([0, 1, 2]), [0, 1, 2])
    ts = dap.dpa_targets(tiny, images, torch.tensor([0, 1, 2]), [0, 1, 2])[2]
    for kind in dap.PRIORS:  # gamma 0 switches the prior off: plain rollout
        for on in ("cols", "rows"):
            flat = dap.propagate(pats, pgrads, feats, fgrads, kind, on, gamma=0.0, dpa_targets=ts)
            assert torch.allclose(flat, rollout_matrix(pats)[:, 0, 1:], atol=1e-6)
    zero = dap.propagate(pats, [torch.zeros_like(g) for g in pgrads], feats, fgrads, "attention")
    assert torch.allclose(zero, rollout_matrix(pats)[:, 0, 1:], atol=1e-6)  # no evidence: flat prior
    sharp = dap.propagate(pats, pgrads, feats, fgrads, "attention")
    assert not torch.allclose(sharp, rollout_matrix(pats)[:, 0, 1:], atol=1e-4)


def test_dap_dpa_prior_is_dpa_targets_times_tokens(tiny, images):
    from attribution.vit.methods import dap, dpa

    targets = torch.tensor([2, 0, 1])
    keep: dict = {}
    t0, _, acts = dpa.propagate(tiny, images, targets, **dpa.DEFAULTS, keep=keep)
    assert sorted(keep) == [0, 1, 2] and torch.equal(keep[0], t0)  # t^0 is DPA's own target
    pats, feats, ts = dap.dpa_targets(tiny, images, targets, [1, 2])
    assert torch.equal(ts[0], keep[1]) and torch.equal(feats[0], acts[resid_pre_name(1)])
    c = (feats[0] * ts[0]).sum(-1).clamp(min=0)
    p = dap.decision_prior("dpa", pats[0], None, feats[0], None, ts[0])
    assert torch.allclose(p, c / c.mean(-1, keepdim=True), atol=1e-6)  # mean 1 (non-zero rows here)
    with pytest.raises(MethodError, match="DPA targets"):
        dap.decision_prior("dpa", pats[0], None, feats[0], None)
    # the method, with the gradient-free path, equals propagate on the same cache
    kw = {"prior": "dpa", "prior_on": "rows", "identity": 0.5, "gamma": 0.5, "final_prior": "first", "start": 1}
    got = explain(tiny, images, "dap", targets, **kw).flat
    want = dap.propagate(pats, None, feats, None, "dpa", "rows", "mean", 0.5, 0.5, "first", ts)
    assert torch.allclose(got, want, atol=1e-6)


def test_dap_depends_on_class_and_variants_run(tiny, images):
    a = explain(tiny, images, "dap", target_class=0).flat
    b = explain(tiny, images, "dap", target_class=1).flat
    assert not torch.allclose(a, b)
    for kw in ({"prior_on": "rows"}, {"head_fusion": "grad"}, {"prior": "gradcam"}, {"prior": "gradxinput"},
               {"prior": "attention", "prior_on": "cols", "identity": 2.0},
               {"prior": "dpa", "head_fusion": "grad"}, {"prior": "dpa", "prior_on": "cols"},
               {"start": 1, "end": 2}, {"identity": 0.5, "final_prior": "first"}, {"gamma": 0.5}):
        assert explain(tiny, images, "dap", **kw).scores.shape == (3, 4, 4)
    with pytest.raises(MethodError):
        explain(tiny, images, "dap", prior_on="diagonal")
    with pytest.raises(MethodError):
        explain(tiny, images, "dap", start=3)
    with pytest.raises(MethodError):
        explain(tiny, images, "dap", prior="oracle")


def test_dpa_propagation_is_exact_when_linearised(tiny, images):
    from attribution.vit.methods import dpa

    targets = torch.tensor([2, 0, 1])
    t0, const, acts = dpa.propagate(tiny, images, targets, w_q=0, w_k=0, w_v=1, w_mlp=1, mlp_mode="ratio")
    total = (t0 * acts[resid_pre_name(0)]).sum((1, 2)) + const
    with torch.no_grad():
        logit = tiny(images).gather(1, targets[:, None])[:, 0]
    assert torch.allclose(total, logit, atol=1e-4)


def test_random_differs_between_classes(tiny, images):
    a = explain(tiny, images, "random", target_class=0).flat
    assert torch.equal(a, explain(tiny, images, "random", target_class=0).flat)
    assert not torch.equal(a, explain(tiny, images, "random", target_class=1).flat)


def test_bad_method_params_and_targets(tiny, images):
    with pytest.raises(MethodError, match="unknown ViT method"):
        explain(tiny, images, "lime")
    with pytest.raises(MethodError, match="no parameter"):
        explain(tiny, images, "rollout", alpha=1)
    with pytest.raises(RangeError):
        explain(tiny, images, "gae", target_class=7)


def test_app_api_explain_all_and_image_metrics(tiny, images):
    import attribution.vit as vit
    from attribution.vit.data import ImageBatch

    masks = torch.zeros(3, 16, 16, dtype=torch.bool)
    masks[:, :8, :8] = True
    batch = ImageBatch(images, torch.tensor([0, 1, 2]), masks)
    maps = vit.explain_all(tiny, images, ["dap", "rollout", "random"], target_class=batch.labels)
    assert set(maps) == {"dap", "rollout", "random"}
    table = vit.image_metrics(tiny, batch, maps)
    assert len(table) == 9 and {"pointing_game", "mask_iou", "deletion_auc"} <= set(table.columns)
    assert table["mask_iou"].between(0, 1).all()
    fig = maps["dap"].plot(images, index=1)
    assert len(fig.data) == 3  # image, image under the map, heat map
    assert vit.sample_images("synthetic", n=2).images.shape == (2, 3, 32, 32)
