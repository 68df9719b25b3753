"""Attribution engines behind one call: ``attribute(model, prompt, target, method, level)``."""

from __future__ import annotations

import importlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from attribution.methods import (
    LEVEL_AXES,
    METHODS,
    Method,
    MethodSpec,
    Scored,
    as_scored,
    canonical,
    check_prompt_params,
    prompt_level,
)
from attribution.result import TOKEN_AXES, AttributionResult
from core.errors import MethodError, RangeError, TokenError

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

__all__ = ["attribute", "attribute_levels", "AttributionResult", "METHODS", "LEVEL_AXES", "get_method",
           "result_for", "run_encoded", "Scored", "encode_at"]


def get_method(name: str, level: str) -> tuple[MethodSpec, Method]:
    """The method's entry (its prompt levels: the table's view METHODS) and its implementation at ``level``
    ("edge", the query-key level's old name, is "qk")."""
    name = canonical(name)
    if name not in METHODS:
        raise MethodError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    spec = METHODS[name]
    level = prompt_level(level)
    if level not in LEVEL_AXES:
        raise MethodError(f"unknown level {level!r}; levels: {', '.join(LEVEL_AXES)}")
    if level not in spec.levels:
        raise MethodError(f"method {name} has no {level} level; it has: {', '.join(spec.levels)}")
    return spec, _load(spec.impls[level])


def _load(impl: str) -> Any:
    module, func = impl.split(":")
    return getattr(importlib.import_module(module), func)


def attribute(model: HookedModel, prompt: str | list[int], target: str | int | None = None,
              foil: str | int | None = None, method: str = "dpa", level: str = "token", position: int | None = None,
              **params: Any) -> AttributionResult:
    """Score tokens, heads, query-key pairs or neurons for the model's target (minus foil) logit.

    position: the position whose next-token prediction is explained (negative counts from the end; None is
    the last). Without a target, a position before the last explains the prompt's own next token there;
    a position outside the prompt is a RangeError. level "edge" (the query-key level's old name) is "qk"."""
    level = prompt_level(level)
    spec, fn = get_method(method, level)
    check_prompt_params(spec.name, params)
    enc = encode_at(model, prompt, target, foil, position)
    return run_encoded(model, spec.name, fn, enc, level, params, prompt if isinstance(prompt, str) else None)


def encode_at(model: HookedModel, prompt: str | list[int], target: str | int | None, foil: str | int | None,
              position: int | None) -> Encoding:
    """The prompt's encoding with ``position`` resolved to an index from the start (None stays None: the
    last). The default target at a position before the last is the token that follows it in the prompt."""
    if not hasattr(model, "encode"):  # a vision model has no tokens to encode

        raise MethodError(f"{getattr(model, 'name', type(model).__name__)} is a vision model: this needs a language "
                          "model (a text prompt, a target token)")
    enc = model.encode(prompt, target, foil)
    if position is None:
        return enc
    n = enc.seq_len
    if isinstance(position, bool) or not isinstance(position, int) or not -n <= position < n:
        raise RangeError(f"position {position} out of range: the prompt has {n} tokens "
                         f"(valid {-n}..{n - 1}, negative counts from the end)")
    enc.position = position % n
    if target is None and enc.position < n - 1:
        enc.target_id = int(enc.tokens[0, enc.position + 1])
        enc.target = enc.str_tokens[enc.position + 1]
        if enc.target_id == enc.foil_id:
            raise TokenError(f"foil {foil!r} is the token that follows position {enc.position} (the target)")
    return enc


def attribute_levels(model: HookedModel, prompt: str | list[int], target: str | int | None = None,
                     foil: str | int | None = None, method: str = "dpa", levels: tuple[str, ...] = ("token",),
                     position: int | None = None, **params: Any) -> dict[str, AttributionResult]:
    """Several levels of one method: from one pass where the method has one (MethodSpec.one_pass; each
    result then carries that pass's time), else one call per level."""
    levels = tuple(prompt_level(lv) for lv in levels)
    specs = [get_method(method, lv) for lv in levels]
    spec = specs[0][0]
    check_prompt_params(spec.name, params)
    if spec.one_pass is None or len(levels) < 2:
        return {lv: attribute(model, prompt, target, foil, method=spec.name, level=lv, position=position, **params)
                for lv in levels}
    enc = encode_at(model, prompt, target, foil, position)
    from core.models.hooked import require

    require(model, spec.name)
    started = time.perf_counter()
    outs = _load(spec.one_pass)(model, *_for_method(spec, enc), tuple(levels), **params)
    seconds = time.perf_counter() - started
    text = prompt if isinstance(prompt, str) else None
    return {lv: result_for(model, spec.name, lv, enc, _padded(outs[lv], lv, enc), seconds, None, params, text)
            for lv in levels}


def run_encoded(model: HookedModel, method: str, fn: Method, enc: Encoding, level: str, params: dict[str, Any],
                prompt: str | None) -> AttributionResult:
    """One method (its name and implementation from get_method) on an encoding already made, timed."""
    from core.models.hooked import require

    level = prompt_level(level)
    require(model, canonical(method))  # one line naming the method and the backend, where it does not run
    started = time.perf_counter()
    out = fn(model, *_for_method(METHODS[canonical(method)], enc), level, **params)
    seconds = time.perf_counter() - started
    return result_for(model, method, level, enc, _padded(out, level, enc), seconds, None, params, prompt)


def _for_method(spec: MethodSpec, enc: Encoding) -> tuple[Encoding]:
    """The encoding a method sees: as is for methods that read Encoding.position (and when no position is
    set), else the prompt cut after the position, so that position is the method's last one."""
    if enc.position is None or spec.position or enc.position == enc.seq_len - 1:
        return (enc,)
    keep = enc.position + 1
    return (replace(enc, tokens=enc.tokens[:, :keep], str_tokens=enc.str_tokens[:keep], position=None),)


def _padded(out: Any, level: str, enc: Encoding) -> Any:
    """A cut prompt's scores with zeros for the positions after the explained one: under causal attention
    they cannot affect it, so zero is their exact share."""
    scored = as_scored(out)
    s = scored.scores
    n = enc.seq_len
    pads = [(ax, i) for i, ax in enumerate(LEVEL_AXES[level]) if ax in TOKEN_AXES and s.shape[i] < n]
    if not pads:
        return out
    import torch

    for _, i in pads:
        shape = list(s.shape)
        shape[i] = n - s.shape[i]
        s = torch.cat([s, s.new_zeros(shape)], dim=i)
    return replace(scored, scores=s)


def result_for(model: HookedModel, method: str, level: str, enc: Encoding, scores: Any, seconds: float,
               logit: float | None, params: dict[str, Any], prompt: str | None) -> AttributionResult:
    """The typed result of one method's output (scores, or a Scored) on one encoded prompt. The target
    logit comes from ``logit``, else from the method's own forward, else from one more forward."""
    out = as_scored(scores)
    if logit is None:
        logit = out.target_logit if out.target_logit is not None else target_logit(model, enc)
    return AttributionResult(
        model=model.name, method=method, level=level, axes=LEVEL_AXES[level], scores=out.scores,
        tokens=enc.str_tokens, target=enc.target, foil=enc.foil, target_logit=logit, seconds=seconds,
        params=params, prompt=prompt, baseline_logit=out.baseline_logit, convergence_delta=out.convergence_delta,
        position=enc.position,
    )


def target_logit(model: HookedModel, enc: Encoding) -> float:
    from core.metric import logit_diff

    return float(logit_diff(model.logits(enc.tokens)[:, enc.query], enc.target_id, enc.foil_id)[0])
