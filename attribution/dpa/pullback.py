"""DPA's top-down pass from any target vector at any residual point (feature-level DPA and feature graphs).

``dpa_all(keep_targets=True)`` gives the target vector of the *logit* target at every residual point.
A feature graph needs more: the pull-back of a feature's encoder direction from the feature's input hook
down to the dictionaries below it, with the MLPs that transcoders replace held fixed and a residual SAE
cutting the stream (everything below it reaches the target through its features). ``pull_back`` is the
same top-down loop as the engine's (``steps.top_down``), started at a chosen point,
for a batch of target vectors that share one prompt's frozen forward pass.

Residual points, top to bottom: ``(l, "post")`` = ``blocks.l.hook_resid_post`` (above layer l's MLP; its
``hook_mlp_out`` sees the same target), ``(l, "mid")`` = ``blocks.l.hook_resid_mid`` (above its attention,
below its MLP), and ``(-1, "post")`` = the embeddings (``blocks.0.hook_resid_pre``).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int

from attribution.dpa.linear import check_supported
from attribution.dpa.params import DPAParams
from attribution.dpa.steps import At, Cache, Point, hook_names, init_target, rank, top_down, without_grad

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


def dpa_cache(model: HookedModel, tokens: Int[torch.Tensor, "batch pos"], p: DPAParams,
              extra: Iterable[str] = ()) -> Cache:
    """One forward pass caching what the top-down pass reads plus the hooks ``extra`` (float32)."""
    check_supported(model)
    names = list(dict.fromkeys(hook_names(model, p, ()) + [model.check_hook(n) for n in extra]))
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=names)
    return {k: v.float() for k, v in cache.items()}


def logit_target(model: HookedModel, enc: Encoding,
                 cache: Cache) -> tuple[Float[torch.Tensor, "1 pos d_model"], float]:
    """The target (minus foil) vector at the top residual point, and the target logit (difference)."""
    offsets = {k: torch.zeros(1, dtype=torch.float64) for k in ("unembed_bias", "final_norm_bias")}
    t, logit = init_target(model, [enc], cache, offsets)
    return t, float(logit[0])


def pull_back(model: HookedModel, cache: Cache,
              t: Float[torch.Tensor, "batch pos d_model"], start: Point, p: DPAParams,
              frozen_mlps: Container[int] = (), lowest: Point = (-1, "post")
              ) -> Iterator[tuple[Point, Float[torch.Tensor, "batch pos d_model"]]]:
    """Yield (point, target vector at that point) from ``start`` down to ``lowest`` (both included).

    ``t`` is a batch of targets placed at ``start`` ([batch, pos, d_model]); ``cache`` is one prompt's
    (batch 1, from ``dpa_cache``). ``frozen_mlps`` is read lazily: a caller that adds layer l to it on
    seeing ``(l, "post")`` holds MLP l fixed for the rest of the pass (its output is accounted for by a
    transcoder's nodes). Stop iterating to cut the pass (a residual SAE mediates everything below it).
    """
    n = t.shape[0]
    wide = {k: v.expand(n, *v.shape[1:]) if v.shape[0] == 1 and n > 1 else v for k, v in cache.items()}
    steps = top_down(model, wide, t, p, start=start, lowest=lowest, frozen_mlps=frozen_mlps)
    for step in without_grad(steps):  # no yield inside no_grad: a cut pass would leave grad off
        if isinstance(step, At):
            yield step.point, step.t


def embedding(cache: Cache) -> Float[torch.Tensor, "1 pos d_model"]:
    """What the bottom point (-1, "post") holds: token plus positional embedding."""
    x = cache["hook_embed"]
    return x + cache["hook_pos_embed"] if "hook_pos_embed" in cache else x


def resid_hook(point: Point) -> str:
    layer, where = point
    return "blocks.0.hook_resid_pre" if layer < 0 else f"blocks.{layer}.hook_resid_{where}"


def targets_at(model: HookedModel, cache: Cache,
               t: Float[torch.Tensor, "batch pos d_model"], start: Point, points: Iterable[Point],
               p: DPAParams) -> dict[Point, Float[torch.Tensor, "batch pos d_model"]]:
    """The target vector at each of ``points`` (below ``start``), one pass, nothing held fixed."""
    wanted = set(points)
    lowest = min(wanted, key=rank)
    return {pt: v for pt, v in pull_back(model, cache, t, start, p, lowest=lowest) if pt in wanted}
