"""Transition attention maps (TAM, Yuan et al. 2021), as specified in shared/specs/dap.md.

s = mean_h A^{L-1}[CLS]; going down, s <- s mean_h A^l + s; W = positive part of the integrated
gradient of the last pattern (A^{L-1} scaled from 0 to itself in `steps` steps, midpoint rule),
times A^{L-1}, mean over heads, row CLS; map = s * W over patches.
"""

from __future__ import annotations

import torch

from attribution.vit.maps import Images, Maps, Targets
from attribution.vit.methods._common import capture, pattern_name, read_rows

DEFAULTS = {"steps": 20}
NEEDS_GRAD = True


def run(model, images: Images, targets: Targets, steps: int = 20) -> Maps:
    n_layers = model.cfg.n_layers
    names = [pattern_name(l) for l in range(n_layers)]
    _, acts, _ = capture(model, images, names, grad=False)
    s = read_rows(model, acts[names[-1]].mean(1))  # (image, token)
    for n in reversed(names[:-1]):
        s = (s[:, None] @ acts[n].mean(1))[:, 0] + s
    last = names[-1]
    clean = acts[last]
    total = torch.zeros_like(clean)
    for k in range(steps):
        alpha = (k + 0.5) / steps

        def scale(pattern, hook, alpha=alpha):
            return (clean * alpha).requires_grad_(True)  # a leaf whose gradient we read

        _, _, grads = capture(model, images, [last], grad=True, targets=targets, extra_hooks=[(last, scale)])
        total += grads[last]
    w = read_rows(model, (clean * total / steps).clamp(min=0).mean(1))
    return (s * w)[:, model.cfg.n_prefix:]
