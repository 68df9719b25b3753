"""Attention-pattern scores per head: entropy, previous-token, induction, attention to given
positions (e.g. the IOI names). All return a ``HeadScores`` [layer, head]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from circuits.tools.common import as_tokens, frame, heatmap
from core.errors import PromptError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel


@dataclass
class HeadScores:
    name: str
    scores: Float[torch.Tensor, "layer head"]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "scores": self.scores.tolist()}

    def table(self):
        return frame(self.scores, ("layer", "head"), self.name)

    def plot(self):
        return heatmap(self.scores, ("layer", "head"), self.name)

    def top(self, k: int = 5) -> list[tuple[int, int, float]]:
        flat = self.scores.flatten()
        idx = flat.argsort(descending=True)[:k]
        H = self.scores.shape[1]
        return [(int(i) // H, int(i) % H, float(flat[i])) for i in idx]


def patterns(model: HookedModel, prompt: Any):
    """Attention patterns [layer, batch, head, query, key]."""
    import torch

    tokens = as_tokens(model, prompt)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("attn.hook_pattern"))
    return torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(model.arch.n_layers)])


def attention_entropy(model: HookedModel, prompt: Any, from_pos: int = 1) -> HeadScores:
    """Mean entropy (nats) of each head's attention over query positions >= from_pos."""
    pat = patterns(model, prompt)[..., from_pos:, :]
    ent = -(pat * (pat + 1e-12).log()).sum(-1)  # [L, b, h, q]
    return HeadScores("attention_entropy", ent.mean((1, 3)).cpu())


def previous_token_score(model: HookedModel, prompt: Any) -> HeadScores:
    """Mean attention from each position to the one before it."""
    import torch

    pat = patterns(model, prompt)
    q = torch.arange(1, pat.shape[-1])
    return HeadScores("previous_token", pat[..., q, q - 1].mean((1, 3)).cpu())


def induction_score(
    model: HookedModel, seq_len: int = 20, batch: int = 4, seed: int = 0, vocab: tuple[int, int] | None = None
) -> HeadScores:
    """Attention from each token of a repeated random sequence to the token after its first
    occurrence (the induction target), averaged over the second half."""
    import torch

    lo, hi = vocab or (0, model.arch.d_vocab)
    if 2 * seq_len > model.arch.n_ctx:
        seq_len = model.arch.n_ctx // 2
    if seq_len < 2:
        raise PromptError("context too short for an induction test")
    gen = torch.Generator().manual_seed(seed)
    half = torch.randint(lo, hi, (batch, seq_len), generator=gen)
    pat = patterns(model, torch.cat([half, half], 1).to(model.device))
    q = torch.arange(seq_len, 2 * seq_len)
    return HeadScores("induction", pat[..., q, q - seq_len + 1].mean((1, 3)).cpu())


def position_score(
    model: HookedModel, prompt: Any, key_pos: Any, query_pos: int = -1, name: str = "to_position"
) -> HeadScores:
    """Attention from ``query_pos`` to ``key_pos`` (one int, or one per prompt): e.g. to the IO
    name (attending-to-name score)."""
    import torch

    pat = patterns(model, prompt)[..., query_pos, :]  # [L, b, h, key]
    b = pat.shape[1]
    kp = (
        torch.as_tensor(key_pos).reshape(-1).expand(b)
        if torch.as_tensor(key_pos).numel() == 1
        else torch.as_tensor(key_pos).reshape(-1)
    )
    if kp.numel() != b:
        raise PromptError(f"{kp.numel()} key positions for {b} prompts")
    sel = pat.permute(1, 3, 0, 2)[torch.arange(b), kp.to(pat.device)]  # [b, L, h]
    return HeadScores(name, sel.mean(0).cpu())


def name_scores(
    model: HookedModel, prompt: Any, positions: dict[str, Any], query_pos: int = -1
) -> dict[str, HeadScores]:
    """Attention from the final position to each named position set, e.g. {"IO": io_pos, "S1": ...}."""
    return {k: position_score(model, prompt, v, query_pos, f"to_{k}") for k, v in positions.items()}
