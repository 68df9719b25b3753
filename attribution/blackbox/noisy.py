"""Noisy oracles and the error-versus-noise sweep.

A noisy oracle answers f(X) + s * eps with eps ~ N(0, 1) drawn afresh for every query. The
sweep runs the same recovery (same random bases) for several s and records the relative
parameter error; see the package docstring for when that error stays within K * s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attribution.blackbox.canonical import canonicalize, compare_heads
from attribution.blackbox.oracle import MHAParams, Oracle, mha_value
from attribution.blackbox.recovery import recover
from core.errors import WorkbenchError


def noisy_mha_oracle(params: MHAParams, noise: float, *, seed: int = 0) -> Oracle:
    """float64 evaluation plus Gaussian output noise of scale ``noise``."""
    if not noise >= 0:
        raise WorkbenchError(f"noise must be >= 0 (got {noise})")
    rng = np.random.default_rng(seed + 7919)

    def fn(X: np.ndarray) -> float:
        return mha_value(params, X, exact=False) + noise * float(rng.standard_normal())

    return Oracle(fn, params.d, exact=False, noise=noise, name=f"random-mha+noise({noise:g})")


@dataclass
class NoiseSweep:
    """Relative recovery error per noise scale (axes: noise)."""

    noise: list[float]
    rel_error_W: list[float]
    rel_error_v: list[float]
    heads_recovered: list[int]
    queries: list[int]
    d: int
    heads: int
    oversample: int
    outcome: list[str] | None = None  # per s: "ok", "unreliable", or the error's class name
    error_estimate: list[float] | None = None  # per s: the recovery's own estimate (no truth used)

    def reliable_up_to(self, tol: float = 1e-2) -> float:
        """The largest s of the grid up to which every run recovered the true head count with both
        relative errors below ``tol`` (0.0 when even the smallest s fails)."""
        best = 0.0
        for s, w, v, h in sorted(zip(self.noise, self.rel_error_W, self.rel_error_v, self.heads_recovered,
                                     strict=False)):
            if not (h == self.heads and max(w, v) < tol):
                break
            best = s
        return best

    def slope(self) -> float:
        """Log-log slope of the error against s over the finite, positive points (1 = linear)."""
        pts = [(s, max(w, v)) for s, w, v in zip(self.noise, self.rel_error_W, self.rel_error_v, strict=False)
               if s > 0 and np.isfinite(w) and np.isfinite(v) and max(w, v) > 0]
        if len(pts) < 2:
            return float("nan")
        x, y = np.log10([p[0] for p in pts]), np.log10([p[1] for p in pts])
        return float(np.polyfit(x, y, 1)[0])

    def ratio(self) -> list[float]:
        """error / s: bounded by a constant K where the linear regime holds."""
        return [max(w, v) / s if s > 0 else float("nan")
                for s, w, v in zip(self.noise, self.rel_error_W, self.rel_error_v, strict=False)]

    def table(self):
        import pandas as pd

        n = len(self.noise)
        return pd.DataFrame({"noise": self.noise, "rel_error_W": self.rel_error_W,
                             "rel_error_v": self.rel_error_v, "error_over_noise": self.ratio(),
                             "heads_recovered": self.heads_recovered, "queries": self.queries,
                             "error_estimate": self.error_estimate or [float("nan")] * n,
                             "outcome": self.outcome or [""] * n})

    def plot(self):
        import plotly.graph_objects as go

        fig = go.Figure()
        xs = [s for s in self.noise if s > 0]
        for name, ys in (("W", self.rel_error_W), ("v", self.rel_error_v)):
            pts = [(s, e) for s, e in zip(self.noise, ys, strict=False) if s > 0 and np.isfinite(e)]
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                     name=f"max relative error of {name}"))
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=xs, mode="lines", name="error = s", line={"dash": "dot"}))
        # failed recoveries (infinite error) would vanish from a log plot: mark them on the top edge
        outcomes = self.outcome or [""] * len(self.noise)
        failed = [(s, o) for s, o, eW, ev in zip(self.noise, outcomes, self.rel_error_W, self.rel_error_v,
                                                  strict=False) if s > 0 and not (np.isfinite(eW) and np.isfinite(ev))]
        if failed:
            finite = [e for e in (*self.rel_error_W, *self.rel_error_v, *xs) if np.isfinite(e) and e > 0]
            top = max(finite, default=1.0) * 10
            fig.add_trace(go.Scatter(x=[f[0] for f in failed], y=[top] * len(failed), mode="markers+text",
                                     marker={"symbol": "x", "size": 12, "color": "crimson"},
                                     text=["failed"] * len(failed), textposition="bottom center",
                                     customdata=[str(f[1]) for f in failed],
                                     hovertemplate="s %{x:.1e}: recovery failed (error infinite)<br>"
                                                   "%{customdata}<extra></extra>",
                                     name="failed: error infinite"))
        fig.update_layout(title=f"Recovery error vs oracle noise (d={self.d}, H={self.heads}, "
                                f"oversample={self.oversample}; slope {self.slope():.2f})",
                          xaxis={"type": "log", "title": "noise scale s"},
                          yaxis={"type": "log", "title": "max relative parameter error"})
        return fig

    def to_json(self) -> dict[str, Any]:
        return {"noise": self.noise, "rel_error_W": self.rel_error_W, "rel_error_v": self.rel_error_v,
                "heads_recovered": self.heads_recovered, "queries": self.queries,
                "error_estimate": self.error_estimate, "outcome": self.outcome,
                "reliable_up_to": self.reliable_up_to(), "loglog_slope": self.slope(), "axes": {"*": ["noise"]}}


def noise_sweep(params: MHAParams, noises: list[float], *, seed: int = 0, oversample: int = 0,
                dps: int = 30) -> NoiseSweep:
    """Recover at each noise scale; a failed recovery (s too large) records an infinite error and, in
    ``outcome``, the error's class (NoiseBreakdownError, HeadCountError, ...)."""
    truth = canonicalize(params)
    eW, ev, hs, qs, outcome, est = [], [], [], [], [], []
    for s in noises:
        oracle = noisy_mha_oracle(params, s, seed=seed)
        try:
            rec = recover(oracle, params.heads, seed=seed, oversample=oversample, dps=dps)
            cmp = compare_heads(truth, rec.W, rec.v)
            eW.append(cmp.max_rel_error_W)
            ev.append(cmp.max_rel_error_v)
            hs.append(rec.heads)
            est.append(rec.error_estimate)
            outcome.append("ok" if rec.reliable and rec.heads == truth.heads else
                           "unreliable" if rec.heads == truth.heads else "heads hidden")
        except WorkbenchError as exc:
            eW.append(float("inf"))
            ev.append(float("inf"))
            hs.append(0)
            est.append(float("inf"))
            outcome.append(type(exc).__name__)
        qs.append(oracle.queries)
    return NoiseSweep(list(map(float, noises)), eW, ev, hs, qs, params.d, params.heads, oversample,
                      outcome, est)
