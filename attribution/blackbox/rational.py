"""Fitting g(k) = c0 + sum_h C_h / (1 + r_h k) to samples at integer k, in mpmath.

Why mpmath: with equally spaced k the monomial system is badly conditioned (float64 loses
~1e-2 at H = 3). Solving the same square system at ``mp.dps`` digits removes the error the
*algorithm* adds; what remains is the data error times the problem's own condition number,
which is all an exact oracle leaves (zero) and what a noisy oracle must pay. Extra k values
(oversampling) turn the solves into least squares.

Linearisation: D(k) = prod_h (1 + r_h k) = 1 + d_1 k + ... + d_m k^m, so poles k = -1/r_h.
Main fit: P(k) = c0 D(k) + N(k) of degree m, P(k_i) - y_i D(k_i) = 0.
Link fit (c0 and g(0) known): N(k) - z D(k) = 0 with z = g - c0, deg N <= m - 1, N(0) = z(0).
"""

from __future__ import annotations

from dataclasses import dataclass

import mpmath
from mpmath import mp


@dataclass
class RationalFit:
    c0: mpmath.mpf
    r: list[mpmath.mpf]  # exp(bilinear value) per head; log r_h = u^T W_h q
    C: list[mpmath.mpf]  # residues C_h = -(v_h . u)
    resid: mpmath.mpf  # max |g(k_i) - fit(k_i)| over the samples

    @property
    def logr(self) -> list[mpmath.mpf]:
        return [mpmath.log(x) for x in self.r]

    @property
    def ok(self) -> bool:
        return mpmath.isfinite(self.resid)


_BAD = RationalFit(mpmath.mpf(0), [], [], mpmath.inf)


def _solve(A: list[list], b: list) -> list | None:
    """Square: LU; tall: least squares (QR). None when singular."""
    if not A or not A[0]:
        return []
    M, v = mp.matrix(A), mp.matrix(b)
    try:
        x = mp.lu_solve(M, v) if len(A) == len(A[0]) else mp.qr_solve(M, v)[0]
    except (ZeroDivisionError, ValueError):  # mpmath: "matrix is numerically singular"
        return None
    return [x[i] for i in range(len(A[0]))]


def _poles(dcoef: list) -> list | None:
    """r_h from D(k) = 1 + sum d_t k^t; None unless all roots are real and negative."""
    if not dcoef:
        return []
    scale = max(abs(c) for c in dcoef)
    if abs(dcoef[-1]) <= scale * mpmath.mpf(10) ** (-mp.dps // 2):
        return None  # degree drop: fewer poles than asked for
    try:
        roots = mp.polyroots(list(reversed(dcoef)) + [1], maxsteps=200, extraprec=2 * mp.prec)
    except (mpmath.libmp.libhyper.NoConvergence, ZeroDivisionError):
        return None
    r = []
    for z in roots:
        z = mpmath.mpc(z)
        # Noise can push two close poles off the real axis as a conjugate pair; keep their real
        # part (the fit residual still judges the fit) rather than fail outright.
        if z.real >= 0:
            return None
        r.append(-1 / z.real)
    return r


def _residues(ks: list, ys: list, r: list, c0: mpmath.mpf | None) -> tuple:
    """Least-squares c0 (unless given) and C_h on the basis 1/(1 + r_h k)."""
    rows = [([1] if c0 is None else []) + [1 / (1 + rh * k) for rh in r] for k in ks]
    rhs = [y - (0 if c0 is None else c0) for y in ys]
    x = _solve(rows, rhs)
    if x is None:
        return None
    c = x[0] if c0 is None else c0
    C = x[1:] if c0 is None else x
    resid = max(abs(y - c - mpmath.fsum(Ch / (1 + rh * k) for Ch, rh in zip(C, r, strict=True)))
                for k, y in zip(ks, ys, strict=True))
    return c, list(C), resid


def fit_main(ks: list, ys: list, m: int) -> RationalFit:
    """Type (m, m) fit with c0 free; needs len(ks) >= 2m + 1."""
    ks, ys = [mpmath.mpf(k) for k in ks], [mpmath.mpf(y) for y in ys]
    if m == 0:
        c0 = mpmath.fsum(ys) / len(ys)
        return RationalFit(c0, [], [], max(abs(y - c0) for y in ys))
    A = [[k**t for t in range(m + 1)] + [-y * k**t for t in range(1, m + 1)]
         for k, y in zip(ks, ys, strict=True)]
    x = _solve(A, ys)
    if x is None:
        return _BAD
    r = _poles(x[m + 1:])
    if r is None:
        return _BAD
    out = _residues(ks, ys, r, None)
    return _BAD if out is None else RationalFit(out[0], r, out[1], out[2])


def fit_link(ks: list, ys: list, m: int, c0: mpmath.mpf, y0: mpmath.mpf) -> RationalFit:
    """Type (m-1, m) fit of g - c0 with g(0) = y0 known; needs len(ks) >= 2m - 1 (k >= 1)."""
    ks, ys = [mpmath.mpf(k) for k in ks], [mpmath.mpf(y) for y in ys]
    z = [y - c0 for y in ys]
    z0 = y0 - c0
    if m == 0:
        return RationalFit(c0, [], [], max(abs(x) for x in z + [z0]))
    A = [[k**t for t in range(1, m)] + [-zi * k**t for t in range(1, m + 1)]
         for k, zi in zip(ks, z, strict=True)]
    x = _solve(A, [zi - z0 for zi in z])
    if x is None:
        return _BAD
    r = _poles(x[m - 1:])
    if r is None:
        return _BAD
    out = _residues([mpmath.mpf(0)] + ks, [y0] + ys, r, c0)
    return _BAD if out is None else RationalFit(c0, r, out[1], out[2])


def fit_auto(ks: list, ys: list, bound: int, rtol: mpmath.mpf) -> tuple[int, RationalFit]:
    """Smallest m <= bound whose fit leaves max residual <= rtol * max|y| (the head count here)."""
    scale = max(abs(mpmath.mpf(y)) for y in ys) + mpmath.mpf(10) ** (-mp.dps)
    fit = _BAD
    for m in range(bound + 1):
        fit = fit_main(ks, ys, m)
        if fit.ok and fit.resid <= rtol * scale:
            return m, fit
    return bound, fit
