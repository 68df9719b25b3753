"""The metric every engine explains: logit(target) - logit(foil), or logit(target) without a foil."""

from __future__ import annotations

import torch
from jaxtyping import Float, Int


def logit_diff(logits: Float[torch.Tensor, "batch vocab"], target: int | Int[torch.Tensor, " batch"],
               foil: int | Int[torch.Tensor, " batch"] | None = None) -> Float[torch.Tensor, " batch"]:
    """Per row of logits [batch, vocab]: logit(target) - logit(foil) (logit(target) if foil is None).
    target and foil are one id for every row or one id per row."""
    value = _pick(logits, target)
    return value if foil is None else value - _pick(logits, foil)


def _pick(logits: torch.Tensor, ids: int | torch.Tensor) -> torch.Tensor:
    if isinstance(ids, int):
        return logits[:, ids]
    return logits.gather(1, ids.to(logits.device).view(-1, 1).expand(logits.shape[0], 1))[:, 0]
