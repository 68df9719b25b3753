"""Integrated gradients on pixels (black baseline, midpoint rule), summed over each patch's pixels
and channels: signed evidence per patch."""

from __future__ import annotations

import torch

DEFAULTS = {"steps": 20}
NEEDS_GRAD = True


def run(model, images: torch.Tensor, targets: torch.Tensor, steps: int = 20) -> torch.Tensor:
    total = torch.zeros_like(images)
    for k in range(steps):
        x = (images * (k + 0.5) / steps).detach().requires_grad_(True)
        score = model(x).gather(1, targets.view(-1, 1)).sum()
        total += torch.autograd.grad(score, x)[0]
    attr = images * total / steps
    return model.patchify(attr).sum(-1)
