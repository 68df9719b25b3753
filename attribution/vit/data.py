"""Images with ground truth for the ViT benchmark.

Synthetic set: 32x32 RGB on a noisy dark background. One red object decides the class (its
shape: plus, ring, triangle or X); two to four distractors of the same shapes are drawn in
non-red colours, so a map that highlights "objects" rather than "the object that decided" is
caught. The decisive object's pixel mask is kept. Every image is a pure function of
(seed, index), so sets are reproducible and unlimited; the splits use different seeds
(train: a stream from seed 1000 on, validation: 1, held-out test: 2).

Hard synthetic set (``hard(n, seed)``, dataset name "hard"): the same rule (the label is the
shape of the one red object) but the decision is ambiguous at a glance: four to six objects,
every distractor of another class, one of them usually in a near-red colour (orange, pink,
magenta) and a red decoy that is no class (a filled square, a bar or an L), red and coloured
clutter strokes, dimmer objects, and partial occlusion of the decisive object (an occluder drawn
over it hides 15-40% of it). The mask is the decisive object's *visible* pixels, and it is what
the metrics score. Splits as for the synthetic set (hard images use seeds offset by
``HARD_OFFSET``, so a hard image never repeats a synthetic one).

Digits: scikit-learn's bundled 8x8 digits, upsampled 4x to 32x32 and copied to three
channels; the "mask" is the stroke (intensity above 0.25).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Bool, Float, Int

from core.errors import DatasetError

IMAGE_SIZE = 32
CLASSES = ("plus", "ring", "triangle", "x")
VALIDATION_SEED = 1
TEST_SEED = 2
TRAIN_SEED = 1000
_OBJ = 8  # object side in pixels


def _templates() -> np.ndarray:
    """Binary 8x8 masks, one per class."""
    s = _OBJ
    t = np.zeros((len(CLASSES), s, s), dtype=bool)
    t[0, 3:5, :] = True
    t[0, :, 3:5] = True
    t[1] = True
    t[1, 2:6, 2:6] = False
    for r in range(s):  # triangle: widens downwards
        t[2, r, max(3 - r // 2, 0):min(5 + r // 2, s)] = True
    for i in range(s):
        t[3, i, max(i - 0, 0):min(i + 2, s)] = True
        t[3, i, max(s - 2 - i, 0):min(s - i, s)] = True
    return t


TEMPLATES = _templates()


@dataclass
class ImageBatch:
    """Images (image, channel, height, width) in [0, 1], labels (image), masks (image, height, width)."""

    images: Float[torch.Tensor, "image channel height width"]
    labels: Int[torch.Tensor, " image"]
    masks: Bool[torch.Tensor, "image height width"]
    dataset: str = "synthetic"
    class_names: tuple[str, ...] = CLASSES

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def subset(self, idx) -> ImageBatch:
        return ImageBatch(self.images[idx], self.labels[idx], self.masks[idx], self.dataset, self.class_names)


def _colour(rng: np.random.Generator, target: bool) -> np.ndarray:
    if target:  # red with jitter
        return np.array([rng.uniform(0.75, 1.0), rng.uniform(0.0, 0.3), rng.uniform(0.0, 0.3)])
    base = [(0.1, 0.85, 0.15), (0.15, 0.3, 1.0), (0.1, 0.85, 0.9), (0.55, 0.55, 0.55), (0.35, 0.1, 0.9)]
    c = np.array(base[rng.integers(len(base))]) + rng.uniform(-0.1, 0.1, 3)
    c[0] = min(c[0], 0.5)  # distractors are never red
    return np.clip(c, 0, 1)


def synthetic_image(seed: int, index: int) -> tuple[Float[np.ndarray, "channel height width"], int,
                                                    Bool[np.ndarray, "height width"]]:
    """One image (3, 32, 32) float32, its label and the decisive object's mask (32, 32)."""
    rng = np.random.default_rng([seed, index])
    img = rng.uniform(0.0, 0.15, (3, IMAGE_SIZE, IMAGE_SIZE))
    label = int(rng.integers(len(CLASSES)))
    n_distract = int(rng.integers(2, 5))
    taken = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    mask = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    shapes = [label] + [int(rng.integers(len(CLASSES))) for _ in range(n_distract)]
    for k, shape in enumerate(shapes):
        for _ in range(50):  # rejection sampling for a free spot (1 px margin)
            r, c = rng.integers(0, IMAGE_SIZE - _OBJ + 1, 2)
            if not taken[max(r - 1, 0):r + _OBJ + 1, max(c - 1, 0):c + _OBJ + 1].any():
                break
        else:
            continue
        taken[r:r + _OBJ, c:c + _OBJ] = True
        tmpl = TEMPLATES[shape]
        colour = _colour(rng, target=k == 0)
        region = img[:, r:r + _OBJ, c:c + _OBJ]
        region[:, tmpl] = colour[:, None] * rng.uniform(0.85, 1.0)
        if k == 0:
            mask[r:r + _OBJ, c:c + _OBJ] = tmpl
    return img.astype(np.float32), label, mask


HARD_OFFSET = 7_000_000
_NEAR_RED = [(1.0, 0.58, 0.1), (1.0, 0.45, 0.7), (0.85, 0.2, 0.8)]  # orange, pink, magenta


def _near_red(rng: np.random.Generator) -> np.ndarray:
    """Orange, pink, magenta: red is high, but green or blue is at least half of it (a red's: under 0.4)."""
    return np.clip(np.array(_NEAR_RED[rng.integers(len(_NEAR_RED))]) + rng.uniform(-0.05, 0.05, 3), 0, 1)


def _decoy(rng: np.random.Generator) -> np.ndarray:
    """An 8x8 mask of no class: a filled square, a bar or an L."""
    t = np.zeros((_OBJ, _OBJ), dtype=bool)
    kind = int(rng.integers(3))
    if kind == 0:
        a = int(rng.integers(4, 7))
        o = (_OBJ - a) // 2
        t[o:o + a, o:o + a] = True
    elif kind == 1:
        w = int(rng.integers(2, 4))
        t[(_OBJ - w) // 2:(_OBJ - w) // 2 + w, :] = True
        if rng.random() < 0.5:
            t = t.T.copy()
    else:
        t[:, :2] = True
        t[-2:, :] = True
        t = np.rot90(t, int(rng.integers(4))).copy()
    return t


def _stroke(img: np.ndarray, rng: np.random.Generator, colour: np.ndarray) -> None:
    """A 1-px line of 2-5 pixels (horizontal, vertical or diagonal) drawn onto img."""
    length = int(rng.integers(2, 6))
    dr, dc = [(0, 1), (1, 0), (1, 1), (1, -1)][int(rng.integers(4))]
    r, c = int(rng.integers(IMAGE_SIZE)), int(rng.integers(IMAGE_SIZE))
    for _ in range(length):
        if 0 <= r < IMAGE_SIZE and 0 <= c < IMAGE_SIZE:
            img[:, r, c] = colour
        r, c = r + dr, c + dc


def hard_image(seed: int, index: int) -> tuple[Float[np.ndarray, "channel height width"], int,
                                               Bool[np.ndarray, "height width"]]:
    """One hard image (3, 32, 32) float32, its label and the decisive object's visible pixels (32, 32)."""
    scene = hard_scene(seed, index)
    return scene["image"], scene["label"], scene["mask"]


def hard_scene(seed: int, index: int) -> dict:
    """hard_image with its layout: ``objects`` lists every drawn object in drawing order as
    {"role": "target" | "distractor" | "near_red" | "decoy" | "occluder", "class": class index or None,
    "pixels": (32, 32) bool, what was drawn}; also "image", "label", "mask".

    Drawing order: background noise, clutter strokes (some red), distractors (other classes; one in a
    near-red colour with probability 0.7), a red decoy of no class (probability 0.8), the red object of
    the label's shape, then with probability 0.6 an occluder over it (a distractor shape or a grey or
    coloured bar) that hides 15-40% of its pixels. Objects other than the occluder keep a 1 px gap.
    """
    rng = np.random.default_rng([seed + HARD_OFFSET, index])
    img = rng.uniform(0.0, 0.2, (3, IMAGE_SIZE, IMAGE_SIZE))
    label = int(rng.integers(len(CLASSES)))
    others = [k for k in range(len(CLASSES)) if k != label]
    for _ in range(int(rng.integers(8, 17))):  # clutter
        red = rng.random() < 0.35
        _stroke(img, rng, _colour(rng, target=True) if red else _colour(rng, target=False))
    taken = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    objects: list[dict] = []

    def place() -> tuple[int, int] | None:
        for _ in range(60):
            r, c = (int(v) for v in rng.integers(0, IMAGE_SIZE - _OBJ + 1, 2))
            if not taken[max(r - 1, 0):r + _OBJ + 1, max(c - 1, 0):c + _OBJ + 1].any():
                taken[r:r + _OBJ, c:c + _OBJ] = True
                return r, c
        return None

    def draw(tmpl: np.ndarray, colour: np.ndarray, r: int, c: int, role: str, cls: int | None) -> None:
        img[:, r:r + _OBJ, c:c + _OBJ][:, tmpl] = colour[:, None] * rng.uniform(0.8, 1.0)
        pixels = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
        pixels[r:r + _OBJ, c:c + _OBJ] = tmpl
        objects.append({"role": role, "class": cls, "pixels": pixels})

    # the decisive object's spot first, so it always fits; it is drawn last (over nothing)
    spot = place()
    assert spot is not None
    near_red = rng.random() < 0.7
    for k in range(int(rng.integers(3, 6))):
        at = place()
        if at is None:
            continue
        colour = _near_red(rng) if (k == 0 and near_red) else _colour(rng, target=False)
        cls = int(rng.choice(others))
        draw(TEMPLATES[cls], colour, *at, "near_red" if (k == 0 and near_red) else "distractor", cls)
    if rng.random() < 0.8:
        at = place()
        if at is not None:
            draw(_decoy(rng), _colour(rng, target=True), *at, "decoy", None)
    r, c = spot
    tmpl = TEMPLATES[label]
    draw(tmpl, _colour(rng, target=True), r, c, "target", label)
    mask = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    mask[r:r + _OBJ, c:c + _OBJ] = tmpl
    if rng.random() < 0.6:  # occlusion: cover 15-40% of the object's pixels
        total = mask.sum()
        for _ in range(20):
            cover = np.zeros_like(mask)
            if rng.random() < 0.5:  # another class's shape, shifted over the object
                dr, dc = (int(v) for v in rng.integers(-5, 6, 2))
                rr, cc = r + dr, c + dc
                t = TEMPLATES[int(rng.choice(others))]
                r0, c0 = max(rr, 0), max(cc, 0)
                r1, c1 = min(rr + _OBJ, IMAGE_SIZE), min(cc + _OBJ, IMAGE_SIZE)
                cover[r0:r1, c0:c1] = t[r0 - rr:r1 - rr, c0 - cc:c1 - cc]
                colour = _colour(rng, target=False)
            else:  # a bar of 2-4 px across the object
                w = int(rng.integers(2, 5))
                o = int(rng.integers(-1, _OBJ - w + 2))
                if rng.random() < 0.5:
                    cover[max(r + o, 0):max(r + o + w, 0), max(c - 2, 0):c + _OBJ + 2] = True
                else:
                    cover[max(r - 2, 0):r + _OBJ + 2, max(c + o, 0):max(c + o + w, 0)] = True
                colour = np.full(3, rng.uniform(0.3, 0.6)) if rng.random() < 0.5 else _colour(rng, False)
            hidden = (cover & mask).sum()
            if 0.15 * total <= hidden <= 0.4 * total:
                img[:, cover] = colour[:, None]
                mask &= ~cover
                objects.append({"role": "occluder", "class": None, "pixels": cover})
                break
    return {"image": img.astype(np.float32), "label": label, "mask": mask, "objects": objects}


def hard(n: int, seed: int = TEST_SEED, start: int = 0) -> ImageBatch:
    """n hard images: image i is hard_image(seed, start + i)."""
    return _batch(hard_image, "hard", n, seed, start)


DATASETS = ("synthetic", "hard", "digits")


def synthetic(n: int, seed: int = TEST_SEED, start: int = 0) -> ImageBatch:
    """n synthetic images: image i is synthetic_image(seed, start + i)."""
    return _batch(synthetic_image, "synthetic", n, seed, start)


def _batch(make, name: str, n: int, seed: int, start: int) -> ImageBatch:
    """Images start .. start + n - 1 of one generator, stacked."""
    if n < 1:
        raise DatasetError(f"need at least one image, got n={n}")
    items = [make(seed, start + i) for i in range(n)]
    images = torch.from_numpy(np.stack([x[0] for x in items]))
    labels = torch.tensor([x[1] for x in items])
    masks = torch.from_numpy(np.stack([x[2] for x in items]))
    return ImageBatch(images, labels, masks, name, CLASSES)


def digits(n: int | None = None, seed: int = TEST_SEED, split: str = "test") -> ImageBatch:
    """sklearn's digits upsampled to 32x32 RGB; a fixed 80/20 split (train/test), shuffled by seed."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    cut = int(0.8 * len(y))
    idx = order[:cut] if split == "train" else order[cut:]
    if split not in ("train", "test"):
        raise DatasetError(f"unknown digits split {split!r}: use train or test")
    idx = idx[torch.randperm(len(idx), generator=torch.Generator().manual_seed(seed))]
    if n is not None:
        if n < 1 or n > len(idx):
            raise DatasetError(f"digits {split} has {len(idx)} images; asked for {n}")
        idx = idx[:n]
    x = torch.nn.functional.interpolate(x[idx, None], size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear",
                                        align_corners=False).clamp(0, 1)
    return ImageBatch(x.expand(-1, 3, -1, -1).contiguous(), y[idx], x[:, 0] > 0.25, "digits",
                      tuple(str(i) for i in range(10)))


def sample_images(dataset: str = "synthetic", n: int = 8, seed: int = TEST_SEED) -> ImageBatch:
    """The app's entry point: n images of a dataset ("synthetic", "hard" or "digits") with masks."""
    if dataset == "synthetic":
        return synthetic(n, seed)
    if dataset == "hard":
        return hard(n, seed)
    if dataset == "digits":
        return digits(n, seed)
    raise DatasetError(f"unknown dataset {dataset!r}: use {', '.join(DATASETS)}")


def at_size(batch: ImageBatch, size: int) -> ImageBatch:
    """The batch resized to size x size (nearest: every pixel becomes a block, masks stay exact at integer
    factors), for a model with a larger input than the 32 px sets (DINOv2: 224 = 7 x 32)."""
    if batch.images.shape[-1] == size and batch.images.shape[-2] == size:
        return batch
    import torch.nn.functional as F

    images = F.interpolate(batch.images.float(), size=(size, size), mode="nearest")
    masks = F.interpolate(batch.masks[:, None].float(), size=(size, size), mode="nearest")[:, 0] > 0.5
    return ImageBatch(images, batch.labels, masks, batch.dataset, batch.class_names)
