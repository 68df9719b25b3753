"""Gradient and input x gradient of the target (minus foil) logit.

gradient: the gradient at the item, summed over the item's own dimensions (d_model for a token's
embedding, d_head for a head's output z; a neuron's activation is a scalar). Signed, at every level
alike, as in the DPA paper's baseline (it scored below random there, -3.6 on SQuAD v2).
gradient_norm: the saliency map of Simonyan et al. (2014): the gradient's L2 norm over the same
dimensions (its magnitude for a neuron). Unsigned, so it ranks items by influence either way.
input_x_gradient: the gradient dotted with the item's activation (token embedding, z, neuron).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attribution.baselines.common import check_target, grads, hook_names, layout
from attribution.methods import Scored

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


def _scores(model: HookedModel, enc: Encoding, level: str, kind: str) -> Scored:
    check_target(enc)
    names = hook_names(model, level)
    acts, gs, value = grads(model, enc, names)
    per_item = []
    for n in names:
        g = gs[n] * acts[n] if kind == "input_x_gradient" else gs[n]
        if level == "neuron":
            g = g.unsqueeze(-1)  # a neuron's activation is a scalar: its own dimension has size 1
        per_item.append(g.norm(dim=-1) if kind == "gradient_norm" else g.sum(-1))
    return Scored(layout(level, per_item), target_logit=float(value[0]))


def gradient_scores(model: HookedModel, enc: Encoding, level: str) -> Scored:
    return _scores(model, enc, level, kind="gradient")


def gradient_norm_scores(model: HookedModel, enc: Encoding, level: str) -> Scored:
    return _scores(model, enc, level, kind="gradient_norm")


def input_x_gradient_scores(model: HookedModel, enc: Encoding, level: str) -> Scored:
    return _scores(model, enc, level, kind="input_x_gradient")
