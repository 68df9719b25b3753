"""Integrated gradients (Sundararajan et al. 2017) over the token embeddings.

score_i = (e_i - b_i) . sum_k w_k grad(b + alpha_k (e - b)) along the straight path from a baseline
embedding b to the prompt's embedding e. Positional embeddings, where the model has them, stay.

Completeness (the scores sum to f(e) - f(b)) holds only as far as the quadrature converges. Every result
carries its gap, Captum's convergence delta sum(scores) - (f(e) - f(b)), from one extra forward of the two
end points (which also gives the target logit); above 10% of |f(e) - f(b)| a ConvergenceWarning says so.

Baselines: ``zero`` (the zero embedding), ``mean`` (the mean token embedding at every position), ``pad`` /
``bos`` / ``eos`` (that special token's embedding) or a token id. Schedules: ``uniform`` (midpoints
alpha_k = (k + 1/2) / steps, weights 1 / steps) or ``cubic`` (alpha = u^3 at the same midpoints u, weights
3 u^2 / steps: 1/3 of the points within alpha < 0.04, where the norms jump for the zero baseline).
``keep_first``: the first position keeps its own embedding along the path (its score is 0).

On smollm2-135m none of the baselines converges with the first position on the path (gaps as large as
f(x) - f(b) or larger at 20 to 300 steps, the cubic schedule no better): the first position is the
attention sink, and moving its embedding switches the sink off somewhere on the path, a near-jump no
quadrature resolves. With keep_first=True the mean baseline converges: gap below 0.1% of f(x) - f(b) at 100
steps on three short fact prompts, at 300 steps (not yet at 100) on two 14-token IOI prompts; see
results/attribution/ig_completeness_smollm2.md (scripts/ig_completeness.py). The defaults (zero baseline,
every position on the path, 20 steps) stay the textbook IG that published comparisons use.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from jaxtyping import Float

from attribution.baselines.common import check_target, grads, last_logits, metric
from attribution.methods import Scored
from core.errors import MethodError
from core.models.hooked import HookedModel  # at run time: the tests check these signatures (tests/conftest.py)
from core.models.tokens import Encoding

BASELINES = ("zero", "mean", "pad", "bos", "eos")  # or a token id
SCHEDULES = ("uniform", "cubic")
REL_TOL = 0.1  # warn when |gap| > REL_TOL * |f(e) - f(b)|


class ConvergenceWarning(UserWarning):
    """Integrated gradients' scores are far from f(input) - f(baseline): more steps or another baseline."""


def baseline_embedding(model: HookedModel, baseline: str | int) -> Float[torch.Tensor, " d_model"]:
    """The baseline's embedding [d_model], the same at every position."""
    W_E = model.W_E
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        if not 0 <= baseline < W_E.shape[0]:
            raise MethodError(f"baseline token id {baseline} is outside the vocabulary (0..{W_E.shape[0] - 1})")
        return W_E[baseline].detach()
    if baseline == "zero":
        return torch.zeros_like(W_E[0])
    if baseline == "mean":
        return W_E.detach().mean(0)
    if baseline in ("pad", "bos", "eos"):
        tid = getattr(model.tokenizer, f"{baseline}_token_id", None)
        if tid is None:
            raise MethodError(f"{model.name}'s tokenizer has no {baseline} token; use baseline=zero or mean")
        return W_E[int(tid)].detach()
    raise MethodError(f"unknown baseline {baseline!r}: {', '.join(BASELINES)} or a token id")


def path_points(steps: int, schedule: str) -> tuple[Float[torch.Tensor, " steps"], Float[torch.Tensor, " steps"]]:
    """(alphas, weights) [steps] of the quadrature of the path integral over alpha in [0, 1]."""
    if schedule not in SCHEDULES:
        raise MethodError(f"unknown schedule {schedule!r}: {' or '.join(SCHEDULES)}")
    u = (torch.arange(steps, dtype=torch.float64) + 0.5) / steps
    if schedule == "uniform":
        return u.float(), torch.full((steps,), 1.0 / steps, dtype=torch.float64)
    return (u**3).float(), 3 * u**2 / steps


def ig_scores(model: HookedModel, enc: Encoding, level: str, steps: int = 20, baseline: str | int = "zero",
              schedule: str = "uniform", keep_first: bool = False,
              internal_batch_size: int | None = None) -> Scored:
    """keep_first: the first position (the attention sink) keeps its own embedding along the path (score 0)."""
    check_target(enc)
    steps, batch = int(steps), int(internal_batch_size or steps)
    if steps < 1 or batch < 1:
        raise MethodError("integrated gradients needs steps >= 1 and internal_batch_size >= 1")
    base = baseline_embedding(model, baseline).expand(enc.seq_len, -1).clone()  # [S, D]
    if keep_first:
        base[0] = model.W_E[enc.tokens[0, 0]].detach()
    alphas, weights = path_points(steps, schedule)
    total = torch.zeros(enc.seq_len, model.arch.d_model, dtype=torch.float64, device=enc.tokens.device)
    for start in range(0, steps, batch):
        a = alphas[start:start + batch].to(enc.tokens.device)

        def on_path(x: Float[torch.Tensor, "alpha pos d_model"], a: Float[torch.Tensor, " alpha"] = a,
                    ) -> Float[torch.Tensor, "alpha pos d_model"]:
            return base + a.view(-1, 1, 1) * (x - base)

        _, gs, _ = grads(model, enc, ["hook_embed"], tokens=enc.tokens.expand(len(a), -1), embed_path=on_path)
        w = weights[start:start + batch].to(total.device).view(-1, 1, 1)
        total += (gs["hook_embed"].double() * w).sum(0)
    f_input, f_base, embed = end_points(model, enc, base)
    scores = ((embed - base).double() * total).sum(-1)
    delta = float(scores.sum()) - (f_input - f_base)
    if abs(delta) > REL_TOL * abs(f_input - f_base):
        warnings.warn(f"integrated gradients did not converge: the scores sum to {float(scores.sum()):.3g}, "
                      f"f(input) - f(baseline) is {f_input - f_base:.3g} (gap {delta:.3g}, {steps} steps, "
                      f"{baseline} baseline{', first kept' if keep_first else ''}); try "
                      + ("more steps (300)" if keep_first else "keep_first=True with baseline=mean, 300 steps"),
                      ConvergenceWarning, stacklevel=2)
    return Scored(scores.float(), target_logit=f_input, baseline_logit=f_base, convergence_delta=delta)


def end_points(model: HookedModel, enc: Encoding, base: Float[torch.Tensor, "pos d_model"],
               ) -> tuple[float, float, Float[torch.Tensor, "pos d_model"]]:
    """f(input), f(baseline) from one forward of two rows, and the input's embedding [S, D]."""
    got = {}

    def ends(x: Float[torch.Tensor, "2 pos d_model"], hook: Any) -> Float[torch.Tensor, "2 pos d_model"]:  # input, base
        got["embed"] = x[0].detach().clone()
        return torch.stack([x[0], base.expand_as(x[0])])

    with torch.no_grad():
        values = metric(last_logits(model, enc.tokens.expand(2, -1), [("hook_embed", ends)]), enc)
    return float(values[0]), float(values[1]), got["embed"]


def ig_completeness(model: HookedModel, enc: Encoding, **params: Any) -> dict[str, float]:
    """IG's completeness report on one prompt: sum of scores, f(input) - f(baseline), the gap."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        out = ig_scores(model, enc, "token", **params)
    return {"sum": float(out.scores.double().sum()), "expected": out.target_logit - out.baseline_logit,
            "delta": out.convergence_delta, "target_logit": out.target_logit, "baseline_logit": out.baseline_logit}
