"""Symbolic indirect-object identification: "A and B then B" -> A.

Names are symbols (N0..N{k-1}). A prompt names two people in the first clause (in either
order), then repeats one of them (the subject S, the "... B gives to" of natural IOI), and the
model predicts, at that repeated name, the other one (the indirect object IO). The answer is
read at the S2 position so that a single layer can compare the query name with the earlier
names. (With the query at a fixed filler token, "A and B then B gives to", one layer can only
add copies of A and B and subtract S; 1L2H training on that template stalled at 0.60 train /
0.09 test accuracy in four tries, memorising the first clause.) Every (IO, S, order) triple is
one prompt; a seeded permutation splits them into train and test: test prompts are unseen
combinations.
"""

from __future__ import annotations

from typing import Any

from core.models.toy_tasks.base import Batch, Task

TEMPLATE = ("{n1}", "and", "{n2}", "then", "{s}")
POS_N1, POS_N2, POS_S2, POS_END = 0, 2, 4, 4


class IOITask(Task):
    name = "ioi"
    kind = "classification"
    defaults = {
        "ffn": "none",
        "layers": 1,
        "heads": 2,
        "d_model": 32,
        "norm": "none",
        "steps": 400,
        "lr": 1e-2,
        "weight_decay": 0.01,
        "batch_size": 0,
        "seed": 0,
    }

    def __init__(self, n_names: int = 20, test_frac: float = 0.2, split_seed: int = 0) -> None:
        self.n_names = n_names
        self.test_frac = test_frac
        self.split_seed = split_seed
        self.names = [f"N{i}" for i in range(n_names)]
        self.vocab = self.names + ["and", "then"]
        self.n_ctx = len(TEMPLATE)

    def params(self) -> dict[str, Any]:
        return {"n_names": self.n_names, "test_frac": self.test_frac, "split_seed": self.split_seed}

    def prompt(self, io: int, s: int, io_first: bool = True) -> list[int]:
        """Token ids for one prompt (IO and S are name indices)."""
        n1, n2 = (io, s) if io_first else (s, io)
        idx = {w: i for i, w in enumerate(self.vocab)}
        return [n1, idx["and"], n2, idx["then"], s]

    def text(self, io: int, s: int, io_first: bool = True) -> str:
        return " ".join(self.vocab[i] for i in self.prompt(io, s, io_first))

    def all_triples(self) -> list[tuple[int, int, bool]]:
        return [
            (io, s, f)
            for io in range(self.n_names)
            for s in range(self.n_names)
            if io != s
            for f in (True, False)
        ]

    def batch(self, split: str, n: int | None = None, seed: int = 0) -> Batch:
        import torch

        self.check_split(split)
        triples = self.all_triples()
        perm = torch.randperm(len(triples), generator=torch.Generator().manual_seed(self.split_seed))
        n_test = int(round(self.test_frac * len(triples)))
        chosen = perm[:n_test] if split == "test" else perm[n_test:]
        if n is not None:
            chosen = chosen[torch.randperm(len(chosen), generator=torch.Generator().manual_seed(seed))[:n]]
        rows = [triples[int(i)] for i in chosen]
        tokens = torch.tensor([self.prompt(*r) for r in rows], dtype=torch.long)
        targets = torch.full_like(tokens, -100)
        targets[:, POS_END] = torch.tensor([r[0] for r in rows])
        mask = targets >= 0
        io = torch.tensor([r[0] for r in rows])
        s = torch.tensor([r[1] for r in rows])
        first = torch.tensor([r[2] for r in rows])
        return Batch(
            tokens,
            targets,
            mask,
            {
                "io": io,
                "s": s,
                "io_first": first,
                "io_pos": torch.where(first, POS_N1, POS_N2),
                "s1_pos": torch.where(first, POS_N2, POS_N1),
                "s2_pos": torch.full_like(io, POS_S2),
                "answer_pos": POS_END,
            },
        )

    def corrupt(self, batch: Batch) -> Batch:
        """The same prompts with IO and S swapped everywhere (the answer becomes the old S)."""
        import torch

        rows = list(
            zip(
                batch.meta["s"].tolist(),
                batch.meta["io"].tolist(),
                batch.meta["io_first"].tolist(),
                strict=False,
            )
        )
        tokens = torch.tensor([self.prompt(io, s, not f) for io, s, f in rows], dtype=torch.long)
        targets = torch.full_like(tokens, -100)
        targets[:, POS_END] = batch.meta["s"]
        meta = dict(batch.meta, io=batch.meta["s"], s=batch.meta["io"])
        return Batch(tokens, targets, targets >= 0, meta)
