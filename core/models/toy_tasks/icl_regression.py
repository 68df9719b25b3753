"""In-context regression: a prompt is (x_1, y_1, ..., x_n, y_n); at every x_i position the model
predicts y_i from the pairs before it.

Two function families: ``linear`` (y = w . x, w ~ N(0, I)) and ``gp`` (y = f(x), f drawn from a
Gaussian process with a Gaussian (RBF) kernel of length scale ``lengthscale``), plus noise.

Inputs are vectors, not token ids: position 2i holds [x_i, 0] and position 2i+1 holds [0, y_i]
(d_in + 1 features). The model's scalar output at position 2i is its prediction of y_i.

For probes (per-layer residuals and the target of each prompt)::

    from core.models.toy_tasks.icl_regression import sample
    s = sample(n=256, seed=0)           # xs [n, pts, d], ys [n, pts], inputs [n, 2 pts, d+1]
    m = workbench.load("icl-regression")
    _, cache = m.run_with_cache(s["inputs"])
    resid = cache["blocks.3.hook_resid_post"][:, 0::2]  # residual at the x positions
    # target for x position i of prompt b: s["ys"][b, i]; the model's own prediction: logits[..., 0]
"""

from __future__ import annotations

from typing import Any

from core.models.toy_tasks.base import Batch, Task


class ICLRegressionTask(Task):
    name = "icl-regression"
    kind = "regression"
    metric = "loss"
    defaults = {
        "ffn": "dense",
        "layers": 4,
        "heads": 2,
        "d_model": 48,
        "d_mlp": 96,
        "norm": "LN",
        "steps": 2500,
        "lr": 1e-3,
        "weight_decay": 0.0,
        "batch_size": 64,
        "seed": 0,
        "act_fn": "gelu",
    }

    def __init__(
        self,
        d_in: int = 3,
        n_points: int = 12,
        family: str = "linear",
        noise: float = 0.0,
        lengthscale: float = 1.0,
    ) -> None:
        if family not in ("linear", "gp"):
            raise ValueError(f"family must be linear or gp, not {family!r}")
        self.d_in, self.n_points, self.family = d_in, n_points, family
        self.noise, self.lengthscale = noise, lengthscale
        self.vocab = ["x", "y"]
        self.n_ctx = 2 * n_points

    def params(self) -> dict[str, Any]:
        return {
            "d_in": self.d_in,
            "n_points": self.n_points,
            "family": self.family,
            "noise": self.noise,
            "lengthscale": self.lengthscale,
        }

    def sample(self, n: int, seed: int = 0, split: str = "train") -> dict[str, Any]:
        import torch

        self.check_split(split)
        gen = torch.Generator().manual_seed(seed * 2 + (split == "test") + 7)
        xs = torch.randn(n, self.n_points, self.d_in, generator=gen)
        out: dict[str, Any] = {"xs": xs}
        if self.family == "linear":
            w = torch.randn(n, self.d_in, generator=gen)
            ys = torch.einsum("bpd,bd->bp", xs, w)
            out["w"] = w
        else:
            d2 = ((xs[:, :, None] - xs[:, None]) ** 2).sum(-1)
            k = torch.exp(-d2 / (2 * self.lengthscale**2)) + 1e-4 * torch.eye(self.n_points)
            ys = torch.einsum(
                "bpq,bq->bp", torch.linalg.cholesky(k), torch.randn(n, self.n_points, generator=gen)
            )
        ys = ys + self.noise * torch.randn(ys.shape, generator=gen)
        inputs = torch.zeros(n, 2 * self.n_points, self.d_in + 1)
        inputs[:, 0::2, : self.d_in] = xs
        inputs[:, 1::2, self.d_in] = ys
        out.update(ys=ys, inputs=inputs)
        return out

    def batch(self, split: str, n: int | None = None, seed: int = 0) -> Batch:
        import torch

        s = self.sample(n or 512, seed, split)
        targets = torch.zeros(s["inputs"].shape[:2])
        targets[:, 0::2] = s["ys"]
        mask = torch.zeros_like(targets, dtype=torch.bool)
        mask[:, 0::2] = True
        return Batch(s["inputs"], targets, mask, {"xs": s["xs"], "ys": s["ys"]})


def sample(n: int = 256, seed: int = 0, split: str = "test", **params: Any) -> dict[str, Any]:
    """xs [n, pts, d_in], ys [n, pts], inputs [n, 2 pts, d_in + 1] (and w for the linear family)."""
    return ICLRegressionTask(**params).sample(n, seed, split)
