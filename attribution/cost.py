"""What a method will cost before it runs: measured on this model at this prompt length.

Activation patching runs one ablated forward per item (token, head, neuron), in batches. Its estimate times
one real batch on the prompt (the per-item cost of this model at this length, with the same truncation the
method uses) and multiplies by the item count; measurements are kept per (model, level, length) for the
process, so asking again is free. Methods with one or a few passes (DPA, gradients, AtP, IG) are cheap at
every level and have no estimate (None): they run at once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from attribution.baselines.patching import ablated_logits, clean_residuals, item_shape
from attribution.methods import canonical
from core.text import duration

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

SLOW_METHODS = ("activation_patching",)
_PER_ITEM: dict[tuple[str, str, int], float] = {}  # (model, level, seq_len) -> seconds per item


@dataclass(frozen=True)
class Estimate:
    method: str
    level: str
    items: int
    seconds_per_item: float

    @property
    def seconds(self) -> float:
        return self.items * self.seconds_per_item

    def text(self) -> str:
        return (f"{self.method} at the {self.level} level: {self.items:,} items x {1000 * self.seconds_per_item:.1f} "
                f"ms each (measured) = about {duration(self.seconds)}")


def estimate(model: HookedModel, enc: Encoding, method: str, level: str, batch_size: int = 32) -> Estimate | None:
    """The cost of ``method`` at ``level`` on this encoded prompt, or None for a cheap method."""
    method = canonical(method)
    if method not in SLOW_METHODS:
        return None

    shape = item_shape(model, enc.seq_len, level)
    items = math.prod(shape)
    key = (model.name, level, enc.seq_len)
    if key not in _PER_ITEM:
        n = min(batch_size, items)
        masks = torch.zeros(n, items, dtype=torch.bool)
        masks[torch.arange(n), torch.arange(n)] = True
        started = time.perf_counter()
        resid = clean_residuals(model, enc.tokens) if level != "token" else None
        with torch.no_grad():
            ablated_logits(model, enc.tokens, level, masks.view(n, *shape), None, resid, batch_size=n)
        _PER_ITEM[key] = (time.perf_counter() - started) / n
    return Estimate(method=method, level=level, items=items, seconds_per_item=_PER_ITEM[key])


__all__ = ["Estimate", "estimate", "SLOW_METHODS"]
