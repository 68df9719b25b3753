"""Canonical form on constructed cases, and head matching."""

import numpy as np

from attribution.blackbox.canonical import canonicalize, compare_heads
from attribution.blackbox.oracle import MHAParams


def _W(seed, d=3):
    return np.random.default_rng(seed).standard_normal((d, d))


def test_equal_W_are_merged_and_v_summed():
    W0, W1 = _W(0), _W(1)
    p = MHAParams(W=np.stack([W0, W1, W0]), v=np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 2.0]]))
    c = canonicalize(p)
    assert c.heads == 2
    i = [np.allclose(w, W0) for w in c.W].index(True)
    assert np.allclose(c.v[i], [1.0, 0, 2.0])


def test_zero_heads_and_cancelling_merges_are_dropped():
    W0, W1, W2 = _W(0), _W(1), _W(2)
    v = np.array([[1.0, 2, 3], [-1.0, -2, -3], [0.0, 0, 0], [0.5, 0, 0]])
    c = canonicalize(MHAParams(W=np.stack([W0, W0, W1, W2]), v=v))
    assert c.heads == 1 and np.allclose(c.W[0], W2) and np.allclose(c.v[0], [0.5, 0, 0])


def test_distinct_heads_kept_and_everything_zero_gives_none():
    p = MHAParams(W=np.stack([_W(0), _W(1)]), v=np.ones((2, 3)))
    assert canonicalize(p).heads == 2
    assert canonicalize(MHAParams(W=np.stack([_W(0)]), v=np.zeros((1, 3)))).heads == 0


def test_compare_heads_finds_permutation_and_errors():
    p = MHAParams(W=np.stack([_W(0), _W(1)]), v=np.array([[1.0, 0, 0], [0, 1.0, 0]]))
    W_rec, v_rec = p.W[::-1].copy(), p.v[::-1].copy()
    W_rec[0] *= 1.01  # recovered head 0 is true head 1, off by 1 %
    cmp = compare_heads(p, W_rec, v_rec)
    assert cmp.permutation == [1, 0]
    assert abs(cmp.rel_error_W[1] - 0.01) < 1e-12 and cmp.rel_error_W[0] == 0.0
    assert cmp.max_rel_error_v == 0.0
    assert compare_heads(p, W_rec[:1], v_rec[:1]).max_rel_error_W == float("inf")
