"""Integrated gradients (Sundararajan et al. 2017) over the token embeddings, from a zero embedding.

score_i = e_i . mean_k grad(alpha_k e), alpha_k = (k + 1/2) / steps (midpoint rule), so the scores sum
to about metric(e) - metric(0) (completeness). Positional embeddings, where the model has them, stay.
"""

from __future__ import annotations

from typing import Any

import torch

from attribution.baselines.common import check_target, grads
from workbench.errors import MethodError


def ig_scores(model: Any, enc: Any, level: str, steps: int = 20,
              internal_batch_size: int | None = None) -> torch.Tensor:
    check_target(enc)
    steps, batch = int(steps), int(internal_batch_size or steps)
    if steps < 1 or batch < 1:
        raise MethodError("integrated gradients needs steps >= 1 and internal_batch_size >= 1")
    alphas = (torch.arange(steps, dtype=torch.float32) + 0.5) / steps
    total = None
    embed = None
    for start in range(0, steps, batch):
        a = alphas[start:start + batch].to(enc.tokens.device)
        tokens = enc.tokens.expand(len(a), -1)
        acts, gs = grads(model, enc, ["hook_embed"], tokens=tokens, embed_scale=a)
        g = gs["hook_embed"].sum(0)  # [S, D]
        total = g if total is None else total + g
        if embed is None:
            embed = acts["hook_embed"][0] / a[0]  # the unscaled embedding
    return (embed * total / steps).sum(-1)
