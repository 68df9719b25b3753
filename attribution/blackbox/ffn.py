"""Extension: one-layer transformer, multi-head attention followed by a bias-free ReLU FFN.

    z(X) = sum_h M_h^T a_h(X),  a_h(X) = X^T softmax(X W_h x_N),   f(X) = c . ReLU(B z(X))

With the ReLU pattern D fixed, f(X) = sum_h v_h^D . a_h(X) with v_h^D = M_h B^T D c: exactly the
attention model, with the same W_h. Queries whose tokens all lie within eps of one point p
(or of 2p: the links add two base tokens, and a bias-free ReLU pattern is invariant under
positive scaling) keep a_h, hence z, within O(eps) of z(p) (or 2 z(p)), so the pattern stays
D(p) when every unit's margin |b_n . z(p)| exceeds that O(eps) change. Under that condition
the recovery returns W_h exactly and v_h^{D(p)}, i.e. a transformer functionally equivalent to
the original on the activation region of p: the region is a cone (bias-free units), so the
equivalence holds for every input whose pattern is D(p), however far from p.

Outside that region a different pattern D' gives other v_h^{D'}; this module reports the
agreement on fresh random inputs inside the region (the claim) and on unrestricted random
inputs (how large the region is), honestly separated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attribution.blackbox.canonical import canonicalize, compare_heads
from attribution.blackbox.oracle import MHAParams, Oracle, check_dims, mha_value
from attribution.blackbox.recovery import Recovery, recover

if TYPE_CHECKING:
    from jaxtyping import Bool, Float, Shaped


@dataclass
class FFNParams:
    """W (H, d, d), M (H, d, m) value-output maps, B (p, m) FFN input, c (p,) FFN read-out."""

    W: Float[np.ndarray, "head d d"]
    M: Float[np.ndarray, "head d m"]
    B: Float[np.ndarray, "hidden m"]
    c: Float[np.ndarray, " hidden"]

    @property
    def d(self) -> int:
        return int(self.W.shape[1])

    def head_means(self, X: Shaped[np.ndarray, "pos d"]) -> Float[np.ndarray, "head d"]:
        """a_h(X) in float64, (H, d)."""
        X = np.asarray(X, dtype=np.float64)
        out = []
        for W in self.W:
            s = X @ (W @ X[-1])
            a = np.exp(s - s.max())
            out.append(X.T @ (a / a.sum()))
        return np.array(out)

    def pattern(self, X: Shaped[np.ndarray, "pos d"]) -> Bool[np.ndarray, " hidden"]:
        z = np.einsum("hdm,hd->m", self.M, self.head_means(X))
        return self.B @ z > 0

    def local(self, pattern: Bool[np.ndarray, " hidden"]) -> MHAParams:
        """The attention model that equals f on the region with this ReLU pattern."""
        v = np.einsum("hdm,pm,p->hd", self.M, self.B, self.c * pattern)
        return MHAParams(W=self.W.copy(), v=v)


def random_ffn(d: int, heads: int, *, m: int | None = None, hidden: int | None = None,
               seed: int = 0) -> FFNParams:
    check_dims(d, heads)
    m = m or d
    hidden = hidden or 2 * d
    rng = np.random.default_rng(seed)
    return FFNParams(W=rng.standard_normal((heads, d, d)), M=rng.standard_normal((heads, d, m)) / np.sqrt(d),
                     B=rng.standard_normal((hidden, m)) / np.sqrt(m), c=rng.standard_normal(hidden))


def ffn_value(params: FFNParams, X: Shaped[np.ndarray, "pos d"], exact: bool) -> Any:
    """f(X); when ``exact`` the pattern is read in float64 and the value computed in mpmath."""
    local = params.local(params.pattern(np.array(np.asarray(X).tolist(), dtype=np.float64)))
    return mha_value(local, X, exact)


@dataclass
class FFNRecovery:
    recovery: Recovery
    center: Float[np.ndarray, " d"]
    pattern_changes_during_queries: int  # queries whose ReLU pattern left D(p): 0 means the condition held
    max_rel_error_W: float
    max_rel_error_v_local: float
    agreement_region: float  # max relative |f - f_hat| on fresh inputs inside the region of p
    agreement_global: float  # same on unrestricted fresh random inputs
    fraction_global_in_region: float
    n_fresh: int

    def to_json(self) -> dict[str, Any]:
        return {"queries": self.recovery.queries, "expected_queries": self.recovery.expected_queries,
                "max_query_length": self.recovery.max_query_length, "heads_recovered": self.recovery.heads,
                "pattern_changes_during_queries": self.pattern_changes_during_queries,
                "max_rel_error_W": self.max_rel_error_W, "max_rel_error_v_local": self.max_rel_error_v_local,
                "agreement_region": self.agreement_region, "agreement_global": self.agreement_global,
                "fraction_global_in_region": self.fraction_global_in_region, "n_fresh": self.n_fresh}


def recover_ffn(params: FFNParams, heads: int, *, seed: int = 0, eps: float = 1e-3, n_fresh: int = 200,
                dps: int = 50) -> FFNRecovery:
    """Recover near a random point p with |p| = 1, then test the recovered model on fresh inputs."""
    rng = np.random.default_rng(seed + 31337)
    d = params.d
    p = rng.standard_normal(d)
    p /= np.linalg.norm(p)
    ref = params.pattern(p[None, :])
    changes = 0

    def fn(X: np.ndarray) -> Any:
        nonlocal changes
        Xf = np.array(np.asarray(X).tolist(), dtype=np.float64)
        changes += int(not np.array_equal(params.pattern(Xf), ref))
        return ffn_value(params, X, exact=True)

    oracle = Oracle(fn, d, exact=True, name="attn+relu-ffn")
    rec = recover(oracle, heads, seed=seed, dps=dps, basis_scale=eps, center=p)
    truth = canonicalize(params.local(ref))
    cmp = compare_heads(truth, rec.W, rec.v)
    fitted = MHAParams(W=rec.W_float(), v=rec.v_float())

    def rel(xs: list[np.ndarray]) -> float:
        f = np.array([float(ffn_value(params, X, exact=False)) for X in xs])
        g = np.array([mha_value(fitted, X, exact=False) for X in xs])
        return float(np.max(np.abs(f - g)) / max(np.max(np.abs(f)), 1e-300)) if xs else float("nan")

    def fresh(near: bool) -> np.ndarray:
        n = int(rng.integers(1, 9))
        if near:  # random positive multiples of p plus sizeable noise; kept only if inside the region
            return rng.uniform(0.3, 3.0, (n, 1)) * p + 0.2 * rng.standard_normal((n, d)) / np.sqrt(d)
        return rng.standard_normal((n, d)) / np.sqrt(d)

    inside: list[np.ndarray] = []
    for _ in range(50 * n_fresh):
        if len(inside) >= n_fresh:
            break
        X = fresh(True)
        if np.array_equal(params.pattern(X), ref):
            inside.append(X)
    glob = [fresh(False) for _ in range(n_fresh)]
    frac = float(np.mean([np.array_equal(params.pattern(X), ref) for X in glob]))
    return FFNRecovery(rec, p, changes, cmp.max_rel_error_W, cmp.max_rel_error_v, rel(inside), rel(glob),
                       frac, n_fresh)

