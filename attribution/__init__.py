"""Attribution engines behind one call: ``attribute(model, prompt, target, method, level)``."""

from __future__ import annotations

import importlib
import time
from typing import TYPE_CHECKING, Any

from attribution.methods import LEVEL_AXES, METHODS, Method, MethodSpec, Scored, as_scored, canonical
from attribution.result import AttributionResult
from workbench.errors import MethodError

if TYPE_CHECKING:
    from workbench.hooked import HookedModel
    from workbench.tokens import Encoding

__all__ = ["attribute", "attribute_levels", "AttributionResult", "METHODS", "LEVEL_AXES", "get_method",
           "result_for", "run_encoded", "Scored"]


def get_method(name: str, level: str) -> tuple[MethodSpec, Method]:
    name = canonical(name)
    if name not in METHODS:
        raise MethodError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    spec = METHODS[name]
    if level not in LEVEL_AXES:
        raise MethodError(f"unknown level {level!r}; levels: {', '.join(LEVEL_AXES)}")
    if level not in spec.levels:
        raise MethodError(f"method {name} has no {level} level; it has: {', '.join(spec.levels)}")
    return spec, _load(spec.impl)


def _load(impl: str) -> Any:
    module, func = impl.split(":")
    return getattr(importlib.import_module(module), func)


def attribute(model: HookedModel, prompt: str | list[int], target: str | int, foil: str | int | None = None,
              method: str = "dpa", level: str = "token", **params: Any) -> AttributionResult:
    """Score tokens, heads, edges or neurons for the model's target (minus foil) logit."""
    spec, fn = get_method(method, level)
    enc = model.encode(prompt, target, foil)
    return run_encoded(model, spec.name, fn, enc, level, params, prompt if isinstance(prompt, str) else None)


def attribute_levels(model: HookedModel, prompt: str | list[int], target: str | int, foil: str | int | None = None,
                     method: str = "dpa", levels: tuple[str, ...] = ("token",),
                     **params: Any) -> dict[str, AttributionResult]:
    """Several levels of one method: from one pass where the method has one (MethodSpec.one_pass; each
    result then carries that pass's time), else one call per level."""
    specs = [get_method(method, lv) for lv in levels]
    spec = specs[0][0]
    if spec.one_pass is None or len(levels) < 2:
        return {lv: attribute(model, prompt, target, foil, method=spec.name, level=lv, **params) for lv in levels}
    enc = model.encode(prompt, target, foil)
    started = time.perf_counter()
    outs = _load(spec.one_pass)(model, enc, tuple(levels), **params)
    seconds = time.perf_counter() - started
    text = prompt if isinstance(prompt, str) else None
    return {lv: result_for(model, spec.name, lv, enc, outs[lv], seconds, None, params, text) for lv in levels}


def run_encoded(model: HookedModel, method: str, fn: Method, enc: Encoding, level: str, params: dict[str, Any],
                prompt: str | None) -> AttributionResult:
    """One method (its name and implementation from get_method) on an encoding already made, timed."""
    started = time.perf_counter()
    out = fn(model, enc, level, **params)
    seconds = time.perf_counter() - started
    return result_for(model, method, level, enc, out, seconds, None, params, prompt)


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
    )


def target_logit(model: HookedModel, enc: Encoding) -> float:
    from workbench.metric import logit_diff

    return float(logit_diff(model.logits(enc.tokens)[:, -1], enc.target_id, enc.foil_id)[0])
