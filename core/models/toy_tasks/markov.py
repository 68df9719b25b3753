"""High-order Markov chain with unequal lag importance.

The next symbol depends on the symbols ``lags`` positions back, each through its own random
transition table scaled by a weight: p(x_t) = softmax(sum_l w_l * M_l[x_{t-l}]). Larger w_l
means a more important lag. The chain (tables) is fixed by ``chain_seed``; splits differ only in
the sampling seed. ``meta['optimal_loss']`` is the Bayes loss of the sampled batch.
"""

from __future__ import annotations

from typing import Any

from core.models.toy_tasks.base import Batch, Task


class MarkovTask(Task):
    name = "markov"
    kind = "classification"
    metric = "loss"
    defaults = {
        "ffn": "none",
        "layers": 1,
        "heads": 3,
        "d_model": 24,
        "norm": "none",
        "steps": 1500,
        "lr": 3e-3,
        "weight_decay": 0.0,
        "batch_size": 64,
        "seed": 0,
    }

    def __init__(
        self,
        n_symbols: int = 6,
        seq_len: int = 32,
        lags: tuple[int, ...] = (1, 2, 4),
        weights: tuple[float, ...] = (3.0, 2.0, 1.0),
        chain_seed: int = 0,
    ) -> None:
        import torch

        if len(lags) != len(weights):
            raise ValueError("lags and weights must have the same length")
        self.n_symbols, self.seq_len = n_symbols, seq_len
        self.lags, self.weights, self.chain_seed = tuple(lags), tuple(weights), chain_seed
        gen = torch.Generator().manual_seed(chain_seed)
        self.tables = torch.randn(len(lags), n_symbols, n_symbols, generator=gen)
        self.vocab = [chr(ord("a") + i) for i in range(n_symbols)]
        self.n_ctx = seq_len

    def params(self) -> dict[str, Any]:
        return {
            "n_symbols": self.n_symbols,
            "seq_len": self.seq_len,
            "lags": list(self.lags),
            "weights": list(self.weights),
            "chain_seed": self.chain_seed,
        }

    def next_logits(self, x, t: int):
        """Logits of x_t given the sequence so far [batch, seq]."""
        import torch

        out = torch.zeros(x.shape[0], self.n_symbols)
        for lag, w, table in zip(self.lags, self.weights, self.tables, strict=False):
            out += w * table[x[:, t - lag]]
        return out

    def batch(self, split: str, n: int | None = None, seed: int = 0) -> Batch:
        import torch

        self.check_split(split)
        n = n or 1000
        gen = torch.Generator().manual_seed(seed * 2 + (split == "test") + 1000)
        k = max(self.lags)
        x = torch.zeros(n, self.seq_len + 1, dtype=torch.long)
        x[:, :k] = torch.randint(0, self.n_symbols, (n, k), generator=gen)
        nll = torch.zeros(n, self.seq_len + 1)
        for t in range(k, self.seq_len + 1):
            logp = torch.log_softmax(self.next_logits(x, t), -1)
            x[:, t] = torch.multinomial(logp.exp(), 1, generator=gen)[:, 0]
            nll[:, t] = -logp.gather(1, x[:, t : t + 1])[:, 0]
        tokens, targets = x[:, :-1], x[:, 1:].clone()
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, k - 1 :] = True  # predictions with the full history available
        targets[~mask] = -100
        optimal = float(nll[:, k:].mean())
        return Batch(tokens, targets, mask, {"optimal_loss": optimal})

    def lag_attention(self, tl: Any, tokens=None) -> list[list[list[float]]]:
        """Mean attention of each head (layer, head) to each lag, over the scored positions (``tl``: a
        TransformerLens module or a HookedModel)."""
        import torch

        if tokens is None:
            tokens = self.batch("test", 64, seed=12345).tokens
        with torch.no_grad():
            _, cache = tl.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
        k = max(self.lags)
        q = torch.arange(k - 1, tokens.shape[1])
        out = []
        for layer in range(sum(n.endswith("attn.hook_pattern") for n in cache.keys())):
            pat = cache[f"blocks.{layer}.attn.hook_pattern"]  # [b, h, q, k]
            # the prediction at q is of x_{q+1}: lag l sits at position q + 1 - l
            out.append(
                [[float(pat[:, h, q, q + 1 - lag].mean()) for lag in self.lags] for h in range(pat.shape[1])]
            )
        return out

    def dynamics(self, tl: Any) -> dict[str, Any]:
        return {"lag_attention": self.lag_attention(tl)}
