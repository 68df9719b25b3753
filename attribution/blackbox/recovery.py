"""Recover canonical heads (W_h, v_h) of f(X) = sum_h v_h . X^T softmax(X W_h x_N) from value queries.

Algorithm (the spec's reconstruction; M = H, or the bound H0 when only that is known):

1. Random bases U, Q. For every (i, j) query X_k = [q_j + u_i] * k + [q_j], k = 0..2M, and fit
   g(k) = c0 + sum_h C_h / (1 + r_h k): log r_h = u_i^T W_h q_j, C_h = -(v_h . u_i). The smallest
   rational type that fits gives the number of canonical heads H'.
2. Label heads across (i, j) with d^2 - 1 link experiments whose g(0) and g(inf) are already
   known (so k = 1..2M-1): their log-poles are sums of known log-poles (bilinearity).
3. W_h = U^{-T} L_h Q^{-1}, v_h = -U^{-T} C_h.

Queries: d^2 (2M + 1) + (d^2 - 1)(2M - 1) = 4 M d^2 - 2M + 1, longest 2M + 1. ``oversample=o``
adds o k values to every experiment (least squares, for noisy oracles) and reports its own count.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mpmath
import numpy as np
from mpmath import mp

from attribution.blackbox.canonical import compare_heads
from attribution.blackbox.oracle import MHAParams, Oracle, OracleError, check_dims
from attribution.blackbox.rational import RationalFit, fit_auto, fit_link, fit_main
from core.errors import WorkbenchError

if TYPE_CHECKING:
    from jaxtyping import Float, Shaped


def expected_queries(d: int, bound: int) -> int:
    """The theoretical count 4 M d^2 - 2 M + 1."""
    return 4 * bound * d * d - 2 * bound + 1


@dataclass
class Recovery:
    """Recovered canonical heads. W: axes (head, d_key, d_query), v: axes (head, d); mpf entries."""

    W: Shaped[np.ndarray, "head d_key d_query"]  # mpf entries
    v: Shaped[np.ndarray, "head d"]
    queries: int
    expected_queries: int
    max_query_length: int
    bound: int
    oversample: int
    seconds: float
    dps: int
    fit_residual: float  # worst per-experiment residual relative to the output scale
    diagnostics: dict[str, Any] = field(default_factory=dict)

    axes = {"W": ["head", "d_key", "d_query"], "v": ["head", "d"]}

    @property
    def heads(self) -> int:
        return int(len(self.W))

    def W_float(self) -> Float[np.ndarray, "head d_key d_query"]:
        return np.array(self.W.tolist(), dtype=np.float64).reshape(-1, *self.W.shape[1:])

    def v_float(self) -> Float[np.ndarray, "head d"]:
        return np.array(self.v.tolist(), dtype=np.float64).reshape(-1, *self.v.shape[1:])

    def table(self):
        """One row per recovered head: norms, and the query budget (repeated for convenience)."""
        import pandas as pd

        W, v = self.W_float(), self.v_float()
        return pd.DataFrame({"head": range(self.heads), "norm_W": [float(np.linalg.norm(w)) for w in W],
                             "norm_v": [float(np.linalg.norm(x)) for x in v],
                             "queries": self.queries, "expected_queries": self.expected_queries})

    def plot(self):
        """Heatmaps of the recovered W_h (d_key x d_query), one panel per head."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        W = self.W_float()
        fig = make_subplots(rows=1, cols=max(1, self.heads),
                            subplot_titles=[f"W_{h}" for h in range(self.heads)])
        for h in range(self.heads):
            fig.add_trace(go.Heatmap(z=W[h], coloraxis="coloraxis"), row=1, col=h + 1)
        fig.update_layout(title=f"Recovered heads ({self.queries} queries, formula {self.expected_queries})",
                          coloraxis={"colorscale": "RdBu", "cmid": 0})
        # matrix layout (row 0 on top) with whole-number ticks, as every other W on the page is drawn
        fig.update_yaxes(autorange="reversed", dtick=1)
        fig.update_xaxes(dtick=1)
        return fig

    @property
    def error_estimate(self) -> float:
        """max(error_estimate_W, error_estimate_v): inf when a re-solve at the same noise fails."""
        return max(self.diagnostics.get("error_estimate_W", float("nan")),
                   self.diagnostics.get("error_estimate_v", float("nan")))

    @property
    def reliable(self) -> bool:
        """The error estimate is finite and below RELIABLE_ERROR (nan, i.e. not estimated: False)."""
        return bool(self.error_estimate < RELIABLE_ERROR)

    def to_json(self) -> dict[str, Any]:
        return {"reliable": self.reliable, "queries": self.queries, "expected_queries": self.expected_queries,
                "max_query_length": self.max_query_length, "heads_recovered": self.heads,
                "bound": self.bound, "oversample": self.oversample, "seconds": self.seconds,
                "precision_digits": self.dps, "fit_residual": self.fit_residual, "axes": self.axes,
                **self.diagnostics}


def _random_basis(rng: np.random.Generator, d: int, scale: float) -> np.ndarray:
    """A random orthogonal basis times ``scale``, held exactly as mpf.

    Why orthogonal: W = U^{-T} L Q^{-1} multiplies every fit error by cond(U) cond(Q); a Gaussian
    basis has condition ~ d and costs two to three digits, an orthogonal one costs none.
    """
    Qm, R = np.linalg.qr(rng.standard_normal((d, d)))
    Qm = Qm * np.sign(np.diag(R))  # Haar-distributed
    return np.array([[mpmath.mpf(float(x)) for x in row] for row in Qm * scale], dtype=object)


def _seq(a: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    return np.array([list(a)] * k + [list(q)], dtype=object)


def _ask(oracle: Oracle, jobs: list[tuple[np.ndarray, np.ndarray, list[int]]]) -> list[list[mpmath.mpf]]:
    """All queries of all experiments, batched by length (one batch call per sequence length)."""
    flat = [(e, k) for e, (_, _, ks) in enumerate(jobs) for k in ks]
    answers: dict[tuple[int, int], Any] = {}
    for k in sorted({k for _, k in flat}):
        idx = [(e, kk) for e, kk in flat if kk == k]
        seqs = [_seq(jobs[e][0], jobs[e][1], k) for e, _ in idx]
        if not oracle.exact:
            seqs = [np.array(s.tolist(), dtype=np.float64) for s in seqs]
        for key, y in zip(idx, oracle.batch(seqs), strict=False):
            answers[key] = mpmath.mpf(y)
    return [[answers[(e, k)] for k in ks] for e, (_, _, ks) in enumerate(jobs)]


def _match(ref_logr: list, other_logr: list, link: RationalFit) -> tuple[list[int], float, float]:
    """perm[h] = index in ``other`` of reference head h, so ref_h + other_perm[h] are link poles.

    Also returns the ambiguity (the best assignment's cost over the runner-up's: 0 when the link
    pins the labels, near 1 when noise makes two labellings equally good) and the best assignment's
    worst absolute log-pole distance (0 for an exact oracle that follows the model).
    """
    import itertools

    from scipy.optimize import linear_sum_assignment

    measured = [float(x) for x in link.logr]
    cost = np.array([[min(abs(float(a + b) - m) for m in measured) for b in other_logr] for a in ref_logr])
    rows, cols = linear_sum_assignment(cost)
    perm = [int(c) for _, c in sorted(zip(rows, cols, strict=False))]
    n = len(perm)
    best = float(sum(cost[h, perm[h]] for h in range(n)))
    worst = max((float(cost[h, perm[h]]) for h in range(n)), default=0.0)
    if n < 2:
        return perm, 0.0, worst
    if n <= 6:
        second = min(float(sum(cost[h, g[h]] for h in range(n)))
                     for g in itertools.permutations(range(n)) if list(g) != perm)
    else:  # runner-up: the best assignment that avoids one of the chosen pairs
        second = float("inf")
        for h in range(n):
            c2 = cost.copy()
            c2[h, perm[h]] = 1e300
            r2, k2 = linear_sum_assignment(c2)
            second = min(second, float(c2[r2, k2].sum()))
    ambiguity = best / second if second > 0 else 1.0
    return perm, ambiguity, worst


class HeadCountError(WorkbenchError):
    """The oracle needs more poles than the head count (or bound) given: H or H0 is below the truth."""


class NoiseBreakdownError(WorkbenchError):
    """The outputs fit the attention model with H heads to within the noise, but the noise moves the
    poles far enough to break a fit or swap head labels: the noise is above this instance's
    breakdown level (not a wrong head count)."""


class _Failure(Exception):
    """Internal: a fit or labelling step failed on experiment ``where`` (a, q tokens)."""

    def __init__(self, what: str, where: tuple, a: np.ndarray, q: np.ndarray) -> None:
        super().__init__(what)
        self.what, self.where, self.a, self.q = what, where, a, q


# Diagnosis of a failure: the failing experiment is re-queried at DIAG_EXTRA more k values than a
# fit of M + 2 poles needs, and fitted with 0 ... M + 2 poles (least squares).
DIAG_EXTRA = 4
# A link's labelling counts as ambiguous when its best head assignment costs more than this fraction
# of the runner-up's (a noisy oracle: the labels may swap). An exact oracle that follows the model
# puts every link pole within ~10^-dps of its predicted sum, so there any distance above
# EXACT_LINK_TOL (log-pole units) means the model does not hold with this many heads (a head count
# below the truth that the square fits alone cannot see).
LINK_AMBIGUITY = 0.5
# A result counts as reliable when its error estimate (both W and v, relative) is below this.
RELIABLE_ERROR = 1e-2
EXACT_LINK_TOL = 1e-8
ERROR_ESTIMATE_REPEATS = 3


def _diagnose(oracle: Oracle, fail: _Failure, M: int, tol: mpmath.mpf, scale: mpmath.mpf,
              bound: int | None) -> WorkbenchError:
    """Spend a few extra queries on the failing experiment and say which it is: too few heads, noise,
    or an oracle that is not the attention model."""
    ks = list(range(2 * (M + 2) + 1 + DIAG_EXTRA))
    before = oracle.queries
    ys = _ask(oracle, [(fail.a, fail.q, ks)])[0]
    extra = oracle.queries - before
    res = {m: fit_main(ks, ys, m).resid / scale for m in range(M + 3)}
    best_le = min(res[m] for m in range(M + 1))
    given = f"--bound {bound}" if bound is not None else f"--heads {M}"
    what = f"{fail.what} on experiment {fail.where}"
    how = f"{extra} extra diagnostic queries at k = 0..{ks[-1]}"

    def fmt(x: mpmath.mpf) -> str:
        return "no fit" if not mpmath.isfinite(x) else f"{float(x):.1e}"

    if best_le <= tol:
        if oracle.noise > 0:
            return NoiseBreakdownError(
                f"noise {oracle.noise:g} is above this instance's breakdown level: {what}, yet its outputs fit "
                f"{M} heads to within the noise (relative residual {fmt(best_le)} <= {fmt(tol)}; {how}), so "
                "the head count is not the problem: the noise moves the poles of nearby heads into each "
                "other; lower the noise or add --oversample")
        return NoiseBreakdownError(
            f"{what}, yet its outputs fit {M} heads to the oracle's precision (relative residual "
            f"{fmt(best_le)}; {how}): the instance is too ill-conditioned for a float64 oracle "
            "(close poles); use an exact oracle, more --dps or --oversample")
    more = [m for m in range(M + 1, M + 3) if res[m] <= tol]
    best_gt = min(res[m] for m in range(M + 1, M + 3))
    if not more and oracle.noise > 0 and mpmath.isfinite(best_le) and best_gt > best_le / 10:
        return NoiseBreakdownError(
            f"noise {oracle.noise:g} is above this instance's breakdown level: {what}; more poles do not "
            f"explain the outputs better than {M} (relative residual {fmt(best_le)} with <= {M}, "
            f"{fmt(best_gt)} with up to {M + 2}; noise level {fmt(tol)}; {how}), so the noise, not the head "
            "count, breaks the fit; lower the noise or add --oversample")
    if more:
        return HeadCountError(
            f"{given} is below the oracle's number of heads: experiment {fail.where} needs {more[0]} poles "
            f"(best fit with <= {M}: relative residual {fmt(best_le)}; with {more[0]}: {fmt(res[more[0]])}; "
            f"noise level {fmt(tol)}; {how}); raise {given.split()[0]}")
    return WorkbenchError(
        f"{what}: the oracle does not follow the attention model with <= {M + 2} heads (best relative "
        f"residual {fmt(min(res.values()))}, noise level {fmt(tol)}; {how}); if it has more heads, "
        f"raise {given.split()[0]}")


@dataclass
class _Plan:
    """The experiments of one recovery: main pairs and links (tokens and k values)."""

    d: int
    u: list
    q: list
    main_ks: list[int]
    link_ks: list[int]
    pairs: list[tuple[int, int]]
    links: list[tuple[np.ndarray, np.ndarray, list[int]]]
    link_meta: list[tuple[tuple[int, int], tuple[int, int], str]]


def _plan(u: list, q: list, M: int, oversample: int) -> _Plan:
    d = len(u)
    links, meta = [], []
    link_ks = list(range(1, 2 * M + oversample))
    for i in range(1, d):  # (u_0 + u_i, q_0): matches (i, 0) to (0, 0)
        links.append((q[0] + u[0] + u[i], q[0], link_ks))
        meta.append(((i, 0), (0, 0), "u0+ui"))
    for j in range(1, d):  # (u_0, q_0 + q_j): matches (0, j) to (0, 0)
        links.append((q[0] + q[j] + u[0], q[0] + q[j], link_ks))
        meta.append(((0, j), (0, 0), "q0+qj"))
    for i in range(1, d):  # (u_i, q_0 + q_j): matches (i, j) to (i, 0)
        for j in range(1, d):
            links.append((q[0] + q[j] + u[i], q[0] + q[j], link_ks))
            meta.append(((i, j), (i, 0), "ui,q0+qj"))
    return _Plan(d, u, q, list(range(2 * M + 1 + oversample)), link_ks,
                 [(i, j) for i in range(d) for j in range(d)], links, meta)


def _main_fits(plan: _Plan, ys: list, Hp: int) -> dict:
    fits = {p: fit_main(plan.main_ks, row, Hp) for p, row in zip(plan.pairs, ys, strict=False)}
    for p, f in fits.items():
        if not f.ok:
            i, j = p
            raise _Failure("the rational fit failed (poles not real and negative)", p,
                           plan.q[j] + plan.u[i], plan.q[j])
    return fits


def _labels(plan: _Plan, ys: list, fits: dict, lys: list, Hp: int, exact: bool
            ) -> tuple[dict, mpmath.mpf, float]:
    """Head labels per experiment, the worst link residual and the worst link ambiguity."""
    d = plan.d
    Vq = [mpmath.fsum(ys[i * d + j][0] for i in range(d)) / d for j in range(d)]
    Vu = [mpmath.fsum(fits[(i, j)].c0 - ys[i * d + j][0] for j in range(d)) / d for i in range(d)]
    order = sorted(range(Hp), key=lambda h: fits[(0, 0)].logr[h])
    labels = {(0, 0): order}  # labels[p][h] = index of canonical head h in fit p
    worst, mismatch = mpmath.mpf(0), 0.0
    for (p, ref, kind), (a, qq, _), row in zip(plan.link_meta, plan.links, lys, strict=False):
        i, j = p
        if kind == "u0+ui":
            y0, c0 = Vq[0], Vq[0] + Vu[0] + Vu[i]
        elif kind == "q0+qj":
            y0, c0 = Vq[0] + Vq[j], Vq[0] + Vq[j] + Vu[0]
        else:
            y0, c0 = Vq[0] + Vq[j], Vq[0] + Vq[j] + Vu[i]
        link = fit_link(plan.link_ks, row, Hp, c0, y0)
        if not link.ok:
            raise _Failure("the link fit failed (poles not real and negative)", ("link", p), a, qq)
        worst = max(worst, link.resid)
        ref_logr = [fits[ref].logr[labels[ref][h]] for h in range(Hp)]
        labels[p], amb, dist = _match(ref_logr, fits[p].logr, link)
        mismatch = max(mismatch, amb)
        if exact and dist > EXACT_LINK_TOL:
            raise _Failure(f"a link pole is {dist:.1e} from its predicted sum (exact oracle: the model with "
                           f"{Hp} heads does not hold)", ("link", p), a, qq)
        if amb > LINK_AMBIGUITY:
            raise _Failure(f"the head labels are ambiguous (best labelling costs {amb:.2f} of the "
                           "runner-up's)", ("link", p), a, qq)
    return labels, worst, mismatch


def _solve(plan: _Plan, U: np.ndarray, Q: np.ndarray, ys: list, lys: list, Hp: int,
           exact: bool = False):
    """(W, v, worst link residual, link mismatch) from the answers; _Failure when a step fails."""
    d = plan.d
    fits = _main_fits(plan, ys, Hp)
    labels, worst, mismatch = _labels(plan, ys, fits, lys, Hp, exact)
    L = np.empty((Hp, d, d), dtype=object)
    Cm = np.empty((Hp, d), dtype=object)
    for h in range(Hp):
        for i in range(d):
            for j in range(d):
                L[h, i, j] = fits[(i, j)].logr[labels[(i, j)][h]]
            Cm[h, i] = mpmath.fsum(fits[(i, j)].C[labels[(i, j)][h]] for j in range(d)) / d
    Uit = mp.inverse(mp.matrix(U.tolist())).T  # U^{-T}
    Qi = mp.inverse(mp.matrix(Q.tolist()))
    W = np.empty((Hp, d, d), dtype=object)
    v = np.empty((Hp, d), dtype=object)
    for h in range(Hp):
        Wh = Uit * mp.matrix(L[h].tolist()) * Qi
        vh = -(Uit * mp.matrix(Cm[h].tolist()))
        W[h] = np.array(Wh.tolist(), dtype=object)
        v[h] = np.array([vh[i] for i in range(d)], dtype=object)
    main_worst = max(f.resid for f in fits.values())
    return W, v, max(worst, main_worst), mismatch


def _error_estimate(plan: _Plan, U, Q, ys, lys, Hp: int, W, v, sigma: float, seed: int) -> tuple[float, float]:
    """Honest error figure without the truth: re-solve the same answers with fresh output noise of the
    oracle's scale (its noise, or float64 rounding) and take the largest relative change in W and v
    (matched heads). The error of the actual noise realization is of the same size (first order).
    inf when a perturbed solve fails (the answers sit at the breakdown level)."""
    if Hp == 0 or sigma <= 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed + 104729)
    base = MHAParams(W=np.array(W.tolist(), dtype=np.float64), v=np.array(v.tolist(), dtype=np.float64))
    eW = ev = 0.0
    for _ in range(ERROR_ESTIMATE_REPEATS):
        jit = [[y + mpmath.mpf(float(sigma * rng.standard_normal())) for y in row] for row in ys]
        ljit = [[y + mpmath.mpf(float(sigma * rng.standard_normal())) for y in row] for row in lys]
        try:
            W2, v2, _, _ = _solve(plan, U, Q, jit, ljit, Hp)
        except _Failure:
            return float("inf"), float("inf")
        cmp = compare_heads(base, W2, v2)
        eW, ev = max(eW, cmp.max_rel_error_W), max(ev, cmp.max_rel_error_v)
    return eW, ev


def recover(oracle: Oracle, heads: int, *, bound: int | None = None, seed: int = 0, oversample: int = 0,
            dps: int = 50, basis_scale: float = 1.0, rtol: float | None = None,
            center: Float[np.ndarray, " d"] | None = None, u_scale: float | None = None,
            estimate_error: bool = True) -> Recovery:
    """Recover the canonical heads; ``heads`` is H, or pass ``bound`` when only H0 >= H is known.

    ``center``/``u_scale`` keep every query token near one point (q_j = center + Q e_j, u_i of size
    ``u_scale``): the FFN extension needs all queries inside one ReLU activation region.

    When a fit or the head labelling fails, the failing experiment is re-queried at a few more k
    values (``DIAG_EXTRA``; named in the message, not part of a result) to say which it is:
    ``HeadCountError`` (H or H0 below the truth: more poles are needed), ``NoiseBreakdownError``
    (the outputs fit H heads to within the noise, but the noise breaks the fit or the labels), or a
    plain WorkbenchError (not the attention model). A result carries ``error_estimate_W/v``:
    the relative change of W and v when the same answers are re-solved with fresh noise of the
    oracle's scale (``estimate_error``; no queries).
    """
    d = oracle.d
    check_dims(d, heads, bound)
    M = int(bound if bound is not None else heads)
    if oversample < 0:
        raise WorkbenchError(f"oversample must be >= 0 (got {oversample})")
    t0 = time.perf_counter()
    oracle.reset()
    rng = np.random.default_rng(seed)
    with mp.workdps(dps):
        U = _random_basis(rng, d, basis_scale if u_scale is None else u_scale)
        Q = _random_basis(rng, d, basis_scale)
        if center is not None:
            c = [mpmath.mpf(float(x)) for x in np.asarray(center, dtype=np.float64).ravel()]
            if len(c) != d:
                raise WorkbenchError(f"center has {len(c)} entries, expected d={d}")
            Q = Q + np.array([[ci] * d for ci in c], dtype=object)
        u, q = [U[:, i] for i in range(d)], [Q[:, j] for j in range(d)]
        # why the tolerance: exact oracles fit to ~10^-dps; float/noisy ones only to their noise
        if rtol is None:
            rtol = 10.0 ** (-dps // 2) if oracle.exact else 1e-8
        rtol_mp = mpmath.mpf(rtol)
        plan = _plan(u, q, M, oversample)
        ys = _ask(oracle, [(q[j] + u[i], q[j], plan.main_ks) for i, j in plan.pairs])
        scale = max(abs(y) for row in ys for y in row) + mpmath.mpf(10) ** -dps
        noise_tol = mpmath.mpf(30 * oracle.noise) / scale
        tol = max(rtol_mp, noise_tol)
        counts = [fit_auto(plan.main_ks, row, M, tol)[0] for row in ys]
        Hp = Counter(counts).most_common(1)[0][0]
        if Hp == 0:  # a constant function: nothing to label, no heads to return
            raise OracleError("the oracle is constant in every experiment: no canonical heads to recover")
        queries = None
        try:
            _main_fits(plan, ys, Hp)
            lys = _ask(oracle, plan.links) if plan.links else []
            queries, longest = oracle.queries, oracle.max_length
            W, v, worst, mismatch = _solve(plan, U, Q, ys, lys, Hp, oracle.exact and oracle.noise == 0)
        except _Failure as fail:
            raise _diagnose(oracle, fail, M, tol, scale, bound) from None
        sigma = oracle.noise if oracle.noise > 0 else (0.0 if oracle.exact else 2.0 ** -52 * float(scale))
        eW, ev = (_error_estimate(plan, U, Q, ys, lys, Hp, W, v, sigma, seed) if estimate_error
                  else (float("nan"), float("nan")))
        diag = {"head_counts_per_experiment": dict(Counter(counts)), "link_ambiguity": float(mismatch),
                "error_estimate_W": eW, "error_estimate_v": ev}
        if bound is None and Hp < M:
            diag["note"] = (f"{Hp} canonical head(s) where H={M} was given: heads with equal W merged or zero "
                            "v dropped" + (f", or heads hidden by the noise ({oracle.noise:g})"
                                           if oracle.noise > 0 else ""))
        return Recovery(W=W, v=v, queries=queries, expected_queries=expected_queries(d, M),
                        max_query_length=longest, bound=M, oversample=oversample,
                        seconds=time.perf_counter() - t0, dps=dps, fit_residual=float(worst / scale),
                        diagnostics=diag)
