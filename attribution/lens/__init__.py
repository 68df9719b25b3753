"""Lenses: the residual stream at every layer and position read out as next-token distributions.

- logit lens (``logit.py``): the final norm and the unembedding applied to each layer's residual.
- tuned lens (``tuned.py``, Belrose et al. 2023): a learned affine translator per layer first, h + h W_l + b_l,
  trained to minimise KL(final distribution || lens distribution); ``train.py`` builds it.

Both kinds share one signature, ``readout(model, resid) -> logits`` over a residual stack
[layer, batch, pos, d_model] (rows: the embedding, then every block's output; see residual_stack).
``lens(model, prompt, kind, target, top_k)`` returns a LensResult.
"""

from __future__ import annotations

import importlib
import time
from typing import TYPE_CHECKING, Any

from attribution.lens.result import LensResult, layer_labels, read
from attribution.lens.tuned import TunedLens
from core.errors import MethodError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel

__all__ = ["LENSES", "LensResult", "lens", "lens_logits", "residual_stack", "layer_labels"]

LENSES: dict[str, str] = {"logit": "attribution.lens.logit:readout", "tuned": "attribution.lens.tuned:readout"}


def check_kind(kind: str) -> str:
    if kind not in LENSES:
        raise MethodError(f"unknown lens kind {kind!r}; kinds: {', '.join(LENSES)}")
    return kind


def residual_stack(model: HookedModel, tokens: Any) -> Float[torch.Tensor, "layer batch pos d_model"]:
    """The residual stream before block 0 and after every block, [n_layers + 1, batch, pos, d_model]."""
    import torch

    check_readable(model)
    n = model.arch.n_layers
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(n)]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=names, return_type=None)
    return torch.stack([cache[name] for name in names])


def check_readable(model: HookedModel) -> None:
    """Lenses need a token vocabulary and an unembedding (not a vision or regression model)."""
    name = getattr(model, "name", type(model).__name__)
    if getattr(model, "kind", None) == "vit" or type(model).__name__ == "HookedViT":
        raise MethodError(f"{name} is a vision model: the logit and tuned lenses are not for vision models "
                          "(they read residuals through a token unembedding)")
    from core.models.hooked import require

    require(model, "lens")
    if getattr(model, "W_U", None) is None:
        raise MethodError(f"{name} has no unembedding to read a lens through")


def lens_logits(model: HookedModel, resid: Float[torch.Tensor, "layer batch pos d_model"],
                kind: str = "logit") -> Float[torch.Tensor, "layer batch pos vocab"]:
    """Logits of a residual stack through the lens ``kind``."""
    module, func = LENSES[check_kind(kind)].split(":")
    return getattr(importlib.import_module(module), func)(model, resid)


def lens(model: HookedModel, prompt: str | list[int], kind: str = "logit", target: str | int | None = None,
         top_k: int = 5, position: int | None = None) -> LensResult:
    """The lens ``kind`` on one prompt: each layer's top-k tokens and probabilities at every position, and
    the target's rank and probability per layer at ``position`` (default the last)."""
    started = time.perf_counter()
    check_kind(kind)
    check_readable(model)
    translator = None
    if kind == "tuned":  # fail on a model without a trained lens before running anything
        translator = TunedLens.for_model(model)
    enc = model.encode(prompt, target)
    resid = residual_stack(model, enc.tokens)[:, 0]  # [layer, pos, d_model]
    if translator is not None:
        resid = translator.translate(resid)
    res = read(model, kind, enc, resid, top_k, position, prompt if isinstance(prompt, str) else None)
    res.seconds = time.perf_counter() - started
    return res
