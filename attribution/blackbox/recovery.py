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
from typing import Any

import mpmath
import numpy as np
from mpmath import mp

from attribution.blackbox.oracle import Oracle, OracleError, check_dims
from attribution.blackbox.rational import RationalFit, fit_auto, fit_link, fit_main
from workbench.errors import WorkbenchError


def expected_queries(d: int, bound: int) -> int:
    """The theoretical count 4 M d^2 - 2 M + 1."""
    return 4 * bound * d * d - 2 * bound + 1


@dataclass
class Recovery:
    """Recovered canonical heads. W: axes (head, d_key, d_query), v: axes (head, d); mpf entries."""

    W: np.ndarray
    v: np.ndarray
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

    def W_float(self) -> np.ndarray:
        return np.array(self.W.tolist(), dtype=np.float64).reshape(-1, *self.W.shape[1:])

    def v_float(self) -> np.ndarray:
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
                          coloraxis={"colorscale": "RdBu"})
        return fig

    def to_json(self) -> dict[str, Any]:
        return {"queries": self.queries, "expected_queries": self.expected_queries,
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


def _match(ref_logr: list, other_logr: list, link: RationalFit) -> list[int]:
    """perm[h] = index in ``other`` of reference head h, so ref_h + other_perm[h] are link poles."""
    from scipy.optimize import linear_sum_assignment

    measured = [float(x) for x in link.logr]
    cost = np.array([[min(abs(float(a + b) - m) for m in measured) for b in other_logr] for a in ref_logr])
    rows, cols = linear_sum_assignment(cost)
    return [int(c) for _, c in sorted(zip(rows, cols, strict=False))]


def recover(oracle: Oracle, heads: int, *, bound: int | None = None, seed: int = 0, oversample: int = 0,
            dps: int = 50, basis_scale: float = 1.0, rtol: float | None = None,
            center: np.ndarray | None = None, u_scale: float | None = None) -> Recovery:
    """Recover the canonical heads; ``heads`` is H, or pass ``bound`` when only H0 >= H is known.

    ``center``/``u_scale`` keep every query token near one point (q_j = center + Q e_j, u_i of size
    ``u_scale``): the FFN extension needs all queries inside one ReLU activation region.
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
        main_ks = list(range(2 * M + 1 + oversample))
        pairs = [(i, j) for i in range(d) for j in range(d)]
        ys = _ask(oracle, [(q[j] + u[i], q[j], main_ks) for i, j in pairs])
        scale = max(abs(y) for row in ys for y in row) + mpmath.mpf(10) ** -dps
        noise_tol = mpmath.mpf(30 * oracle.noise) / scale
        tol = max(rtol_mp, noise_tol)
        counts = [fit_auto(main_ks, row, M, tol)[0] for row in ys]
        Hp = Counter(counts).most_common(1)[0][0]
        fits = {p: fit_main(main_ks, row, Hp) for p, row in zip(pairs, ys, strict=False)}
        bad = [p for p, f in fits.items() if not f.ok]
        if Hp == 0:  # a constant function: nothing to label, no heads to return
            raise OracleError("the oracle is constant in every experiment: no canonical heads to recover")
        if bad:
            raise WorkbenchError(f"rational fit failed on {len(bad)} experiments (e.g. {bad[0]}): "
                                 "the oracle does not follow the attention model at this noise level")
        # known values: V.q_j = g(0) (query [q_j]); V.u_i = g(inf) - g(0)
        Vq = [mpmath.fsum(ys[i * d + j][0] for i in range(d)) / d for j in range(d)]
        Vu = [mpmath.fsum(fits[(i, j)].c0 - ys[i * d + j][0] for j in range(d)) / d for i in range(d)]
        link_ks = list(range(1, 2 * M + oversample))
        links, meta = [], []
        for i in range(1, d):  # (u_0 + u_i, q_0): matches (i, 0) to (0, 0)
            links.append((q[0] + u[0] + u[i], q[0], link_ks))
            meta.append(((i, 0), (0, 0), Vq[0], Vq[0] + Vu[0] + Vu[i]))
        for j in range(1, d):  # (u_0, q_0 + q_j): matches (0, j) to (0, 0)
            links.append((q[0] + q[j] + u[0], q[0] + q[j], link_ks))
            meta.append(((0, j), (0, 0), Vq[0] + Vq[j], Vq[0] + Vq[j] + Vu[0]))
        for i in range(1, d):  # (u_i, q_0 + q_j): matches (i, j) to (i, 0)
            for j in range(1, d):
                links.append((q[0] + q[j] + u[i], q[0] + q[j], link_ks))
                meta.append(((i, j), (i, 0), Vq[0] + Vq[j], Vq[0] + Vq[j] + Vu[i]))
        lys = _ask(oracle, links) if links else []
        order = sorted(range(Hp), key=lambda h: fits[(0, 0)].logr[h])
        labels = {(0, 0): order}  # labels[p][h] = index of canonical head h in fit p
        worst = max(f.resid for f in fits.values()) / scale
        for (p, ref, y0, c0), row in zip(meta, lys, strict=False):
            link = fit_link(link_ks, row, Hp, c0, y0)
            if not link.ok:
                raise WorkbenchError(f"link fit failed for experiment {p}: oracle outputs inconsistent "
                                     "with the attention model (noise too large?)")
            worst = max(worst, link.resid / scale)
            ref_logr = [fits[ref].logr[labels[ref][h]] for h in range(Hp)]
            labels[p] = _match(ref_logr, fits[p].logr, link)
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
        return Recovery(W=W, v=v, queries=oracle.queries, expected_queries=expected_queries(d, M),
                        max_query_length=oracle.max_length, bound=M, oversample=oversample,
                        seconds=time.perf_counter() - t0, dps=dps, fit_residual=float(worst),
                        diagnostics={"head_counts_per_experiment": dict(Counter(counts))})

