"""The hard ViT set: several objects, one decisive (the red one of a class shape), decoys, clutter and
occlusion; its mask (the decisive object's visible pixels) is what the metrics score; the shipped
vit-synth-hard model loads from the zoo and beats chance."""

import numpy as np
import pytest
import torch

from attribution.vit import data
from attribution.vit import metrics as M
from core.errors import DatasetError

torch.set_num_threads(1)


def test_hard_images_hold_several_objects_one_decisive():
    roles_seen = set()
    occluded = 0
    for i in range(40):
        scene = data.hard_scene(data.TEST_SEED, i)
        objs = scene["objects"]
        shapes = [o for o in objs if o["role"] != "occluder"]
        roles_seen |= {o["role"] for o in objs}
        assert len(shapes) >= 4  # the decisive object and at least three others
        targets = [o for o in objs if o["role"] == "target"]
        assert len(targets) == 1 and targets[0]["class"] == scene["label"]
        # every other shape of a class is of another class, and none of them is red
        assert all(o["class"] != scene["label"] for o in shapes if o["role"] in ("distractor", "near_red"))
        img = scene["image"]
        for o in shapes:
            if o["role"] in ("distractor", "near_red"):
                px = img[:, o["pixels"]]
                assert (px[1:] / px[0].clip(1e-6) >= 0.45).any(axis=0).all()  # green or blue >= half of red
        mask, target = scene["mask"], targets[0]["pixels"]
        assert mask.any() and not (mask & ~target).any()  # visible part of the decisive object only
        frac = mask.sum() / target.sum()
        assert 0.6 <= frac <= 1.0
        occluded += frac < 1.0
    assert {"target", "distractor", "near_red", "decoy", "occluder"} <= roles_seen
    assert 10 <= occluded <= 35  # occlusion in about 60% of images


def test_hard_batch_is_reproducible_and_differs_from_synthetic():
    a, b = data.hard(6, 2), data.sample_images("hard", 6, 2)
    assert torch.equal(a.images, b.images) and torch.equal(a.masks, b.masks) and a.dataset == "hard"
    assert not torch.equal(a.images, data.synthetic(6, 2).images)
    assert a.images.shape == (6, 3, 32, 32) and a.masks.shape == (6, 32, 32)
    with pytest.raises(DatasetError):
        data.sample_images("nope", 2)


def test_metrics_score_the_decisive_objects_mask():
    batch = data.hard(30, data.TEST_SEED)
    patch = 4
    frac = M.patch_fraction(batch.masks, patch)
    on_target = frac.clone()  # a map that is the mask itself points at the decisive object
    assert M.localization_scores(on_target, batch.masks, patch)["pointing_game"].min() == 1.0
    # a map peaked on the red decoy (or another object) misses: the metric reads the mask, not "objects"
    hits = []
    for i in range(len(batch)):
        scene = data.hard_scene(data.TEST_SEED, i)
        other = next(o for o in scene["objects"] if o["role"] in ("decoy", "distractor"))
        m = torch.from_numpy(other["pixels"] & ~scene["mask"])[None]
        hits.append(M.localization_scores(M.patch_fraction(m, patch), batch.masks[i:i + 1], patch)
                    ["pointing_game"].item())
    assert np.mean(hits) < 0.2  # only where an object's patch touches the decisive one's


def test_shipped_hard_model_loads_and_beats_chance():
    from core.models.zoo import load, resolve

    entry = resolve("vit-synth-hard")
    assert entry.kind == "vit" and entry.params < 500_000
    model = load("vit-synth-hard")
    batch = data.hard(64, data.TEST_SEED)
    with torch.no_grad():
        acc = (model(batch.images).argmax(-1) == batch.labels).float().mean().item()
    assert acc > 0.6  # chance is 0.25
