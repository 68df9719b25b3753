"""Attention as attribution: last-layer attention, mean attention, attention rollout.

token: the attention row of the final position (last layer, or mean over layers), mean over heads.
qk: the attention weights themselves, [layer, head, query, key]; attention_last keeps only the last
layer (earlier layers are 0). rollout (Abnar and Zuidema 2020): per layer the head-mean attention with
the residual as 0.5 A + 0.5 I (rows renormalised), multiplied from the top down, read at the final row.
None of these look at the target: they rank what the model attends to, not what it uses for the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from jaxtyping import Float

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


def patterns(model: HookedModel, enc: Encoding) -> Float[torch.Tensor, "layer head query key"]:
    """Attention patterns of one prompt, [layer, head, query, key]."""
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.arch.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(enc.tokens, names_filter=names, return_type=None)
    return torch.stack([cache[n][0] for n in names]).float()


def attention_last_scores(model: HookedModel, enc: Encoding, level: str) -> Float[torch.Tensor, "*axes"]:
    pat = patterns(model, enc)
    if level == "token":
        return pat[-1, :, -1].mean(0)
    out = torch.zeros_like(pat)
    out[-1] = pat[-1]
    return out


def attention_mean_scores(model: HookedModel, enc: Encoding, level: str) -> Float[torch.Tensor, "*axes"]:
    pat = patterns(model, enc)
    if level == "token":
        return pat[:, :, -1].mean((0, 1))
    return pat


def rollout(pat: Float[torch.Tensor, "layer head query key"],
            residual: float = 0.5) -> Float[torch.Tensor, "query key"]:
    """Rollout matrix [query, key] from patterns [layer, head, query, key]."""
    s = pat.shape[-1]
    eye = torch.eye(s, dtype=pat.dtype)
    joint = eye
    for layer in range(pat.shape[0]):  # bottom-up: joint = A_l @ ... @ A_0
        a = (1 - residual) * pat[layer].mean(0) + residual * eye
        a = a / a.sum(-1, keepdim=True)
        joint = a @ joint
    return joint


def rollout_scores(model: HookedModel, enc: Encoding, level: str,
                   residual: float = 0.5) -> Float[torch.Tensor, " pos"]:
    return rollout(patterns(model, enc), residual)[-1]
