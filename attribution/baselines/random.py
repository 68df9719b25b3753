"""Uniform random scores: the floor every method must beat (about 0 total on disrupt/recover)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from jaxtyping import Float

from attribution.baselines.common import level_shape, prompt_seed

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


def random_scores(model: HookedModel, enc: Encoding, level: str,
                  seed: int | None = None) -> Float[torch.Tensor, "*axes"]:
    """Uniform [0, 1) scores on the level's axes. Without ``seed`` the seed comes from the prompt,
    so one prompt always gets the same scores while different prompts get independent ones."""
    gen = torch.Generator().manual_seed(prompt_seed(enc) if seed is None else int(seed))
    return torch.rand(level_shape(model, enc, level), generator=gen)
