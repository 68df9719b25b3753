"""Integrated gradients on pixels (black baseline, midpoint rule), summed over each patch's pixels
and channels: signed evidence per patch."""

from __future__ import annotations

import torch

from attribution.vit.maps import Images, Maps, Targets

DEFAULTS = {"steps": 20}
NEEDS_GRAD = True
ROWS = 32  # (step, image) inputs per forward + backward: the steps are batched, memory stays bounded


def run(model, images: Images, targets: Targets, steps: int = 20) -> Maps:
    # Each input's gradient depends on that input alone, so the (step, image) pairs can be run in any
    # batches: the same sum as one forward + backward per step.
    n = images.shape[0]
    alpha = torch.arange(steps, dtype=images.dtype, device=images.device).repeat_interleave(n) + 0.5
    which = torch.arange(n, device=images.device).repeat(steps)
    total = torch.zeros_like(images)
    for lo in range(0, steps * n, ROWS):
        a, i = alpha[lo:lo + ROWS], which[lo:lo + ROWS]
        x = (images[i] * a.view(-1, 1, 1, 1) / steps).detach().requires_grad_(True)
        score = model(x).gather(1, targets[i].view(-1, 1)).sum()
        total.index_add_(0, i, torch.autograd.grad(score, x)[0])
    attr = images * total / steps
    return model.patchify(attr).sum(-1)
