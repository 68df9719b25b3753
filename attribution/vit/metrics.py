"""Localization and faithfulness metrics for patch maps (shared/specs/metrics.md, "Vision").

All per image; maps are (image, patch) at patch resolution, masks (image, H, W) at pixels. A
patch map is read as constant over its patch's pixels (nearest upsampling), so:

- pointing game: the top patch contains object pixels;
- energy pointing game: sum_p max(m_p, 0) * f_p / sum_p max(m_p, 0), f_p = the patch's object fraction;
- mask IoU: pixels of patches scoring above the map's mean vs the object mask;
- deletion / insertion (RISE): patches removed (set to the baseline) or inserted onto the baseline in
  the map's order, k = round(f * patches) for f in 0, 1/steps, ..., 1; target probability recorded;
  AUC = (sum - a_0/2 - a_N/2) / N over the N + 1 points (deletion lower is better);
- positive / negative perturbation (Chefer et al.): accuracy (prediction == target) after removing the
  top (positive) or bottom (negative) 10%, ..., 90% of patches; AUC by the trapezoid rule normalised to
  [0, 1] (positive lower, negative higher is better);
- class sensitivity: Pearson correlation of the maps for two classes of the same image (lower is
  better); two identical maps count 1 even when constant.

Ties in a map's order are broken by a fixed random permutation, so a constant map removes patches
in a random, not top-left-first, order.
"""

from __future__ import annotations

import torch
from jaxtyping import Int

from attribution.vit.maps import Images, Logits, Maps, Masks, PerImage, Targets

FRACTIONS_STEPS = 20  # 0, 0.05, ..., 1: contains 0.1 ... 0.9 for the perturbation tests


def patch_fraction(masks: Masks, patch: int) -> Maps:
    """(image, patch): the share of each patch's pixels inside the mask."""
    m = masks.float()[:, None]
    return torch.nn.functional.avg_pool2d(m, patch)[:, 0].flatten(1)


def pointing_game(maps: Maps, frac: Maps) -> PerImage:
    top = maps.argmax(1)
    return (frac.gather(1, top[:, None])[:, 0] > 0).float()


def energy_pointing_game(maps: Maps, frac: Maps) -> PerImage:
    pos = maps.clamp(min=0)
    total = pos.sum(1)
    inside = (pos * frac).sum(1)
    return torch.where(total > 0, inside / total.clamp_min(1e-12), torch.zeros_like(total))


def mask_iou(maps: Maps, frac: Maps) -> PerImage:
    """IoU in pixels: a selected patch contributes all its pixels, the object f_p of them."""
    sel = (maps > maps.mean(1, keepdim=True)).float()
    inter = (sel * frac).sum(1)
    union = sel.sum(1) + frac.sum(1) - inter
    return inter / union.clamp_min(1e-12)


def class_sensitivity(maps_a: Maps, maps_b: Maps) -> PerImage:
    """(image,) Pearson correlation of two maps of the same image; identical maps give 1."""
    a = maps_a - maps_a.mean(1, keepdim=True)
    b = maps_b - maps_b.mean(1, keepdim=True)
    denom = (a.norm(dim=1) * b.norm(dim=1))
    corr = (a * b).sum(1) / denom.clamp_min(1e-12)
    same = (maps_a - maps_b).abs().amax(1) <= 1e-6 * maps_a.abs().amax(1).clamp_min(1e-12)
    corr = torch.where(denom > 1e-12, corr, torch.full_like(corr, float("nan")))
    return torch.where(same, torch.ones_like(corr), corr)


def order(maps: Maps, seed: int = 0) -> Int[torch.Tensor, "image patch"]:
    """(image, patch) patch indices from highest to lowest score, ties in a fixed random order."""
    n = maps.shape[1]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    ranked = torch.argsort(maps[:, perm], dim=1, descending=True, stable=True)
    return perm[ranked]


@torch.no_grad()
def _curve(model, images: torch.Tensor, targets: torch.Tensor, ranks: torch.Tensor, insert: bool,
           baseline: str, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(image, steps+1) target probabilities and hits along the removal/insertion path."""
    n_img, n_patch = ranks.shape
    p = model.cfg.patch_size
    g = model.cfg.grid
    base = torch.zeros_like(images) if baseline == "zeros" else blur(images)
    pos = torch.empty_like(ranks)
    pos.scatter_(1, ranks, torch.arange(n_patch).expand(n_img, -1))  # rank of every patch
    probs, hits = [], []
    for s in range(steps + 1):
        k = round(s / steps * n_patch)
        chosen = (pos < k).float().view(n_img, 1, g, g)
        keep = chosen if insert else 1 - chosen
        keep = keep.repeat_interleave(p, 2).repeat_interleave(p, 3)
        x = images * keep + base * (1 - keep)
        logits = model(x)
        probs.append(logits.softmax(-1).gather(1, targets[:, None])[:, 0])
        hits.append((logits.argmax(-1) == targets).float())
    return torch.stack(probs, 1), torch.stack(hits, 1)


def blur(images: Images) -> Images:
    """The blurred-image baseline: a 5x5 box filter per channel ([image, channel, h, w], same shape)."""
    k = torch.ones(images.shape[1], 1, 5, 5, device=images.device) / 25
    return torch.nn.functional.conv2d(images, k, padding=2, groups=images.shape[1])


def _auc(curve: torch.Tensor) -> torch.Tensor:
    n = curve.shape[1] - 1
    return (curve.sum(1) - curve[:, 0] / 2 - curve[:, -1] / 2) / n


def perturbation_scores(model, images: Images, targets: Targets,
                        maps: Maps, baseline: str = "zeros", steps: int = FRACTIONS_STEPS, seed: int = 0,
                        ends: tuple[Logits, Logits] | None = None,
                        rows: int = 64) -> dict[str, PerImage]:
    """deletion_auc, insertion_auc, positive/negative_perturbation_auc per image.

    The same numbers as ``perturbation_scores_per_step`` (tests/test_vit_metrics_batched.py) from fewer
    forwards: every distinct masked image is run once, ``rows`` images a forward. Removing the *bottom* k
    patches (negative perturbation) leaves the top n - k, which is insertion of n - k; the clean image
    (deletion 0, insertion n) and the baseline (deletion n, insertion 0) are shared by all curves and can
    be passed in as ``ends`` = (clean logits, baseline logits) when several maps score the same images."""
    top = order(maps, seed)
    n_img, n_patch = top.shape
    ks = [round(s / steps * n_patch) for s in range(steps + 1)]
    mid = [i for i in range(steps + 1) if 0.1 - 1e-9 <= i / steps <= 0.9 + 1e-9]  # 10% ... 90%
    # An input is (kind, j): "ins" keeps the top j patches, "del" keeps all but them; both ends canonical.
    def key(kind: str, j: int) -> tuple[str, int]:
        if (kind, j) in (("del", 0), ("ins", n_patch)):
            return ("clean", 0)
        if (kind, j) in (("del", n_patch), ("ins", 0)):
            return ("base", 0)
        return (kind, j)

    dele = [key("del", k) for k in ks]
    ins = [key("ins", k) for k in ks]
    neg = [key("ins", n_patch - ks[i]) for i in mid]
    logits = _masked_logits(model, images, top, dict.fromkeys(dele + ins + neg), baseline, ends, rows)
    prob = {k: v.softmax(-1).gather(1, targets[:, None])[:, 0] for k, v in logits.items()}
    hit = {k: (v.argmax(-1) == targets).float() for k, v in logits.items()}
    del_p = torch.stack([prob[k] for k in dele], 1)
    ins_p = torch.stack([prob[k] for k in ins], 1)
    return {"deletion_auc": _auc(del_p), "insertion_auc": _auc(ins_p),
            "positive_perturbation_auc": _auc(torch.stack([hit[dele[i]] for i in mid], 1)),
            "negative_perturbation_auc": _auc(torch.stack([hit[k] for k in neg], 1))}


@torch.no_grad()
def _masked_logits(model, images: torch.Tensor, ranks: torch.Tensor, keys: dict, baseline: str,
                   ends: tuple[torch.Tensor, torch.Tensor] | None, rows: int) -> dict[tuple[str, int], torch.Tensor]:
    """Logits (image, class) of every masked input in ``keys``, built and run ``rows`` images at a time."""
    n_img, n_patch = ranks.shape
    p, g = model.cfg.patch_size, model.cfg.grid
    base = torch.zeros_like(images) if baseline == "zeros" else blur(images)
    pos = torch.empty_like(ranks)
    pos.scatter_(1, ranks, torch.arange(n_patch, device=ranks.device).expand(n_img, -1))
    out: dict[tuple[str, int], torch.Tensor] = {}
    if ends is not None:
        out[("clean", 0)], out[("base", 0)] = ends[0].to(images.device), ends[1].to(images.device)
    todo = [k for k in keys if k not in out]
    pairs = [(k, i) for k in todo for i in range(n_img)]
    got: list[torch.Tensor] = []
    for lo in range(0, len(pairs), max(1, rows)):
        part = pairs[lo:lo + rows]
        idx = torch.tensor([i for _, i in part], device=images.device)
        keep = torch.stack([_keep(pos[i], kind, j, n_patch) for (kind, j), i in part]).float()
        keep = keep.view(-1, 1, g, g).repeat_interleave(p, 2).repeat_interleave(p, 3)
        got.append(model(images[idx] * keep + base[idx] * (1 - keep)))
    flat = torch.cat(got) if got else images.new_zeros(0)
    for t, k in enumerate(todo):
        out[k] = flat[t * n_img:(t + 1) * n_img]
    return out


def _keep(pos: torch.Tensor, kind: str, j: int, n_patch: int) -> torch.Tensor:
    """(patch,) which patches show the image: "ins" the top j, "del" all but the top j."""
    if kind == "clean":
        return torch.ones_like(pos, dtype=torch.bool)
    if kind == "base":
        return torch.zeros_like(pos, dtype=torch.bool)
    return pos < j if kind == "ins" else pos >= j


def perturbation_scores_per_step(model, images: Images, targets: Targets,
                                 maps: Maps, baseline: str = "zeros", steps: int = FRACTIONS_STEPS,
                                 seed: int = 0) -> dict[str, PerImage]:
    """The definition, one forward per step and curve (three curves): the reference the batched
    ``perturbation_scores`` is tested against."""
    top = order(maps, seed)
    del_p, del_hit = _curve(model, images, targets, top, False, baseline, steps)
    ins_p, _ = _curve(model, images, targets, top, True, baseline, steps)
    _, neg_hit = _curve(model, images, targets, top.flip(1), False, baseline, steps)
    mid = [i for i in range(steps + 1) if 0.1 - 1e-9 <= i / steps <= 0.9 + 1e-9]  # 10% ... 90%
    return {"deletion_auc": _auc(del_p), "insertion_auc": _auc(ins_p),
            "positive_perturbation_auc": _auc(del_hit[:, mid]),
            "negative_perturbation_auc": _auc(neg_hit[:, mid])}


def localization_scores(maps: Maps, masks: Masks, patch: int) -> dict[str, PerImage]:
    frac = patch_fraction(masks, patch)
    return {"pointing_game": pointing_game(maps, frac),
            "energy_pointing_game": energy_pointing_game(maps, frac),
            "mask_iou": mask_iou(maps, frac)}
