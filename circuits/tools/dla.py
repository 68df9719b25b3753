"""Direct logit attribution: the final residual at the scored position split into its writes
(token and position embeddings, each head, each attention bias, each MLP), each pushed through
the final norm (frozen at its scale on this prompt) onto the unembedding direction
W_U[:, target] - W_U[:, foil]. The terms plus ``bias`` sum to the logit difference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from circuits.tools.common import prompts

if TYPE_CHECKING:
    from core.models.hooked import HookedModel


@dataclass
class DLAResult:
    labels: list[str]
    values: Any  # [component] mean over the batch
    per_prompt: Any  # [batch, component]
    logit_diff: float  # the model's own mean logit difference
    total: float  # sum of the attributed terms (equals logit_diff up to float error)

    def to_json(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "values": self.values.tolist(),
            "logit_diff": self.logit_diff,
            "total": self.total,
        }

    def table(self):
        import pandas as pd

        return pd.DataFrame({"component": self.labels, "dla": self.values.tolist()})

    def heads(self, n_layers: int, n_heads: int):
        """Head terms as [layer, head]."""
        import torch

        idx = {lab: i for i, lab in enumerate(self.labels)}
        return torch.tensor(
            [[float(self.values[idx[f"L{layer}H{h}"]]) for h in range(n_heads)] for layer in range(n_layers)]
        )

    def plot(self):
        import plotly.graph_objects as go

        fig = go.Figure(go.Bar(x=self.labels, y=self.values.tolist()))
        fig.update_layout(title=f"direct logit attribution (logit diff {self.logit_diff:.3f})")
        return fig


def direct_logit_attribution(
    model: HookedModel, prompt: Any, target: Any, foil: Any = None, pos: int = -1
) -> DLAResult:
    import torch

    with torch.no_grad():
        return _dla(model, prompt, target, foil, pos)


def _dla(model: HookedModel, prompt: Any, target: Any, foil: Any, pos: int) -> DLAResult:
    import torch

    p = prompts(model, prompt, target, foil, pos)
    L = model.arch.n_layers
    with torch.no_grad():
        logits, cache = model.run_with_cache(p.tokens)
    direction = model.W_U[:, p.target].T  # [batch, d_model]
    bias = model.b_U[p.target] if model.b_U is not None else torch.zeros(p.batch)
    if p.foil is not None:
        direction = direction - model.W_U[:, p.foil].T
        bias = bias - model.b_U[p.foil] if model.b_U is not None else bias
    parts: list[tuple[str, Any]] = []
    if "hook_embed" in cache:
        parts.append(("embed", cache["hook_embed"][:, pos]))
    if "hook_pos_embed" in cache:
        parts.append(("pos_embed", cache["hook_pos_embed"][:, pos]))
    for layer in range(L):
        z = cache[f"blocks.{layer}.attn.hook_z"][:, pos]  # [batch, head, d_head]
        w = model.weights(layer, repeat_kv=False)
        writes = torch.einsum("bhd,hdm->bhm", z, w["W_O"])
        for h in range(model.arch.n_heads):
            parts.append((f"L{layer}H{h}", writes[:, h]))
        parts.append((f"L{layer}attn_bias", w["b_O"].expand(p.batch, -1)))
        if f"blocks.{layer}.hook_mlp_out" in cache:
            parts.append((f"L{layer}mlp", cache[f"blocks.{layer}.hook_mlp_out"][:, pos]))
    stack = torch.stack([v for _, v in parts], 1)  # [batch, comp, d_model]
    norm = model.arch.norm
    if norm != "none":
        scale = cache["ln_final.hook_scale"][:, pos]  # [batch, 1]
        if norm == "layernorm":
            stack = stack - stack.mean(-1, keepdim=True)
        stack = stack / scale[:, None]
        w = model.final_norm_weight()
        if w is not None:
            stack = stack * w
        b = model.final_norm_bias()
        if b is not None:
            bias = bias + (b * direction).sum(-1)
    values = torch.einsum("bcm,bm->bc", stack, direction)
    labels = [n for n, _ in parts] + ["bias"]
    values = torch.cat([values, bias[:, None]], 1)
    idx = torch.arange(p.batch)
    own = logits[idx, pos, p.target] - (logits[idx, pos, p.foil] if p.foil is not None else 0)
    return DLAResult(
        labels, values.mean(0).cpu(), values.cpu(), float(own.mean()), float(values.sum(1).mean())
    )
