"""Prompt sets for circuit work: clean prompts, their counterfactuals, the metric and the ablation.

A row is ``{"prompt", "target", "foil"?, "corrupt"?}``; ``corrupt`` is a counterfactual prompt with the
same number of tokens (IOI with the names changed). Prompts are right-padded into batches: under causal
attention no real position reads a pad, and the metric is read at each prompt's own last token.

Ablation replaces a sender's output by a reference: the counterfactual run's output at the same
position (``corrupt``, the default when every row has a counterfactual), the sender's mean output over
every position of the prompt set (``mean``), or zero (``zero``).

Metric: the logit difference target - foil at the last position (``logit_diff``, the default when every
row has a foil), or the target logit (``target_logit``), averaged over the prompt set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int

from core.errors import MethodError, PromptError, WorkbenchError
from core.metric import logit_diff

ABLATIONS = ("corrupt", "mean", "zero")
METRICS = ("logit_diff", "target_logit")


@dataclass
class PromptBatch:
    """Right-padded prompts: tokens and corrupt [batch, pos], each prompt's last position and ids."""

    tokens: Int[torch.Tensor, "batch pos"]
    last: Int[torch.Tensor, " batch"]
    target: Int[torch.Tensor, " batch"]
    foil: Int[torch.Tensor, " batch"] | None
    corrupt: Int[torch.Tensor, "batch pos"] | None
    rows: list[int]  # indices into the prompt set

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    def real(self) -> Bool[torch.Tensor, "batch pos"]:
        """[batch, pos] True at real (unpadded) positions."""
        return torch.arange(self.tokens.shape[1])[None, :] <= self.last[:, None]

    def metric(self, logits: Float[torch.Tensor, "batch pos vocab"], kind: str) -> Float[torch.Tensor, " batch"]:
        """Per-prompt metric at the last real position (logits may hold several copies of the batch)."""
        copies = logits.shape[0] // self.size
        rows = torch.arange(logits.shape[0])
        last = self.last.repeat(copies)
        foil = self.foil.repeat(copies) if kind == "logit_diff" else None  # type: ignore[union-attr]
        return logit_diff(logits[rows, last].float(), self.target.repeat(copies), foil)


@dataclass
class PromptSet:
    """Encoded prompts ready for circuit scoring, with the metric and ablation they are scored under."""

    rows: list[dict]
    batches: list[PromptBatch]
    metric: str
    ablation: str

    @property
    def n_prompts(self) -> int:
        return len(self.rows)


def _ids(model: Any, prompt: Any, role: str, n: int) -> list[int]:
    try:
        return model.to_tokens(prompt)[0].tolist()
    except WorkbenchError as exc:
        raise type(exc)(f"prompt {n}: {role}: {exc}") from None


def prepare(model: Any, rows: list[dict], ablation: str | None = None, metric: str | None = None,
            batch_size: int = 16) -> PromptSet:
    """Validate and encode a prompt set; every bad row fails before any work as "prompt N: why"."""
    if not rows:
        raise PromptError("the prompt set is empty")
    if int(batch_size) < 1:
        raise MethodError(f"batch_size must be at least 1 (got {batch_size})")
    has_corrupt = all(r.get("corrupt") is not None for r in rows)
    has_foil = all(r.get("foil") is not None for r in rows)
    ablation = ablation or ("corrupt" if has_corrupt else "mean")
    metric = metric or ("logit_diff" if has_foil else "target_logit")
    if ablation not in ABLATIONS:
        raise MethodError(f"unknown ablation {ablation!r}; choose one of {', '.join(ABLATIONS)}")
    if metric not in METRICS:
        raise MethodError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    encoded = []
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict) or "prompt" not in row or "target" not in row:
            raise PromptError(f"prompt {n}: needs fields \"prompt\" and \"target\"")
        if metric == "logit_diff" and row.get("foil") is None:
            raise PromptError(f"prompt {n}: the logit_diff metric needs a \"foil\"; give one or use "
                              "--metric target_logit")
        if ablation == "corrupt" and row.get("corrupt") is None:
            raise PromptError(f"prompt {n}: corrupt ablation needs a \"corrupt\" counterfactual prompt; "
                              "give one or use --ablation mean|zero")
        try:
            enc = model.encode(row["prompt"], row["target"], row.get("foil") if metric == "logit_diff" else None)
        except WorkbenchError as exc:
            raise type(exc)(f"prompt {n}: {exc}") from None
        ids = enc.tokens[0].tolist()
        bad = None
        if ablation == "corrupt":
            bad = _ids(model, row["corrupt"], "corrupt", n)
            if len(bad) != len(ids):
                raise PromptError(f"prompt {n}: the counterfactual has {len(bad)} tokens, the prompt {len(ids)}: "
                                  "they must have the same number of tokens")
        encoded.append((ids, bad, enc.target_id, enc.foil_id))
    order = sorted(range(len(rows)), key=lambda i: len(encoded[i][0]))  # batch similar lengths: less padding
    batches = []
    for start in range(0, len(order), int(batch_size)):
        picked = order[start:start + int(batch_size)]
        longest = max(len(encoded[i][0]) for i in picked)

        def pad(ids: list[int], longest: int = longest) -> list[int]:
            return ids + [ids[-1]] * (longest - len(ids))  # nothing reads a pad under causal attention

        tokens = torch.tensor([pad(encoded[i][0]) for i in picked], device=model.device)
        corrupt = (torch.tensor([pad(encoded[i][1]) for i in picked], device=model.device)
                   if ablation == "corrupt" else None)
        batches.append(PromptBatch(
            tokens=tokens, last=torch.tensor([len(encoded[i][0]) - 1 for i in picked]),
            target=torch.tensor([encoded[i][2] for i in picked]),
            foil=torch.tensor([encoded[i][3] for i in picked]) if metric == "logit_diff" else None,
            corrupt=corrupt, rows=picked))
    return PromptSet(rows=list(rows), batches=batches, metric=metric, ablation=ablation)
