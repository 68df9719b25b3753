"""Edge scoring methods: one signature, one result layout (``circuits.graph`` score layout).

Every method is ``score(model, graph, prompts, refs, on_step=None, **params) -> scores [edge]``: the
estimated drop of the metric (averaged over the prompt set) when that edge alone is ablated to its
reference, so a positive score means the edge supports the target. ``EDGE_METHODS`` declares each
method's parameters and cost, as Captum methods declare their capabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from workbench.errors import MethodError


@dataclass(frozen=True)
class EdgeMethod:
    name: str
    module: str
    summary: str
    params: dict[str, Any] = field(default_factory=dict)  # name -> default
    exact: bool = False  # the ground truth (one ablated forward per edge), not an estimate

    def scorer(self) -> Callable[..., Any]:
        return import_module(self.module).score

    def check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            have = ", ".join(self.params) or "none"
            raise MethodError(f"{self.name} has no parameter {', '.join(unknown)}; parameters: {have}")
        for key, value in params.items():
            _check_param(self.name, key, value, self.params[key])
        return {**self.params, **params}


# Whole-number parameters and their smallest value (steps of an integral, copies per forward: at least 1).
_LEAST = {"steps": 1, "copies": 1, "sample": 0, "seed": 0}
_MOST = {"steps": 10_000, "copies": 1024}


def _check_param(method: str, key: str, value: Any, default: Any) -> None:
    """A parameter's value has its default's type (a whole number where the default is one, a number where it
    is a float, text where it is text) and its bounds; MethodError (one line) otherwise."""
    import math

    if isinstance(default, bool) or isinstance(default, str):
        ok = type(value) is type(default)
        want = "true or false" if isinstance(default, bool) else "text"
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and _LEAST.get(key, -math.inf) <= value <= _MOST.get(key, math.inf)
        want = f"a whole number >= {_LEAST.get(key, 0)}" + (f" and <= {_MOST[key]}" if key in _MOST else "")
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        want = "a finite number"
    if not ok:
        raise MethodError(f"{method} parameter {key}={value!r} must be {want}")


EDGE_METHODS: dict[str, EdgeMethod] = {m.name: m for m in (
    EdgeMethod("eap", "circuits.edges.eap",
               "edge attribution patching: (clean - reference) output of the sender . gradient at the receiver input"),
    EdgeMethod("eap_ig", "circuits.edges.eap_ig",
               "EAP with integrated gradients along the reference -> clean input path (Hanna et al. 2024)",
               {"steps": 5}),
    EdgeMethod("dpa", "circuits.edges.dpa",
               "Dual Path Attribution: (clean - reference) output of the sender . DPA target at the receiver input",
               {"w_q": 0.25, "w_k": 0.25, "w_v": 0.5, "w_gate": 0.5, "w_up": 0.5, "act_mode": "ratio"}),
    EdgeMethod("activation_patching", "circuits.edges.patching",
               "path patching: ablate one edge at a time and measure the metric (exact, one forward per edge)",
               {"sample": 0, "seed": 0, "copies": 8}, exact=True),
)}


def get_method(name: str) -> EdgeMethod:
    if name not in EDGE_METHODS:
        raise MethodError(f"unknown edge method {name!r}; choose one of {', '.join(EDGE_METHODS)}")
    return EDGE_METHODS[name]
