"""Multi-digit addition with carry: "a0 a1 a2 + b0 b1 b2 = s0 s1 s2 s3", digits least
significant first, sum teacher-forced: the prediction at "=" is s0, at s0 it is s1, and so on.
A pair is in the test split iff a fixed hash of (a, b) says so, so splits never overlap.
"""

from __future__ import annotations

from typing import Any

from core.models.toy_tasks.base import Batch, Task


class CarryTask(Task):
    name = "carry"
    kind = "classification"
    defaults = {
        "ffn": "dense",
        "layers": 1,
        "heads": 4,
        "d_model": 48,
        "norm": "LN",
        "steps": 2000,
        "lr": 3e-3,
        "weight_decay": 0.1,
        "batch_size": 128,
        "seed": 0,
        "act_fn": "relu",
        "experts": 4,
        "top_k": 1,
    }

    def __init__(self, digits: int = 3, test_mod: int = 10) -> None:
        self.digits = digits
        self.test_mod = test_mod
        self.vocab = [str(i) for i in range(10)] + ["+", "="]
        self.n_ctx = 3 * digits + 2  # inputs, '+', '=', and digits+1 sum digits minus the last

    def params(self) -> dict[str, Any]:
        return {"digits": self.digits, "test_mod": self.test_mod}

    def _is_test(self, a, b):
        return ((a * 7919 + b * 104729) % 1000003) % self.test_mod == 0

    def make(self, a, b) -> Batch:
        import torch

        d = self.digits
        s = a + b
        da = torch.stack([(a // 10**i) % 10 for i in range(d)], 1)
        db = torch.stack([(b // 10**i) % 10 for i in range(d)], 1)
        ds = torch.stack([(s // 10**i) % 10 for i in range(d + 1)], 1)
        n = len(a)
        plus, eq = torch.full((n, 1), 10), torch.full((n, 1), 11)
        tokens = torch.cat([da, plus, db, eq, ds[:, :d]], 1)
        targets = torch.full_like(tokens, -100)
        targets[:, 2 * d + 1 :] = ds
        # carry into sum digit i (i >= 1): the digit sum below overflowed
        carries = torch.stack([((a % 10**i) + (b % 10**i)) >= 10**i for i in range(d + 1)], 1)
        return Batch(tokens, targets, targets >= 0, {"a": a, "b": b, "carries": carries})

    def batch(self, split: str, n: int | None = None, seed: int = 0) -> Batch:
        import torch

        self.check_split(split)
        n = n or 2000
        gen = torch.Generator().manual_seed(seed * 2 + (split == "test"))
        top = 10**self.digits
        a_all, b_all = [], []
        got = 0
        while got < n:
            a = torch.randint(0, top, (2 * n,), generator=gen)
            b = torch.randint(0, top, (2 * n,), generator=gen)
            keep = self._is_test(a, b) if split == "test" else ~self._is_test(a, b)
            a_all.append(a[keep])
            b_all.append(b[keep])
            got += int(keep.sum())
        return self.make(torch.cat(a_all)[:n], torch.cat(b_all)[:n])
