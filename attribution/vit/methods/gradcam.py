"""Grad-CAM on the last layer's attention.

w_h = mean over patches of dy_c/dA_h[CLS, patches]; map = (mean_h A_h[CLS, patches] * w_h)^+.
"""

from __future__ import annotations

from attribution.vit.maps import Images, Maps, Targets
from attribution.vit.methods._common import capture, pattern_name, read_rows

DEFAULTS = {"layer": -1}
NEEDS_GRAD = True


def run(model, images: Images, targets: Targets, layer: int = -1) -> Maps:
    name = pattern_name(layer % model.cfg.n_layers)
    _, acts, grads = capture(model, images, [name], grad=True, targets=targets)
    p = model.cfg.n_prefix
    a, g = read_rows(model, acts[name])[:, :, p:], read_rows(model, grads[name])[:, :, p:]
    w = g.mean(-1, keepdim=True)
    return (a * w).mean(1).clamp(min=0)
