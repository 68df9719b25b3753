"""Canonical heads and head-to-head comparison.

Only the canonical form is identifiable from value queries: heads with equal W_h act as one
head with the summed v_h, and a head whose (summed) v_h is zero contributes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mpmath
import numpy as np

from attribution.blackbox.oracle import MHAParams

if TYPE_CHECKING:
    from jaxtyping import Shaped


def _norm(x: np.ndarray) -> mpmath.mpf:
    return mpmath.sqrt(mpmath.fsum(mpmath.mpf(e) ** 2 for e in np.asarray(x, dtype=object).ravel()))


def canonicalize(params: MHAParams, tol: float = 1e-9) -> MHAParams:
    """Merge heads whose W agree to ``tol`` (relative), sum their v, drop heads with v ~ 0."""
    W, v = np.asarray(params.W, dtype=np.float64), np.asarray(params.v, dtype=np.float64)
    groups: list[list[int]] = []
    for h in range(W.shape[0]):
        for g in groups:
            ref = W[g[0]]
            if np.linalg.norm(W[h] - ref) <= tol * max(1.0, float(np.linalg.norm(ref))):
                g.append(h)
                break
        else:
            groups.append([h])
    v_scale = max(1.0, float(np.abs(v).max(initial=0.0)))
    keep_W, keep_v = [], []
    for g in groups:
        vs = v[g].sum(axis=0)
        if np.linalg.norm(vs) > tol * v_scale:  # why: a zero sum is invisible to any query
            keep_W.append(W[g[0]])
            keep_v.append(vs)
    d = W.shape[1]
    return MHAParams(W=np.array(keep_W).reshape(-1, d, d), v=np.array(keep_v).reshape(-1, d))


@dataclass
class HeadComparison:
    """Recovered vs true canonical heads after the best permutation."""

    permutation: list[int]  # recovered head index for each true head
    rel_error_W: list[float]
    rel_error_v: list[float]

    @property
    def max_rel_error_W(self) -> float:
        return max(self.rel_error_W, default=float("inf"))

    @property
    def max_rel_error_v(self) -> float:
        return max(self.rel_error_v, default=float("inf"))


def compare_heads(true: MHAParams, W_rec: Shaped[np.ndarray, "head d d"],
                  v_rec: Shaped[np.ndarray, "head d"]) -> HeadComparison:
    """Relative Frobenius errors, true heads matched to recovered heads (Hungarian on W error).

    ``W_rec``/``v_rec`` may hold mpf entries (object dtype); the errors are then computed in
    mpmath, so errors far below float64 resolution are reported faithfully.
    """
    from scipy.optimize import linear_sum_assignment

    H_true, H_rec = true.W.shape[0], len(W_rec)
    if H_true != H_rec or H_true == 0:
        return HeadComparison([], [float("inf")], [float("inf")])
    Wt = [np.asarray(w, dtype=object) for w in true.W]
    vt = [np.asarray(x, dtype=object) for x in true.v]
    Wr = [np.asarray(w, dtype=object) for w in W_rec]
    vr = [np.asarray(x, dtype=object) for x in v_rec]
    errW = [[float(_norm(Wr[g] - Wt[h]) / _norm(Wt[h])) for g in range(H_rec)] for h in range(H_true)]
    rows, cols = linear_sum_assignment(np.array(errW))
    perm = [int(c) for _, c in sorted(zip(rows, cols, strict=False))]
    eW = [errW[h][perm[h]] for h in range(H_true)]
    ev = [float(_norm(vr[perm[h]] - vt[h]) / _norm(vt[h])) for h in range(H_true)]
    return HeadComparison(perm, eW, ev)
