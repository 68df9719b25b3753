"""Attention rollout (Abnar and Zuidema 2020).

A_bar^l = rownorm(mean_h A_h^l + I), normalised along the key axis (rows sum to 1, as each
attention row does); R = A_bar^{L-1} ... A_bar^{start}; map = R[CLS, patches]. The map does not
depend on the class. With identity attention every A_bar is I, so R = I and the map is zero
(uniform) over patches: all of CLS's mass stays on CLS.
"""

from __future__ import annotations

import torch
from jaxtyping import Float

from attribution.vit.maps import Images, Maps, Targets
from attribution.vit.methods._common import capture, eye_like, pattern_name, read_rows, rownorm

DEFAULTS = {"start": 0, "identity": 1.0}
NEEDS_GRAD = False


def rollout_matrix(patterns: list[Float[torch.Tensor, "image head token token"]],
                   identity: float = 1.0) -> Float[torch.Tensor, "image token token"]:
    """(image, query, key) rollout of per-layer patterns (image, head, query, key), lowest layer first."""
    r = eye_like(patterns[0][:, 0])
    for a in patterns:
        a_bar = rownorm(a.mean(1) + identity * eye_like(r))
        r = a_bar @ r  # later layers multiply on the left
    return r


def run(model, images: Images, targets: Targets, start: int = 0, identity: float = 1.0) -> Maps:
    names = [pattern_name(l) for l in range(start, model.cfg.n_layers)]
    _, acts, _ = capture(model, images, names, grad=False)
    return read_rows(model, rollout_matrix([acts[n] for n in names], identity))[:, model.cfg.n_prefix:]
