"""Read out the in-context regression model layer by layer and compare it with classical solvers.

Each layer's residual stream at the x positions is mapped to a prediction of y by a ridge probe
fitted on training prompts; on held-out prompts this gives layer-wise predictions ŷ_l[b, i] for
every query position i (i earlier (x, y) pairs in context). The same queries are answered by

- gd: gradient descent on the least-squares loss from w = 0 (step 1 / lambda_max), iterates 1..T;
- richardson: Richardson iteration on the kernel system (K + lam I) a = y (step 1 / lambda_max);
- precond-richardson: Richardson preconditioned by the row sums of K + lam I (a row-normalised
  kernel operator, what softmax attention computes), iterates 1..T;
- ridge: exact ridge regression; kernel-ridge: exact Gaussian-kernel ridge regression.

The kernel of the iterative solvers follows the task family (linear or Gaussian). A solver's
distance to a layer is the mean squared difference of predictions, divided by E[y^2]; for
iterative solvers the best-matching iterate is taken per layer, and the error profiles (MSE
against the truth as a function of the number of context examples) are compared the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import MethodError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

SOLVERS = ("gd", "richardson", "precond-richardson", "ridge", "kernel-ridge")


def _kernel(a, b, kind: str, lengthscale: float):
    import torch

    if kind == "linear":
        return a @ b.transpose(-1, -2)
    d2 = torch.cdist(a, b) ** 2
    return torch.exp(-d2 / (2 * lengthscale**2))


def _lam_max(mat):
    import torch

    return torch.linalg.eigvalsh(0.5 * (mat + mat.transpose(-1, -2)))[..., -1].clamp_min(1e-8)


def solver_predictions(
    xs: Float[torch.Tensor, "prompt pos d"], ys: Float[torch.Tensor, "prompt pos"], iters: int = 32,
    lam: float = 0.01, kernel: str = "linear", lengthscale: float = 1.0
) -> dict[str, Float[torch.Tensor, "iterate prompt pos"]]:
    """{solver: [iterate, prompt, position]} predictions of y_i from pairs 0..i-1 (position 0 is 0)."""
    import torch

    xs, ys = xs.double(), ys.double()
    n, P, d = xs.shape
    out = {
        s: torch.zeros(
            iters if s in ("gd", "richardson", "precond-richardson") else 1, n, P, dtype=torch.float64
        )
        for s in SOLVERS
    }
    eye_d = torch.eye(d, dtype=torch.float64)
    for i in range(1, P):
        X, y, q = xs[:, :i], ys[:, :i], xs[:, i : i + 1]
        # gradient descent on (1/2i)|Xw - y|^2
        H = X.transpose(1, 2) @ X / i
        eta = 1.0 / _lam_max(H)
        w = torch.zeros(n, d, dtype=torch.float64)
        for t in range(iters):
            w = w - eta[:, None] * (
                (H @ w[..., None])[..., 0] - (X.transpose(1, 2) @ y[..., None])[..., 0] / i
            )
            out["gd"][t, :, i] = (q[:, 0] * w).sum(-1)
        # Richardson and preconditioned Richardson on (K + lam I) a = y
        K = _kernel(X, X, kernel, lengthscale)
        A = K + lam * torch.eye(i, dtype=torch.float64)
        kq = _kernel(q, X, kernel, lengthscale)[:, 0]  # [n, i]
        omega = 1.0 / _lam_max(A)
        prec = 1.0 / A.abs().sum(-1)  # inverse row sums
        omega_p = 1.0 / _lam_max(prec.sqrt()[..., None] * A * prec.sqrt()[:, None, :])
        a = torch.zeros(n, i, dtype=torch.float64)
        ap = torch.zeros(n, i, dtype=torch.float64)
        for t in range(iters):
            a = a + omega[:, None] * (y - (A @ a[..., None])[..., 0])
            ap = ap + omega_p[:, None] * prec * (y - (A @ ap[..., None])[..., 0])
            out["richardson"][t, :, i] = (kq * a).sum(-1)
            out["precond-richardson"][t, :, i] = (kq * ap).sum(-1)
        # exact ridge (primal) and Gaussian kernel ridge
        w = torch.linalg.solve(X.transpose(1, 2) @ X + lam * eye_d, X.transpose(1, 2) @ y[..., None])[..., 0]
        out["ridge"][0, :, i] = (q[:, 0] * w).sum(-1)
        Kg = _kernel(X, X, "rbf", lengthscale) + lam * torch.eye(i, dtype=torch.float64)
        kg = _kernel(q, X, "rbf", lengthscale)[:, 0]
        out["kernel-ridge"][0, :, i] = (kg * torch.linalg.solve(Kg, y[..., None])[..., 0]).sum(-1)
    return {k: v.float() for k, v in out.items()}


@dataclass
class SolverFit:
    solver: str
    distance: float  # mean over layers of the best iterate's normalised prediction distance
    profile_distance: float  # same for error profiles (relative L2 between MSE-by-position curves)
    best_iterates: list[int] = field(default_factory=list)  # per layer (1-based)
    per_layer: list[float] = field(default_factory=list)


@dataclass
class ICLReadout:
    model: str
    task: dict[str, Any]
    layers: list[str]
    probe_r2: list[float]
    layer_mse: list[float]
    fits: list[SolverFit]
    layer_profiles: Float[torch.Tensor, "layer pos"] | None = None  # MSE against the truth
    solver_profiles: dict[str, Float[torch.Tensor, " pos"]] = field(default_factory=dict)  # the final iterate's

    @property
    def best(self) -> SolverFit:
        return min(self.solvers, key=lambda f: f.distance)

    @property
    def solvers(self) -> list[SolverFit]:
        return [f for f in self.fits if f.solver != "zero-baseline"]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "task": self.task,
            "layers": self.layers,
            "probe_r2": self.probe_r2,
            "layer_mse": self.layer_mse,
            "solvers": [
                {
                    "solver": f.solver,
                    "distance": f.distance,
                    "profile_distance": f.profile_distance,
                    "best_iterates": f.best_iterates,
                    "per_layer": f.per_layer,
                }
                for f in self.fits
            ],
            "best_solver": self.best.solver,
            "best_solver_by_profile": min(self.solvers, key=lambda f: f.profile_distance).solver,
        }

    def table(self):
        import pandas as pd

        return pd.DataFrame(
            [
                {"solver": f.solver, "distance": f.distance, "profile_distance": f.profile_distance}
                for f in self.fits
            ]
        ).sort_values("distance")

    def plot(self):
        import plotly.graph_objects as go

        fig = go.Figure()
        pos = list(range(1, self.layer_profiles.shape[1]))
        for name, prof in zip(self.layers, self.layer_profiles, strict=False):
            fig.add_trace(go.Scatter(x=pos, y=prof[1:].tolist(), name=f"layer {name}", mode="lines+markers"))
        for s, prof in self.solver_profiles.items():
            fig.add_trace(go.Scatter(x=pos, y=prof[1:].tolist(), name=s, line={"dash": "dot"}))
        fig.update_layout(
            title=f"error profiles: {self.model} layers vs solvers",
            xaxis_title="context examples",
            yaxis_title="MSE",
            yaxis_type="log",
            template="plotly_white",
        )
        return fig


def layer_predictions(model: Any, inputs: Float[torch.Tensor, "prompt seq d_in"],
                      ys: Float[torch.Tensor, "prompt pos"], train_inputs: Float[torch.Tensor, "n_train seq d_in"],
                      train_ys: Float[torch.Tensor, "n_train pos"], alpha: float = 1.0
                      ) -> tuple[dict[str, Float[torch.Tensor, "prompt pos"]], dict[str, float]]:
    """({layer name: [prompt, position] predictions}, {layer name: held-out R^2}) from ridge probes."""
    import numpy as np
    import torch
    from sklearn.linear_model import Ridge

    names = ["embed"] + [str(i) for i in range(model.arch.n_layers)]
    hooks = ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(model.arch.n_layers)]
    if "hook_pos_embed" in model.hook_names():
        hooks[0] = "hook_pos_embed"  # embeddings alone: the residual before any block

    def resid(inp):
        with torch.no_grad():
            logits, cache = model.run_with_cache(inp, names_filter=hooks + ["hook_embed"])
        acts = {}
        for name, h in zip(names, hooks, strict=False):
            a = cache["hook_embed"] + cache[h] if h == "hook_pos_embed" else cache[h]
            acts[name] = a[:, 0::2].float()
        return acts, logits[:, 0::2, 0].float()

    tr, _ = resid(train_inputs)
    te, own = resid(inputs)
    preds, r2 = {}, {}
    P = ys.shape[1]
    pos_tr = torch.arange(P).repeat(train_ys.shape[0])
    keep = pos_tr > 0  # position 0 has no context
    for name in names:
        Xtr = tr[name].reshape(-1, tr[name].shape[-1]).numpy()[keep.numpy()]
        ytr = train_ys.reshape(-1).numpy()[keep.numpy()]
        probe = Ridge(alpha=alpha).fit(Xtr, ytr)
        p = probe.predict(te[name].reshape(-1, te[name].shape[-1]).numpy()).reshape(ys.shape)
        preds[name] = torch.tensor(p, dtype=torch.float32)
        yt = ys[:, 1:].numpy()
        r2[name] = float(1 - ((p[:, 1:] - yt) ** 2).sum() / max(((yt - yt.mean()) ** 2).sum(), 1e-12))
    preds["output"] = own
    r2["output"] = float(
        1 - ((own[:, 1:] - ys[:, 1:]) ** 2).sum() / ((ys[:, 1:] - ys[:, 1:].mean()) ** 2).sum()
    )
    del np
    return preds, r2


def compare(layer_preds: dict[str, Float[torch.Tensor, "prompt pos"]], ys: Float[torch.Tensor, "prompt pos"],
            solvers: dict[str, Float[torch.Tensor, "iterate prompt pos"]]
            ) -> tuple[list[SolverFit], Float[torch.Tensor, "layer pos"], dict[str, Float[torch.Tensor, " pos"]]]:
    """Distances between each layer's predictions and each solver's (best) iterate."""
    import torch

    scale = float((ys[:, 1:] ** 2).mean())
    names = list(layer_preds)
    lp = torch.stack([layer_preds[n][:, 1:] for n in names])  # [L, n, P-1]
    layer_prof = ((lp - ys[None, :, 1:]) ** 2).mean(1)  # [L, P-1]
    fits, profiles = [], {}
    for s, iters in solvers.items():
        it = iters[:, :, 1:]  # [T, n, P-1]
        d = ((lp[:, None] - it[None]) ** 2).mean((2, 3)) / scale  # [L, T]
        prof = ((it - ys[None, :, 1:]) ** 2).mean(1)  # [T, P-1]
        pd_ = (layer_prof[:, None] - prof[None]).norm(dim=-1) / layer_prof.norm(dim=-1)[:, None].clamp_min(
            1e-12
        )
        best = d.argmin(1)
        fits.append(
            SolverFit(
                s,
                float(d.min(1).values.mean()),
                float(pd_.min(1).values.mean()),
                [int(b) + 1 for b in best],
                [float(v) for v in d.min(1).values],
            )
        )
        profiles[s] = torch.cat([torch.zeros(1), prof[-1]])  # final iterate, for plots
    layer_profiles = torch.cat([torch.zeros(len(names), 1), layer_prof], 1)
    return fits, layer_profiles, profiles


def icl_readout(
    model: Any,
    n: int = 512,
    n_train: int = 2048,
    iters: int = 32,
    lam: float = 0.01,
    seed: int = 0,
    layers: list[str] | None = None,
) -> ICLReadout:
    """The full comparison on held-out prompts of the model's own task (``model.info["task_source"]``, which the
    toy zoo's loader puts there: this engine draws its prompts without importing the zoo)."""
    info = model.info.get("task") or {}
    task = model.info.get("task_source")
    if info.get("task") != "icl-regression" or task is None:
        raise MethodError(f"{model.name} is not an in-context regression model (task {info.get('task')!r})")
    test = task.sample(n, seed, "test")
    train = task.sample(n_train, seed, "train")
    preds, r2 = layer_predictions(model, test["inputs"], test["ys"], train["inputs"], train["ys"])
    if layers:
        preds = {k: v for k, v in preds.items() if k in layers}
    kernel = "linear" if task.family == "linear" else "rbf"
    sol = solver_predictions(test["xs"], test["ys"], iters, lam, kernel, task.lengthscale)
    # a solver that predicts 0 everywhere: the distance any solver must beat to mean anything
    sol["zero-baseline"] = sol["ridge"] * 0
    fits, lprof, sprof = compare(preds, test["ys"], sol)
    mse = [float(((preds[k][:, 1:] - test["ys"][:, 1:]) ** 2).mean()) for k in preds]
    return ICLReadout(model.name, task.info(), list(preds), [r2[k] for k in preds], mse, fits, lprof, sprof)
