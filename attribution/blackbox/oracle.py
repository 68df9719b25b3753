"""Value oracles: a black box from a token sequence (N x d) to one scalar at the last token.

``Oracle`` wraps any such function, validates what goes in and out (shape, finiteness) and
counts the queries and the longest query, which is the budget the recovery is judged by.
``random_mha`` builds the reference model of the spec,

    f(X) = sum_h v_h . (X^T softmax(X W_h x_N)),

with optional merged heads (equal W) and zero heads (v = 0). Its oracle is *exact*: it
evaluates in mpmath at ``dps`` digits, so the recovery can interpolate at that precision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mpmath
import numpy as np

from core.errors import WorkbenchError

if TYPE_CHECKING:
    from jaxtyping import Float, Shaped


class OracleError(WorkbenchError):
    """An oracle that answers with NaN/inf or with something that is not one scalar."""


def check_dims(d: int, heads: int, bound: int | None = None) -> None:
    """Reject dimensions the algorithm cannot use, with a one-line reason."""
    if int(d) < 1:
        raise WorkbenchError(f"d must be >= 1 (got {d})")
    if int(heads) < 1:
        raise WorkbenchError(f"heads must be >= 1 (got {heads})")
    if bound is not None and int(bound) < int(heads):
        raise WorkbenchError(f"bound H0={bound} is below the number of heads H={heads}")


class Oracle:
    """Counts and validates value queries to ``fn``.

    ``fn(X)`` gets an (N, d) array (float64, or object dtype of mpf when ``exact``) and returns a
    scalar. ``batch_fn(list_of_X)``, when given, answers several same-length queries at once (each
    still counts as one query). ``noise`` is the known output-noise scale (0 for exact oracles).
    """

    def __init__(self, fn: Callable[[Shaped[np.ndarray, "pos d"]], Any], d: int, *, exact: bool = False,
                 noise: float = 0.0, name: str = "oracle",
                 batch_fn: Callable[[list[Shaped[np.ndarray, "pos d"]]], Sequence[Any]] | None = None) -> None:
        if int(d) < 1:
            raise WorkbenchError(f"d must be >= 1 (got {d})")
        self.fn, self.batch_fn, self.d = fn, batch_fn, int(d)
        self.exact, self.noise, self.name = exact, float(noise), name
        self.queries = 0
        self.max_length = 0

    def reset(self) -> None:
        self.queries = 0
        self.max_length = 0

    def _check_in(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=object if self.exact else np.float64)
        if X.ndim != 2 or X.shape[1] != self.d or X.shape[0] < 1:
            raise OracleError(f"a query must be an (N, {self.d}) token array with N >= 1, got {X.shape}")
        self.queries += 1
        self.max_length = max(self.max_length, X.shape[0])
        return X

    def _check_out(self, y: Any) -> Any:
        if isinstance(y, (mpmath.mpf, float, int, np.floating, np.integer)):
            val = y
        else:
            arr = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y, dtype=object)
            if arr.shape not in ((), (1,)):
                raise OracleError(f"oracle {self.name!r} returned shape {arr.shape}, expected one scalar")
            val = arr.reshape(()).item()
            val = val.item() if hasattr(val, "item") else val
        try:
            ok = mpmath.isfinite(mpmath.mpf(val))
        except (TypeError, ValueError):
            raise OracleError(f"oracle {self.name!r} returned a non-number: {val!r}") from None
        if not ok:
            raise OracleError(f"oracle {self.name!r} returned a non-finite value ({val})")
        return mpmath.mpf(val) if self.exact else float(val)

    def __call__(self, X: Shaped[np.ndarray, "pos d"]) -> Any:
        return self._check_out(self.fn(self._check_in(X)))

    def batch(self, Xs: list[Shaped[np.ndarray, "pos d"]]) -> list[Any]:
        Xs = [self._check_in(X) for X in Xs]
        if self.batch_fn is None:
            return [self._check_out(self.fn(X)) for X in Xs]
        ys = list(self.batch_fn(Xs))
        if len(ys) != len(Xs):
            raise OracleError(f"oracle {self.name!r} answered {len(ys)} values for {len(Xs)} queries")
        return [self._check_out(y) for y in ys]


@dataclass
class MHAParams:
    """Ground truth for a multi-head attention oracle: W (H, d, d) and v (H, d), float64."""

    W: Float[np.ndarray, "head d d"]
    v: Float[np.ndarray, "head d"]

    @property
    def heads(self) -> int:
        return int(self.W.shape[0])

    @property
    def d(self) -> int:
        return int(self.W.shape[1])


def random_mha(d: int, heads: int, *, seed: int = 0, w_scale: float = 1.0, v_scale: float = 1.0,
               merged: int = 0, zero: int = 0) -> MHAParams:
    """Random heads. ``merged`` extra heads copy head 0's W; ``zero`` heads get v = 0.

    W entries ~ N(0, w_scale^2), so u^T W q = O(w_scale) for unit tokens u, q.
    """
    if merged < 0 or zero < 0 or 1 + merged + zero > heads:
        raise WorkbenchError(f"merged={merged} and zero={zero} must leave at least one ordinary head")
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((heads, d, d)) * w_scale
    v = rng.standard_normal((heads, d)) * v_scale
    for h in range(1, 1 + merged):
        W[h] = W[0]
    for h in range(heads - zero, heads):
        v[h] = 0.0
    return MHAParams(W=W, v=v)


def mha_value(params: MHAParams, X: Shaped[np.ndarray, "pos d"], exact: bool) -> Any:
    """f(X) for the spec's model; in mpmath when ``exact`` (X then holds mpf entries)."""
    if not exact:
        X = np.asarray(X, dtype=np.float64)
        total = 0.0
        for W, v in zip(params.W, params.v, strict=False):
            s = X @ (W @ X[-1])
            a = np.exp(s - s.max())
            total += float(v @ (X.T @ (a / a.sum())))
        return total
    rows = [[mpmath.mpf(x) for x in row] for row in np.asarray(X, dtype=object)]
    q = rows[-1]
    total = mpmath.mpf(0)
    for W, v in zip(params.W, params.v, strict=False):
        Wq = [mpmath.fsum(mpmath.mpf(W[i, j]) * q[j] for j in range(len(q))) for i in range(len(q))]
        s = [mpmath.fsum(x[i] * Wq[i] for i in range(len(q))) for x in rows]
        smax = max(s)
        e = [mpmath.exp(si - smax) for si in s]
        z = mpmath.fsum(e)
        vx = [mpmath.fsum(mpmath.mpf(v[i]) * x[i] for i in range(len(q))) for x in rows]
        total += mpmath.fsum(ei * vi for ei, vi in zip(e, vx, strict=False)) / z
    return total


def mha_oracle(params: MHAParams, *, exact: bool = True, name: str = "random-mha") -> Oracle:
    return Oracle(lambda X: mha_value(params, X, exact), params.d, exact=exact, name=name)
