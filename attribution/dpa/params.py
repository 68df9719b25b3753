"""DPA's path weights and options, checked once so every entry point refuses the same bad input."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from core.errors import MethodError

ACT_MODES = ("ratio", "derivative")
NORM_MODES = ("frozen", "aware")


@dataclass(frozen=True)
class DPAParams:
    """Path weights (spec defaults) and the linearisation of non-SiLU activations.

    w_q, w_k: query/key (control) paths; w_v: value (content) path; w_gate, w_up: SwiGLU paths.
    A non-gated MLP (GELU/ReLU) has one content path with weight ``w_gate + w_up`` (1 by default).
    act_mode: "ratio" freezes act(g)/g (an exact linearisation, so completeness holds) or
    "derivative" uses act'(g) (a local gradient). For SiLU gates "ratio" is sigmoid(g), as in the paper.
    norm: "frozen" holds each norm's scale fixed (the paper); "aware" carries the target through the
    scale's dependence on the stream too (the norm's exact Jacobian transpose, ``linear.norm_back``) at
    every block and final norm (q/k norms stay frozen).
    max_gib: refuse a qk (query-key) tensor larger than this (the command says which levels fit instead).
    """

    w_q: float = 0.25
    w_k: float = 0.25
    w_v: float = 0.5
    w_gate: float = 0.5
    w_up: float = 0.5
    act_mode: str = "ratio"
    norm: str = "frozen"
    max_gib: float = 16.0

    @classmethod
    def from_kwargs(cls, **params: Any) -> DPAParams:
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise MethodError(f"dpa has no parameter {', '.join(unknown)}; parameters: {', '.join(known)}")
        clean: dict[str, Any] = {}
        for key, value in params.items():
            choices = {"act_mode": ACT_MODES, "norm": NORM_MODES}.get(key)
            if choices is not None:
                if value not in choices:
                    raise MethodError(f"{key} must be one of {', '.join(choices)} (got {value!r})")
                clean[key] = value
                continue
            try:
                clean[key] = float(value)
            except (TypeError, ValueError):
                raise MethodError(f"dpa parameter {key} must be a number (got {value!r})") from None
        if clean.get("max_gib", 1.0) <= 0:
            raise MethodError("max_gib must be positive")
        return cls(**clean)

    @property
    def w_mlp(self) -> float:
        return self.w_gate + self.w_up

    @property
    def norm_aware(self) -> bool:
        return self.norm == "aware"

    @property
    def uses_qk(self) -> bool:
        return self.w_q != 0.0 or self.w_k != 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COMPLETE = {"w_q": 0.0, "w_k": 0.0, "w_v": 1.0, "w_gate": 0.5, "w_up": 0.5}
"""Weights under which every path is an exact linearisation (the completeness check)."""
