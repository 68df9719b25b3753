"""Shared helpers: prompt batches, target/foil ids and the logit-difference metric."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import PromptError, RangeError, TokenError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

    from core.models.hooked import HookedModel


@dataclass
class Prompts:
    """A batch ready for the tools: tokens [batch, seq], target and foil ids [batch]."""

    tokens: Int[torch.Tensor, "batch pos"] | Float[torch.Tensor, "batch pos d_in"]  # ids, or vectors (toys)
    target: Int[torch.Tensor, " batch"]
    foil: Int[torch.Tensor, " batch"] | None = None
    pos: int = -1  # the scored position

    @property
    def batch(self) -> int:
        return int(self.tokens.shape[0])


def as_tokens(model: HookedModel, prompt: Any
              ) -> Int[torch.Tensor, "batch pos"] | Float[torch.Tensor, "batch pos d_in"]:
    """A string, id list, [seq] or [batch, seq] tensor (or [batch, seq, d] vectors) -> tensor."""
    import torch

    if isinstance(prompt, str):
        return model.to_tokens(prompt)
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        rows = [model.to_tokens(p)[0] for p in prompt]
        if len({len(r) for r in rows}) != 1:
            raise PromptError("prompts in one batch must have the same number of tokens")
        return torch.stack(rows)
    if isinstance(prompt, list):
        return model.to_tokens(prompt)
    t = prompt.to(model.device)
    return t[None] if t.dim() == 1 else t


def as_ids(model: HookedModel, tok: Any, batch: int, role: str) -> Int[torch.Tensor, " batch"] | None:
    import torch

    if tok is None:
        return None
    if isinstance(tok, (str, int)):
        tok = [tok] * batch
    if isinstance(tok, (list, tuple)):
        tok = [model.token_id(t, role) if isinstance(t, str) else int(t) for t in tok]
        tok = torch.tensor(tok, dtype=torch.long)
    tok = tok.to(model.device).long().reshape(-1)
    if tok.shape[0] == 1 and batch > 1:
        tok = tok.expand(batch)
    if tok.shape[0] != batch:
        raise TokenError(f"{role}: {tok.shape[0]} ids for a batch of {batch}")
    return tok


def prompts(model: HookedModel, prompt: Any, target: Any, foil: Any = None, pos: int = -1) -> Prompts:
    tokens = as_tokens(model, prompt)
    t = as_ids(model, target, tokens.shape[0], "target")
    f = as_ids(model, foil, tokens.shape[0], "foil")
    if f is not None and bool((t == f).any()):
        raise TokenError("foil is the same token as the target")
    if not -tokens.shape[1] <= pos < tokens.shape[1]:
        raise RangeError(f"position {pos} out of range for {tokens.shape[1]} tokens")
    return Prompts(tokens, t, f, pos)


def logit_diff(logits: Float[torch.Tensor, "batch pos vocab"], p: Prompts) -> Float[torch.Tensor, " batch"]:
    """Per-prompt logit(target) - logit(foil) at the scored position (logit(target) if no foil)."""
    from core.metric import logit_diff as metric

    return metric(logits[:, p.pos], p.target, p.foil)


def head_labels(n_layers: int, n_heads: int) -> list[str]:
    return [f"L{layer}H{h}" for layer in range(n_layers) for h in range(n_heads)]


def frame(scores, axes: tuple[str, ...], value: str = "score"):
    """A long pandas table of a tensor with named axes."""
    import itertools

    import pandas as pd

    arr = scores.detach().cpu()
    rows = [
        dict(zip(axes, idx, strict=False), **{value: float(arr[idx])})
        for idx in itertools.product(*[range(s) for s in arr.shape])
    ]
    return pd.DataFrame(rows)


def heatmap(scores, axes: tuple[str, ...], title: str, x_labels=None, y_labels=None):
    import plotly.graph_objects as go

    z = scores.detach().cpu().float()
    if z.dim() == 1:
        z = z[None]
    fig = go.Figure(go.Heatmap(z=z.numpy(), x=x_labels, y=y_labels, colorscale="RdBu", zmid=0))
    fig.update_layout(title=title, xaxis_title=axes[-1], yaxis_title=axes[0] if len(axes) > 1 else "")
    return fig
