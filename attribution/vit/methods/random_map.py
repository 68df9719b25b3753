"""Random maps: uniform noise, reproducible per (seed, image in batch, target class), so maps for
two classes of one image differ as a chance method's should."""

from __future__ import annotations

import torch

from attribution.vit.maps import Images, Maps, Targets

DEFAULTS = {"seed": 0}
NEEDS_GRAD = False


def run(model, images: Images, targets: Targets, seed: int = 0) -> Maps:
    n = model.cfg.n_patches
    rows = []
    for i, t in enumerate(targets.tolist()):
        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + i * 7919 + int(t) * 104_729)
        rows.append(torch.rand(n, generator=g))
    return torch.stack(rows).to(images.device)
