"""Direct logit attribution on a batch of prompts in the circuit tools' forms (a string, id lists, a [batch, seq]
tensor; one target / foil or one per prompt): read by ``circuits.tools.common.prompts`` and scored by the one
DLA, ``attribution.dla`` (its ``DLAResult``: components, heads, the accumulated residual; with several prompts
their means and ``per_prompt``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attribution.dla import DLAResult, dla_tokens
from circuits.tools.common import prompts

if TYPE_CHECKING:
    from core.models.hooked import HookedModel

__all__ = ["DLAResult", "direct_logit_attribution"]


def direct_logit_attribution(model: HookedModel, prompt: Any, target: Any, foil: Any = None,
                             pos: int = -1) -> DLAResult:
    """DLA of logit(target) - logit(foil) at ``pos`` for each prompt, averaged (attribution.dla.dla_tokens)."""
    p = prompts(model, prompt, target, foil, pos)
    return dla_tokens(model, p.tokens, p.target.tolist(), None if p.foil is None else p.foil.tolist(), pos)
