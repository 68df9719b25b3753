"""Modular addition: "a b =" -> (a + b) mod p, all p^2 pairs split into train and test."""

from __future__ import annotations

from typing import Any

from core.models.toy_tasks.base import Batch, Task


class ModAddTask(Task):
    name = "modadd"
    kind = "classification"
    defaults = {
        "ffn": "dense",
        "layers": 1,
        "heads": 4,
        "d_model": 64,
        "norm": "none",
        "steps": 2500,
        "lr": 3e-3,
        "weight_decay": 1.0,
        "batch_size": 0,
        "seed": 0,
        "act_fn": "relu",
    }

    def __init__(self, p: int = 41, train_frac: float = 0.6, split_seed: int = 0) -> None:
        self.p = p
        self.train_frac = train_frac
        self.split_seed = split_seed
        self.vocab = [str(i) for i in range(p)] + ["="]
        self.n_ctx = 3

    def params(self) -> dict[str, Any]:
        return {"p": self.p, "train_frac": self.train_frac, "split_seed": self.split_seed}

    def all_pairs(self) -> Batch:
        """All p^2 inputs in (a, b) row-major order: what the Fourier tools read."""
        import torch

        a = torch.arange(self.p).repeat_interleave(self.p)
        b = torch.arange(self.p).repeat(self.p)
        return self._make(a, b)

    def _make(self, a, b) -> Batch:
        import torch

        tokens = torch.stack([a, b, torch.full_like(a, self.p)], dim=1)
        targets = torch.full_like(tokens, -100)
        targets[:, 2] = (a + b) % self.p
        return Batch(tokens, targets, targets >= 0, {"a": a, "b": b, "answer_pos": 2})

    def batch(self, split: str, n: int | None = None, seed: int = 0) -> Batch:
        import torch

        self.check_split(split)
        full = self.all_pairs()
        perm = torch.randperm(self.p**2, generator=torch.Generator().manual_seed(self.split_seed))
        n_train = int(round(self.train_frac * self.p**2))
        idx = perm[:n_train] if split == "train" else perm[n_train:]
        if n is not None:
            idx = idx[torch.randperm(len(idx), generator=torch.Generator().manual_seed(seed))[:n]]
        return full.subset(idx)
