"""Generic attention explainability (Chefer et al. 2021, ICCV).

R = I; for each block, lowest first: A_bar = mean_h (dy_c/dA_h * A_h)^+ and R <- R + A_bar R;
map = R[CLS, patches]. Each layer's pattern meets the gradient of that same pattern.
"""

from __future__ import annotations

from attribution.vit.maps import Images, Maps, Targets
from attribution.vit.methods._common import capture, eye_like, pattern_name, read_rows

DEFAULTS: dict = {}
NEEDS_GRAD = True


def run(model, images: Images, targets: Targets) -> Maps:
    names = [pattern_name(l) for l in range(model.cfg.n_layers)]
    _, acts, grads = capture(model, images, names, grad=True, targets=targets)
    r = eye_like(acts[names[0]][:, 0])
    for n in names:
        cam = (grads[n] * acts[n]).clamp(min=0).mean(1)
        r = r + cam @ r
    return read_rows(model, r)[:, model.cfg.n_prefix:]
