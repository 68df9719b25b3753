"""Attribution patching (Nanda 2023; Syed et al. 2023): activation x gradient, a first-order estimate of
metric(clean) - metric(patched) for every item at once, from one forward and one backward.

atp (zero ablation): score = a . dM/da, the estimated drop when the item is zeroed. token: the embedding;
head: hook_z per query position (a head's output is W_O z, so zeroing z zeroes the head); qk: the
post-softmax weight A_qk times dM/dA_qk (the query-key weight set to 0, no renormalisation); neuron: the activation.
atp_foil (counterfactual): score = (a_clean - a_corrupt) . dM/da at the clean run, the estimated drop when
the item is patched from a corrupted prompt. The corrupted prompt is ``corrupt`` if given, else the clean
prompt with the target and foil tokens swapped (IOI: "... John gave it to" <-> "... Mary gave it to").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from jaxtyping import Int

from attribution.baselines.common import check_target, grads, hook_names, layout
from attribution.methods import Scored
from core.errors import MethodError, PromptError

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


def atp_scores(model: HookedModel, enc: Encoding, level: str) -> Scored:
    check_target(enc)
    names = hook_names(model, level)
    acts, gs, value = grads(model, enc, names)
    prods = [acts[n] * gs[n] for n in names]
    if level in ("token", "head"):
        prods = [p.sum(-1) for p in prods]
    return Scored(layout(level, prods), target_logit=float(value[0]))


def corrupt_tokens(model: HookedModel, enc: Encoding,
                   corrupt: str | list[int] | None = None) -> Int[torch.Tensor, "1 pos"]:
    if corrupt is not None:
        tokens = model.to_tokens(corrupt)
        if tokens.shape != enc.tokens.shape:
            raise PromptError(f"the corrupted prompt is {tokens.shape[-1]} tokens, the clean one "
                              f"{enc.seq_len}: they must match")
        return tokens
    if enc.foil_id is None:
        raise MethodError("atp_foil needs a foil (the counterfactual answer): give --foil")
    tokens = enc.tokens.clone()
    is_t, is_f = enc.tokens == enc.target_id, enc.tokens == enc.foil_id
    if not (is_t.any() or is_f.any()):
        raise MethodError("atp_foil: the prompt contains neither the target nor the foil token, so "
                          "swapping them gives no counterfactual; pass corrupt=<prompt>")
    tokens[is_t], tokens[is_f] = enc.foil_id, enc.target_id
    return tokens


def atp_foil_scores(model: HookedModel, enc: Encoding, level: str, corrupt: str | list[int] | None = None) -> Scored:
    check_target(enc)
    names = hook_names(model, level)
    corrupted = corrupt_tokens(model, enc, corrupt)
    with torch.no_grad():
        _, cache = model.run_with_cache(corrupted, names_filter=names, return_type=None)
    acts, gs, value = grads(model, enc, names)
    prods = [(acts[n] - cache[n]) * gs[n] for n in names]
    if level in ("token", "head"):
        prods = [p.sum(-1) for p in prods]
    return Scored(layout(level, prods), target_logit=float(value[0]))
