"""Histogram counting: at each position, how often has this token occurred so far (itself
included)? Targets are count symbols c1..c{n}. Test sequences are those a fixed hash marks."""

from __future__ import annotations

from typing import Any

from core.models.toy_tasks.base import Batch, Task


class HistogramTask(Task):
    name = "histogram"
    kind = "classification"
    defaults = {
        "ffn": "dense",
        "layers": 1,
        "heads": 2,
        "d_model": 32,
        "norm": "LN",
        "steps": 1500,
        "lr": 3e-3,
        "weight_decay": 0.1,
        "batch_size": 128,
        "seed": 0,
        "act_fn": "relu",
    }

    def __init__(self, n_symbols: int = 8, seq_len: int = 10) -> None:
        self.n_symbols = n_symbols
        self.seq_len = seq_len
        self.vocab = [chr(ord("a") + i) for i in range(n_symbols)] + [f"c{i}" for i in range(1, seq_len + 1)]
        self.n_ctx = seq_len

    def params(self) -> dict[str, Any]:
        return {"n_symbols": self.n_symbols, "seq_len": self.seq_len}

    def make(self, x) -> Batch:
        import torch

        same = x[:, :, None] == x[:, None, :]  # [b, q, k]
        counts = torch.tril(same).sum(-1)  # occurrences so far, itself included
        targets = counts - 1 + self.n_symbols  # id of the count symbol c{count}
        return Batch(x, targets, torch.ones_like(x, dtype=torch.bool), {"counts": counts})

    def batch(self, split: str, n: int | None = None, seed: int = 0) -> Batch:
        import torch

        self.check_split(split)
        n = n or 2000
        gen = torch.Generator().manual_seed(seed * 2 + (split == "test"))
        weights = self.n_symbols ** torch.arange(self.seq_len) % 1000003
        out, got = [], 0
        while got < n:
            x = torch.randint(0, self.n_symbols, (2 * n, self.seq_len), generator=gen)
            test = ((x * weights).sum(1) % 10) == 0
            keep = test if split == "test" else ~test
            out.append(x[keep])
            got += int(keep.sum())
        return self.make(torch.cat(out)[:n])
