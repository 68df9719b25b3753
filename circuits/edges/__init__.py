"""Edge scoring methods: one signature, one result layout (``circuits.graph`` score layout).

Every method is ``score(model, graph, prompts, refs, on_step=None, **params) -> scores [edge]``: the
estimated drop of the metric (averaged over the prompt set) when that edge alone is ablated to its
reference, so a positive score means the edge supports the target. ``EDGE_METHODS`` declares each
method's module and function, parameters, cost and app label: it is the edge level of the one method table,
``attribution.methods.TABLE`` (where DPA's edge level sits beside its token, head and image-patch levels); a
new edge method is one module and one entry there (discovery, its estimate, the CLI and the Circuits page read
everything from it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from attribution.methods import EDGE, view
from core.errors import MethodError


@dataclass(frozen=True)
class EdgeMethod:
    """One edge method. cost: forward-equivalent passes per prompt (a backward counts as two), plus
    ``cost_per[param]`` passes per unit of that parameter (eap_ig: 3 per integration step); discover.estimate
    scales one measured forward by it. label: the method's name in the app."""

    name: str
    module: str
    summary: str
    params: dict[str, Any] = field(default_factory=dict)  # name -> default
    exact: bool = False  # the ground truth (one ablated forward per edge), not an estimate
    cost: float = 1.0
    cost_per: dict[str, float] = field(default_factory=dict)
    label: str = ""
    function: str = "score"
    per_layer: bool = False  # cost_per counts once per layer moved (embedding, each attention layer and MLP)
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # text parameter -> its allowed values
    most: dict[str, int] = field(default_factory=dict)  # whole-number parameter -> its largest value, over _MOST

    def scorer(self) -> Callable[..., Any]:
        return getattr(import_module(self.module), self.function)

    def passes(self, params: dict[str, Any] | None = None, layers: int = 1) -> float:
        """Forward-equivalent passes per prompt with these parameters (defaults for those not given);
        layers: the graph's layer count (embedding, attention layers, MLPs) for a ``per_layer`` method."""
        p = {**self.params, **(params or {})}
        per = sum(float(p.get(k, 0)) * v for k, v in self.cost_per.items())
        return self.cost + per * (layers if self.per_layer else 1)

    @property
    def title(self) -> str:
        return self.label or self.name

    def check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            have = ", ".join(self.params) or "none"
            raise MethodError(f"{self.name} has no parameter {', '.join(unknown)}; parameters: {have}")
        for key, value in params.items():
            _check_param(self.name, key, value, self.params[key], self.most.get(key))
            allowed = self.choices.get(key)
            if allowed is not None and value not in allowed:  # refused here, before any model or prompt loads
                raise MethodError(f"{self.name} parameter {key}={value!r} must be one of {', '.join(allowed)}")
        return {**self.params, **params}


# Whole-number parameters and their smallest value (steps of an integral, copies per forward: at least 1).
_LEAST = {"steps": 1, "copies": 1, "sample": 0, "seed": 0}
_MOST = {"steps": 10_000, "copies": 1024, "sample": 1_000_000, "seed": 2**32 - 1}  # as core/options.py BOUNDS


def _check_param(method: str, key: str, value: Any, default: Any, most: int | None = None) -> None:
    """A parameter's value has its default's type (a whole number where the default is one, a number where it
    is a float, text where it is text) and its bounds (``most``: the method's own upper bound); MethodError
    (one line) otherwise."""
    import math

    bounds = {**_MOST, key: most} if most is not None else _MOST

    if isinstance(default, bool) or isinstance(default, str):
        ok = type(value) is type(default)
        want = "true or false" if isinstance(default, bool) else "text"
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and _LEAST.get(key, -math.inf) <= value <= bounds.get(key, math.inf)
        want = f"a whole number >= {_LEAST.get(key, 0)}" + (f" and <= {bounds[key]}" if key in bounds else "")
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        want = "a finite number"
    if not ok:
        raise MethodError(f"{method} parameter {key}={value!r} must be {want}")


def _edge_method(spec: Any) -> EdgeMethod:
    """The edge level of one method of the table (attribution.methods.TABLE) as an EdgeMethod."""
    module, function = spec.impls["edge"].split(":")
    e = spec.edge
    return EdgeMethod(spec.name, module, e.summary, dict(e.params), e.exact, e.cost, dict(e.cost_per), e.label,
                      function, e.per_layer, dict(e.choices), dict(e.most))


# every method of the one table with an edge level (attribution.methods declares them), in its listed order
EDGE_METHODS: dict[str, EdgeMethod] = {name: _edge_method(spec) for name, spec in view(EDGE).items()}


def method_help() -> str:
    """The CLI's help for --method and --param, from the table: every method, then each one's parameters."""
    params = "; ".join(f"{m.name} " + ", ".join(f"{k}={v}" for k, v in m.params.items())
                       for m in EDGE_METHODS.values() if m.params)
    return f"{', '.join(EDGE_METHODS)} (parameters, --param key=value: {params})."


def get_method(name: str) -> EdgeMethod:
    if name not in EDGE_METHODS:
        raise MethodError(f"unknown edge method {name!r}; choose one of {', '.join(EDGE_METHODS)}")
    return EDGE_METHODS[name]
