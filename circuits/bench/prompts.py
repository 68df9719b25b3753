"""A task's rows as a prompt set for the edge engines, with the probability-mass metric greater-than needs.

``logit_diff`` (target - foil, the counterfactual's answer) is ``circuits.counterfactual``'s own. ``prob_diff``
is MIB's greater-than metric (MIB_circuit_track/metrics.py, ``logit_diff_greater_than`` with prob=True):
the softmax mass on the "good" tokens minus the mass on the "bad" ones at the last position. Every engine
that reads ``batch.metric`` (EAP, EAP-IG, patching, the masked forwards) then optimises and measures it;
DPA, which explains a logit difference, explains target - foil (the model's clean and counterfactual top-1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float

from circuits.counterfactual import PromptBatch, PromptSet, prepare
from core.errors import PromptError

METRICS = ("logit_diff", "prob_diff")


@dataclass
class SetBatch(PromptBatch):
    """A batch whose metric may be a probability mass difference over token sets."""

    good: Bool[torch.Tensor, "batch vocab"] | None = None
    bad: Bool[torch.Tensor, "batch vocab"] | None = None

    def metric(self, logits: Float[torch.Tensor, "batch pos vocab"], kind: str) -> Float[torch.Tensor, " batch"]:
        if kind != "prob_diff":
            return super().metric(logits, kind)
        copies = logits.shape[0] // self.size
        rows = torch.arange(logits.shape[0])
        probs = torch.softmax(logits[rows, self.last.repeat(copies)].float(), dim=-1)
        good, bad = self.good.repeat(copies, 1), self.bad.repeat(copies, 1)
        return (probs * good).sum(-1) - (probs * bad).sum(-1)


def task_prompts(model: Any, rows: list[dict], metric: str = "logit_diff", batch_size: int = 16) -> PromptSet:
    """Counterfactual ablation, metric ``logit_diff`` or ``prob_diff`` (rows then carry "good"/"bad")."""
    prepared = prepare(model, rows, "corrupt", "logit_diff", batch_size)
    if metric == "logit_diff":
        return prepared
    if metric != "prob_diff":
        raise PromptError(f"unknown task metric {metric!r}; choose one of {', '.join(METRICS)}")
    vocab = model.arch.d_vocab
    batches = []
    for b in prepared.batches:
        good = torch.zeros(b.size, vocab, dtype=torch.bool, device=model.device)
        bad = torch.zeros_like(good)
        for j, i in enumerate(b.rows):
            row = rows[i]
            if not row.get("good") or "bad" not in row:
                raise PromptError(f"prompt {i + 1}: the prob_diff metric needs \"good\" and \"bad\" token lists")
            good[j, [model.token_id(t) for t in row["good"]]] = True
            if row["bad"]:
                bad[j, [model.token_id(t) for t in row["bad"]]] = True
        batches.append(SetBatch(tokens=b.tokens, last=b.last, target=b.target, foil=b.foil, corrupt=b.corrupt,
                                rows=b.rows, good=good, bad=bad))
    return PromptSet(rows=prepared.rows, batches=batches, metric="prob_diff", ablation="corrupt")
