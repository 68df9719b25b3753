"""DPA integrated along a path at token level (``dpa_path``, the token-level twin of ``circuits.edges.dpa_path``).

DPA's token score is ``e_i . t_i``: the token embedding times the target DPA's top-down pass carries down to
position i, with every nonlinearity frozen at the input's own forward. Here the frozen state is taken at
``steps`` points of the straight path from a baseline embedding to the input's (integrated gradients' path,
``attribution.baselines.integrated_gradients``): the token embedding (``hook_embed``) at point k is
``b + alpha_k (e - b)`` with ``alpha_k = k / steps``, k = 1 .. steps, and

    score_i = (e_i - b_i) . mean_k t_i(alpha_k),

the target at each point explaining the same metric (the input's target, minus its foil when it has one).
``alpha = 1`` is the input itself, so with ``steps=1`` and the zero baseline this is DPA's token score exactly.
The baseline is integrated gradients': zero (default), mean (the mean token embedding), pad, bos, eos or a
token id. Cost: ``steps`` forwards and top-down passes, ``internal_batch_size`` points per pass.
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float, Int

from attribution.baselines.common import check_target
from attribution.baselines.integrated_gradients import baseline_embedding
from attribution.dpa.engine import clean_forward, propagate
from attribution.dpa.linear import check_supported
from attribution.dpa.params import DPAParams
from attribution.dpa.steps import hook_names
from attribution.methods import Scored
from core.errors import MethodError

MAX_STEPS = 256


def dpa_path_scores(model: Any, enc: Any, level: str, steps: int = 4, baseline: str | int = "zero",
                    internal_batch_size: int = 8, **params: Any) -> Scored:
    """Token scores [token] of DPA averaged over the baseline -> input embedding path, with the input's
    target logit."""
    if level != "token":
        raise MethodError(f"dpa_path scores tokens only (got level {level!r}); circuits' dpa_path scores edges")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise MethodError(f"dpa_path steps must be a whole number from 1 to {MAX_STEPS} (got {steps!r})")
    if isinstance(internal_batch_size, bool) or not isinstance(internal_batch_size, int) or internal_batch_size < 1:
        raise MethodError(f"internal_batch_size must be a whole number >= 1 (got {internal_batch_size!r})")
    check_target(enc)
    p = DPAParams.from_kwargs(**params)
    check_supported(model)
    base = baseline_embedding(model, baseline).float()  # [d_model], the same at every position
    total = torch.zeros(enc.seq_len, dtype=torch.float64)
    embed: Float[torch.Tensor, "pos d_model"] | None = None
    target_logit = None
    alphas = [k / steps for k in range(steps, 0, -1)]  # alpha = 1 first: the input's own forward
    for start in range(0, steps, internal_batch_size):
        group = alphas[start:start + internal_batch_size]
        tokens = enc.tokens.expand(len(group), -1)
        with torch.no_grad():
            if group == [1.0]:  # DPA's own forward (steps=1: dpa bit for bit)
                cache = clean_forward(model, tokens, p, ("token",))
            else:
                cache = _path_forward(model, tokens, base, group, hook_names(model, p, ("token",)))
            if embed is None:
                embed = cache.pop("clean_embed", None)
                embed = cache["hook_embed"][0].clone() if embed is None else embed
            # the products with (e - b) are linear in t: put them where DPA's token score reads the embedding
            cache["hook_embed"] = (embed - base).expand(len(group), -1, -1).contiguous()
            cache.pop("clean_embed", None)
            traces = propagate(model, [enc] * len(group), cache, p, ("token",), False)
        if target_logit is None:
            target_logit = traces[0].target_logit  # alpha = 1
        for trace in traces:  # token scores = (e - b) . t(alpha); their mean over the points
            total += trace.levels["token"].double().cpu()
    scores = trace.levels["token"] if steps == 1 else (total / steps).float()
    return Scored(scores, target_logit=target_logit)


def _path_forward(model: Any, tokens: Int[torch.Tensor, "batch pos"], base: Float[torch.Tensor, " d_model"],
                  alphas: list[float], names: list[str]) -> dict[str, Float[torch.Tensor, "*axes"]]:
    """DPA's cache of one forward whose token embedding in row r is ``base + alphas[r] (e - base)``, and the
    input's own embedding (``clean_embed``)."""
    cache: dict[str, Float[torch.Tensor, "*axes"]] = {}  # batch first, but clean_embed [pos, d_model]
    alpha = torch.tensor(alphas, device=tokens.device).view(-1, 1, 1)

    def interpolate(x, hook):
        cache["clean_embed"] = x[0].detach().float().clone()
        return (base + alpha * (x.float() - base)).to(x.dtype)

    def keep(x, hook):
        cache[hook.name] = x.detach().float()

    model.run_with_hooks(tokens, fwd_hooks=[("hook_embed", interpolate)] + [(n, keep) for n in names],
                         return_type=None)
    return cache
