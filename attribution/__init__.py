"""Attribution engines behind one call: ``attribute(model, prompt, target, method, level)``."""

from __future__ import annotations

import importlib
import time
from typing import Any

from attribution.methods import LEVEL_AXES, METHODS, canonical
from attribution.result import AttributionResult
from workbench.errors import MethodError

__all__ = ["attribute", "AttributionResult", "METHODS", "LEVEL_AXES", "get_method", "result_for", "run_encoded"]


def get_method(name: str, level: str):
    name = canonical(name)
    if name not in METHODS:
        raise MethodError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    spec = METHODS[name]
    if level not in LEVEL_AXES:
        raise MethodError(f"unknown level {level!r}; levels: {', '.join(LEVEL_AXES)}")
    if level not in spec.levels:
        raise MethodError(f"method {name} has no {level} level; it has: {', '.join(spec.levels)}")
    module, func = spec.impl.split(":")
    return spec, getattr(importlib.import_module(module), func)


def attribute(model: Any, prompt: str | list[int], target: str | int, foil: str | int | None = None,
              method: str = "dpa", level: str = "token", **params: Any) -> AttributionResult:
    """Score tokens, heads, edges or neurons for the model's target (minus foil) logit."""
    spec, fn = get_method(method, level)
    enc = model.encode(prompt, target, foil)
    return run_encoded(model, spec.name, fn, enc, level, params, prompt if isinstance(prompt, str) else None)


def run_encoded(model: Any, method: str, fn: Any, enc: Any, level: str, params: dict[str, Any],
                prompt: str | None) -> AttributionResult:
    """One method (its name and implementation from get_method) on an encoding already made, timed."""
    started = time.perf_counter()
    scores = fn(model, enc, level, **params)
    seconds = time.perf_counter() - started
    return result_for(model, method, level, enc, scores, seconds, target_logit(model, enc), params, prompt)


def result_for(model: Any, method: str, level: str, enc: Any, scores: Any, seconds: float, logit: float,
               params: dict[str, Any], prompt: str | None) -> AttributionResult:
    """The typed result of one method's scores on one encoded prompt."""
    return AttributionResult(
        model=model.name, method=method, level=level, axes=LEVEL_AXES[level], scores=scores,
        tokens=enc.str_tokens, target=enc.target, foil=enc.foil, target_logit=logit, seconds=seconds,
        params=params, prompt=prompt,
    )


def target_logit(model: Any, enc: Any) -> float:
    logits = model.logits(enc.tokens)[0, -1]
    value = logits[enc.target_id]
    if enc.foil_id is not None:
        value = value - logits[enc.foil_id]
    return float(value)
