"""Mixture-of-experts FFN for TransformerLens blocks, hookable like every other component.

Hooks (under ``blocks.{l}.mlp``): ``hook_router_logits`` [batch, pos, expert],
``hook_router_weights`` [batch, pos, expert] (zero for unselected experts: ablate an expert by
zeroing its column), ``hook_expert_out`` [batch, pos, expert, d_model] (each expert's weighted
write), and per expert ``experts.{e}.hook_pre`` / ``hook_pre_linear`` (GLU up) / ``hook_post``
[batch, pos, d_mlp]. Every expert runs on every token (the models are tiny) and the router
weights select, so hook shapes never depend on routing.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float
from transformer_lens.hook_points import HookPoint

ACTS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


class Expert(nn.Module):
    """One FFN in TransformerLens layout: W_in [d_model, d_mlp] (up), W_gate (GLU), W_out."""

    def __init__(self, d_model: int, d_mlp: int, act_fn: str, glu: bool) -> None:
        super().__init__()
        self.glu, self.act = glu, ACTS[act_fn]
        self.W_in = nn.Parameter(torch.randn(d_model, d_mlp) / d_model**0.5)
        self.b_in = nn.Parameter(torch.zeros(d_mlp))
        if glu:
            self.W_gate = nn.Parameter(torch.randn(d_model, d_mlp) / d_model**0.5)
        self.W_out = nn.Parameter(torch.randn(d_mlp, d_model) / d_mlp**0.5)
        self.b_out = nn.Parameter(torch.zeros(d_model))
        self.hook_pre = HookPoint()
        self.hook_pre_linear = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: Float[torch.Tensor, "batch pos d_model"]) -> Float[torch.Tensor, "batch pos d_model"]:
        if self.glu:
            gate = self.hook_pre(x @ self.W_gate)
            up = self.hook_pre_linear(x @ self.W_in + self.b_in)
            post = self.hook_post(self.act(gate) * up)
        else:
            post = self.hook_post(self.act(self.hook_pre(x @ self.W_in + self.b_in)))
        return post @ self.W_out + self.b_out


class MoEMLP(nn.Module):
    """Top-k routed experts. A frozen router keeps its random initial weights (no gradient)."""

    def __init__(
        self,
        d_model: int,
        d_mlp: int,
        n_experts: int,
        top_k: int,
        act_fn: str = "relu",
        glu: bool = False,
        frozen_router: bool = False,
    ) -> None:
        super().__init__()
        self.n_experts, self.top_k, self.frozen_router = n_experts, top_k, frozen_router
        self.experts = nn.ModuleList([Expert(d_model, d_mlp, act_fn, glu) for _ in range(n_experts)])
        self.W_router = nn.Parameter(
            torch.randn(d_model, n_experts) / d_model**0.5, requires_grad=not frozen_router
        )
        self.hook_router_logits = HookPoint()
        self.hook_router_weights = HookPoint()
        self.hook_expert_out = HookPoint()

    def forward(self, x: Float[torch.Tensor, "batch pos d_model"]) -> Float[torch.Tensor, "batch pos d_model"]:
        logits = self.hook_router_logits(x @ self.W_router)
        probs = logits.softmax(-1)
        top = probs.topk(self.top_k, dim=-1)
        vals = top.values
        if self.top_k > 1:  # top-2: renormalise over the chosen experts (Mixtral); top-1 keeps p
            vals = vals / vals.sum(-1, keepdim=True)
        weights = self.hook_router_weights(torch.zeros_like(probs).scatter(-1, top.indices, vals))
        outs = torch.stack([e(x) for e in self.experts], dim=-2)  # [b, p, e, d]
        return self.hook_expert_out(outs * weights[..., None]).sum(-2)

    def load_balance(self) -> Float[torch.Tensor, ""] | None:  # a scalar auxiliary loss; none here
        return None
