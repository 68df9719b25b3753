"""Exact recovery: query counts, query length, errors, bound, canonical heads, float64 and oversampling."""

import numpy as np
import pytest

from attribution.blackbox.canonical import canonicalize, compare_heads
from attribution.blackbox.oracle import Oracle, OracleError, mha_oracle, random_mha
from attribution.blackbox.recovery import expected_queries, recover
from core.errors import WorkbenchError


@pytest.mark.parametrize("d,H", [(8, 2), (6, 3)])
def test_exact_recovery_done_when(d, H):
    p = random_mha(d, H, seed=0)
    o = mha_oracle(p)
    rec = recover(o, H, seed=0)
    assert rec.queries == o.queries == 4 * H * d * d - 2 * H + 1 == expected_queries(d, H)
    assert rec.max_query_length == 2 * H + 1
    cmp = compare_heads(canonicalize(p), rec.W, rec.v)
    assert rec.heads == H
    assert cmp.max_rel_error_W < 1e-6 and cmp.max_rel_error_v < 1e-6
    assert cmp.max_rel_error_W < 1e-30  # the mpmath path is exact, not merely good


def test_bound_returns_true_head_count():
    d, H0 = 4, 4
    p = random_mha(d, 2, seed=3)
    rec = recover(mha_oracle(p), 2, bound=H0, seed=1)
    assert rec.queries == 4 * H0 * d * d - 2 * H0 + 1
    assert rec.max_query_length == 2 * H0 + 1
    assert rec.heads == 2
    assert compare_heads(canonicalize(p), rec.W, rec.v).max_rel_error_W < 1e-20


def test_merged_and_zero_heads_give_canonical_heads():
    p = random_mha(3, 4, seed=4, merged=1, zero=1)  # canonical: 2 heads
    rec = recover(mha_oracle(p), 4, seed=0)
    truth = canonicalize(p)
    assert truth.heads == 2 and rec.heads == 2
    assert rec.queries == expected_queries(3, 4)
    cmp = compare_heads(truth, rec.W, rec.v)
    # the merged truth v0 + v1 is itself rounded to float64, hence 1e-15 for v
    assert cmp.max_rel_error_W < 1e-20 and cmp.max_rel_error_v < 1e-15


def test_float64_oracle_and_oversampling():
    p = random_mha(4, 2, seed=1)
    rec = recover(mha_oracle(p, exact=False), 2, seed=0, dps=30)
    assert compare_heads(canonicalize(p), rec.W, rec.v).max_rel_error_W < 1e-6
    o = mha_oracle(p, exact=False)
    rec = recover(o, 2, seed=0, oversample=2, dps=30)
    assert rec.queries == expected_queries(4, 2) + 2 * (2 * 16 - 1)
    assert rec.max_query_length == 2 * 2 + 1 + 2


def test_bad_inputs_and_bad_oracles():
    p = random_mha(2, 1, seed=0)
    with pytest.raises(WorkbenchError):
        recover(mha_oracle(p), 0)
    with pytest.raises(WorkbenchError):
        recover(mha_oracle(p), 2, bound=1)
    with pytest.raises(OracleError):
        recover(Oracle(lambda X: float("nan"), 2), 1)
    with pytest.raises(OracleError):
        recover(Oracle(lambda X: np.zeros(3), 2), 1)
    with pytest.raises(OracleError):  # constant: no heads at all
        recover(Oracle(lambda X: 1.0, 2), 1)


def test_result_axes_and_json():
    rec = recover(mha_oracle(random_mha(2, 1, seed=0)), 1)
    j = rec.to_json()
    assert j["queries"] == j["expected_queries"] == expected_queries(2, 1) and j["axes"]["W"][0] == "head"
    assert rec.W_float().shape == (1, 2, 2) and rec.v_float().shape == (1, 2)
