"""Decision-aware attention propagation (DAP): attention rollout with a gradient decision prior.

Our reconstruction of arXiv 2604.18094 (only its abstract is public). The exact rule, with
Z^l = the residual stream entering block l (``blocks.{l}.hook_resid_pre``, tokens x d_model),
A_h^l = block l's attention pattern, y_c = the target logit; everything from one forward and
one backward pass:

1. Decision prior per layer (Grad-CAM on tokens). ``pool="tokens"``: alpha^l = mean over tokens
   of dy_c/dZ^l and c_i = Z_i^l . alpha^l; ``pool="none"``: c_i = Z_i^l . dy_c/dZ_i^l
   (gradient x input per token). p^l = ReLU(c) / mean_i ReLU(c) (mean 1, so the prior reweights
   attention without shrinking it; an all-zero prior falls back to p = 1, i.e. plain rollout).
2. Head fusion. ``head_fusion="mean"``: A^l = mean_h A_h^l. ``"grad"``: A^l = mean_h w_h A_h^l
   with w_h = ReLU(sum_qk dy_c/dA_h * A_h), normalised to mean 1 over heads.
3. Prior injection. ``prior_on="cols"``: A' = A^l diag(p^l) (every query draws more from the
   keys that carry decision evidence); ``"rows"``: A' = diag(p^l) A^l.
4. A_hat^l = rownorm(identity * I + A'); R = A_hat^{end-1} ... A_hat^{start}.
5. map = R[CLS, patches], times p^{end-1}[patches] when ``final_prior`` (the prior of the keys the
   last propagated layer reads).

Defaults were chosen on the validation seed (see docs/vit.md and ``select_defaults``), never on
the held-out test images. Cost: one forward + one backward + L small (tokens x tokens) products.
"""

from __future__ import annotations

import torch

from attribution.vit.methods._common import capture, eye_like, pattern_name, resid_pre_name, rownorm
from workbench.errors import MethodError

DEFAULTS = {"prior_on": "cols", "head_fusion": "mean", "pool": "tokens", "start": 0, "end": None,
            "identity": 1.0, "final_prior": True}
NEEDS_GRAD = True


def layer_range(n_layers: int, start: int, end: int | None) -> list[int]:
    end = n_layers if end is None else end
    if not 0 <= start < end <= n_layers:
        raise MethodError(f"dap layer range start={start}, end={end} invalid for {n_layers} layers")
    return list(range(start, end))


def prior(z: torch.Tensor, g: torch.Tensor, pool: str) -> torch.Tensor:
    """(image, token) decision prior from features z and their gradients g (image, token, d)."""
    if pool == "tokens":
        c = (z * g.mean(1, keepdim=True)).sum(-1)
    elif pool == "none":
        c = (z * g).sum(-1)
    else:
        raise MethodError(f"dap pool must be 'tokens' or 'none', got {pool!r}")
    c = c.clamp(min=0)
    mean = c.mean(-1, keepdim=True)
    return torch.where(mean > 0, c / mean.clamp_min(1e-12), torch.ones_like(c))


def propagate(patterns: list[torch.Tensor], pattern_grads: list[torch.Tensor] | None,
              feats: list[torch.Tensor], feat_grads: list[torch.Tensor], prior_on: str = "cols",
              head_fusion: str = "mean", pool: str = "tokens", identity: float = 1.0,
              final_prior: bool = True) -> torch.Tensor:
    """The DAP map (image, patch) from cached per-layer tensors (lowest layer first)."""
    if prior_on not in ("cols", "rows"):
        raise MethodError(f"dap prior_on must be 'cols' or 'rows', got {prior_on!r}")
    if head_fusion not in ("mean", "grad"):
        raise MethodError(f"dap head_fusion must be 'mean' or 'grad', got {head_fusion!r}")
    r = eye_like(patterns[0][:, 0])
    p = None
    for k, a in enumerate(patterns):
        if head_fusion == "grad":
            w = (pattern_grads[k] * a).sum((-1, -2)).clamp(min=0)  # (image, head)
            m = w.mean(-1, keepdim=True)
            w = torch.where(m > 0, w / m.clamp_min(1e-12), torch.ones_like(w))
            fused = (a * w[:, :, None, None]).mean(1)
        else:
            fused = a.mean(1)
        p = prior(feats[k], feat_grads[k], pool)
        fused = fused * p[:, None, :] if prior_on == "cols" else fused * p[:, :, None]
        r = rownorm(identity * eye_like(fused) + fused) @ r
    out = r[:, 0, 1:]
    return out * p[:, 1:] if final_prior else out


def capture_for_dap(model, images: torch.Tensor, targets: torch.Tensor, layers: list[int]):
    names = [pattern_name(l) for l in layers] + [resid_pre_name(l) for l in layers]
    _, acts, grads = capture(model, images, names, grad=True, targets=targets)
    return ([acts[pattern_name(l)] for l in layers], [grads[pattern_name(l)] for l in layers],
            [acts[resid_pre_name(l)] for l in layers], [grads[resid_pre_name(l)] for l in layers])


def run(model, images: torch.Tensor, targets: torch.Tensor, prior_on: str = "cols", head_fusion: str = "mean",
        pool: str = "tokens", start: int = 0, end: int | None = None, identity: float = 1.0,
        final_prior: bool = True) -> torch.Tensor:
    layers = layer_range(model.cfg.n_layers, start, end)
    pats, pgrads, feats, fgrads = capture_for_dap(model, images, targets, layers)
    return propagate(pats, pgrads, feats, fgrads, prior_on, head_fusion, pool, identity, final_prior)
