"""The toy tasks' base types: a :class:`Batch` of examples and the :class:`Task` every generator subclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import WorkbenchError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Bool, Float, Int


class UnknownTaskError(WorkbenchError):
    """A task name that is not in the registry."""


@dataclass
class Batch:
    tokens: Int[torch.Tensor, "batch pos"] | Float[torch.Tensor, "batch pos d_in"]  # ids, or vectors (regression)
    targets: Int[torch.Tensor, "batch pos"] | Float[torch.Tensor, "batch pos"]  # classes, or values (regression)
    mask: Bool[torch.Tensor, "batch pos"]
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
