"""Method variants on the benchmark's method list: ``NAME`` or ``NAME:key=value:key=value`` (e.g.
``dpa:w_v=0.7:w_q=0.1``), the method of the edge-method table with some parameters set. A variant is one
more column of the leaderboard under that text, so a grid of settings is judged in one run without a line
of the table per setting. The colon keeps a variant free of the commas that separate --methods.
"""

from __future__ import annotations

from typing import Any

from circuits.edges import EDGE_METHODS
from core.errors import MethodError


def split_variant(spec: str) -> tuple[str, dict[str, Any]]:
    """(method name, parameters) of a variant, each value converted to its default's type and checked
    (``EdgeMethod.check_params``); a bad spec is a MethodError (one line). "random" takes no parameters."""
    name, *pairs = spec.split(":")
    if not pairs:
        return name, {}
    if name not in EDGE_METHODS:
        raise MethodError(f"method variant {spec!r}: {name!r} is not an edge method with parameters")
    method = EDGE_METHODS[name]
    params: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key:
            raise MethodError(f"method variant {spec!r}: write NAME:key=value:key=value (got {pair!r})")
        if key not in method.params:
            raise MethodError(f"method variant {spec!r}: {name} has no parameter {key}; parameters: "
                              f"{', '.join(method.params) or 'none'}")
        params[key] = _convert(spec, key, text, method.params[key])
    method.check_params(params)
    return name, params


def _convert(spec: str, key: str, text: str, default: Any) -> Any:
    if isinstance(default, str):
        return text
    try:
        if isinstance(default, bool):
            return {"true": True, "false": False}[text.lower()]
        if isinstance(default, int):
            return int(text)
        return float(text)
    except (KeyError, ValueError):
        raise MethodError(f"method variant {spec!r}: {key}={text!r} is not a {type(default).__name__}") from None
