"""Vector-input embeddings for the in-context regression models (TransformerLens drop-ins)."""

from __future__ import annotations

import torch
import torch.nn as nn
from jaxtyping import Float


class VectorEmbed(nn.Module):
    """Linear read-in: inputs [batch, pos, d_in] -> [batch, pos, d_model]; W_E [d_in, d_model]."""

    def __init__(self, d_in: int, d_model: int) -> None:
        super().__init__()
        self.W_E = nn.Parameter(torch.randn(d_in, d_model) / d_in**0.5)

    def forward(self, inputs: Float[torch.Tensor, "batch pos d_in"]) -> Float[torch.Tensor, "batch pos d_model"]:
        return inputs.to(self.W_E.dtype) @ self.W_E


class VectorPosEmbed(nn.Module):
    """Learned positions for vector inputs (TransformerLens' PosEmbed reads the last axis as pos)."""

    def __init__(self, n_ctx: int, d_model: int) -> None:
        super().__init__()
        self.W_pos = nn.Parameter(torch.randn(n_ctx, d_model) * 0.02)

    def forward(self, inputs: Float[torch.Tensor, "batch pos d_in"], past_kv_pos_offset: int = 0,
                attention_mask=None) -> Float[torch.Tensor, "batch pos d_model"]:
        n = inputs.shape[1]
        return self.W_pos[past_kv_pos_offset : past_kv_pos_offset + n][None].expand(inputs.shape[0], -1, -1)
