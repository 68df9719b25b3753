"""Raw attention: one layer's pattern (the last by default), mean over heads, row CLS."""

from __future__ import annotations

from attribution.vit.maps import Images, Maps, Targets
from attribution.vit.methods._common import capture, pattern_name, read_rows

DEFAULTS = {"layer": -1}
NEEDS_GRAD = False


def run(model, images: Images, targets: Targets, layer: int = -1) -> Maps:
    layer = layer % model.cfg.n_layers
    _, acts, _ = capture(model, images, [pattern_name(layer)], grad=False)
    return read_rows(model, acts[pattern_name(layer)].mean(1))[:, model.cfg.n_prefix:]
