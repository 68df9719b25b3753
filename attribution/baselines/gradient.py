"""Gradient and input x gradient of the target (minus foil) logit.

token: the gradient at the token embedding, as its L2 norm per token (gradient) or its dot product
with the embedding (input x gradient). head: the gradient at the head's output z, summed over d_head
(gradient) or dotted with z (input x gradient), per query position. neuron: the gradient at the
neuron's activation (SiLU(gate) * up, or act(pre)), alone or times the activation.
"""

from __future__ import annotations

from typing import Any

import torch

from attribution.baselines.common import check_target, grads, hook_names, layout


def _scores(model: Any, enc: Any, level: str, times_input: bool) -> torch.Tensor:
    check_target(enc)
    names = hook_names(model, level)
    acts, gs = grads(model, enc, names)
    if level == "token":
        g, x = gs[names[0]][0], acts[names[0]][0]  # [S, D]
        return (g * x).sum(-1) if times_input else g.norm(dim=-1)
    per_layer = []
    for n in names:
        g = gs[n] * acts[n] if times_input else gs[n]
        per_layer.append(g.sum(-1) if level == "head" else g)
    return layout(level, per_layer)


def gradient_scores(model: Any, enc: Any, level: str) -> torch.Tensor:
    return _scores(model, enc, level, times_input=False)


def input_x_gradient_scores(model: Any, enc: Any, level: str) -> torch.Tensor:
    return _scores(model, enc, level, times_input=True)
