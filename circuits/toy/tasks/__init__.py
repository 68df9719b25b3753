"""Toy tasks: deterministic (seeded) generators with disjoint train/test splits.

Every task returns a :class:`Batch`: ``tokens`` [batch, seq] (ids into ``task.vocab``; float
inputs [batch, seq, d_in] for regression), ``targets`` [batch, seq] and ``mask`` [batch, seq]
marking the positions that carry a loss (the model's prediction *at* that position is scored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import WorkbenchError


class UnknownTaskError(WorkbenchError):
    """A task name that is not in the registry."""


@dataclass
class Batch:
    tokens: Any  # LongTensor [batch, seq] or FloatTensor [batch, seq, d_in]
    targets: Any  # LongTensor [batch, seq] (classification) or FloatTensor [batch, seq] (regression)
    mask: Any  # BoolTensor [batch, seq]
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def subset(self, idx) -> Batch:
        meta = {
            k: (v[idx] if hasattr(v, "shape") and v.shape[:1] == self.tokens.shape[:1] else v)
            for k, v in self.meta.items()
        }
        return Batch(self.tokens[idx], self.targets[idx], self.mask[idx], meta)


class Task:
    """Base class. Subclasses set name, vocab, n_ctx, kind and the default training recipe."""

    name: str = ""
    kind: str = "classification"  # or "regression"
    vocab: list[str] = []
    n_ctx: int = 0
    # hyper-parameters `workbench train` uses unless told otherwise
    defaults: dict[str, Any] = {}

    def batch(self, split: str, n: int | None, seed: int) -> Batch:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        return {
            "task": self.name,
            "kind": self.kind,
            "vocab": self.vocab,
            "n_ctx": self.n_ctx,
            "params": self.params(),
        }

    def params(self) -> dict[str, Any]:
        return {}

    def check_split(self, split: str) -> None:
        if split not in ("train", "test"):
            raise WorkbenchError(f"unknown split {split!r}: train or test")


TASKS = ("ioi", "modadd", "carry", "histogram", "markov", "icl-regression")


def get_task(name: str, **params: Any) -> Task:
    """A task by name, with its parameters (the defaults reproduce the shipped checkpoints)."""
    from circuits.toy.tasks import carry, histogram, icl_regression, ioi, markov, modadd

    table = {
        "ioi": ioi.IOITask,
        "modadd": modadd.ModAddTask,
        "carry": carry.CarryTask,
        "histogram": histogram.HistogramTask,
        "markov": markov.MarkovTask,
        "icl-regression": icl_regression.ICLRegressionTask,
    }
    if name not in table:
        raise UnknownTaskError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    try:
        return table[name](**params)
    except TypeError as exc:
        raise WorkbenchError(f"bad parameters for task {name}: {exc}") from None
