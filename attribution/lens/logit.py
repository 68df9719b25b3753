"""The logit lens (nostalgebraist 2020): every layer's residual read through the final norm and unembedding."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel


def readout(model: HookedModel, resid: Float[torch.Tensor, "layer *batch d_model"]
            ) -> Float[torch.Tensor, "layer *batch vocab"]:
    """Logits of each residual vector as if it were the last layer's (its own final-norm scale)."""
    import torch

    with torch.no_grad():
        return model.read_out(resid)
