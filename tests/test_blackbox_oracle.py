"""Oracle wrapper: counting, validation, and the key identity the recovery rests on."""

import mpmath
import numpy as np
import pytest

from attribution.blackbox.oracle import Oracle, OracleError, check_dims, mha_oracle, mha_value, random_mha
from core.errors import WorkbenchError


def test_counts_queries_and_longest_query():
    o = Oracle(lambda X: float(X.sum()), d=3)
    o(np.ones((2, 3)))
    o.batch([np.ones((5, 3)), np.ones((5, 3))])
    assert o.queries == 3 and o.max_length == 5
    o.reset()
    assert o.queries == 0 and o.max_length == 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), np.array([1.0, 2.0]), np.zeros((2, 2)), "x"])
def test_bad_outputs_raise_typed_error(bad):
    o = Oracle(lambda X: bad, d=2)
    with pytest.raises(OracleError):
        o(np.ones((1, 2)))
    assert issubclass(OracleError, WorkbenchError)


def test_one_element_array_output_is_accepted():
    assert Oracle(lambda X: np.array([2.5]), d=2)(np.ones((1, 2))) == 2.5


def test_wrong_input_shape_and_batch_length():
    o = Oracle(lambda X: 0.0, d=2, batch_fn=lambda Xs: [0.0])
    with pytest.raises(OracleError):
        o(np.ones((3, 4)))
    with pytest.raises(OracleError):
        o.batch([np.ones((1, 2)), np.ones((1, 2))])


@pytest.mark.parametrize("args", [(0, 2, None), (3, 0, None), (3, 3, 2)])
def test_check_dims(args):
    with pytest.raises(WorkbenchError):
        check_dims(*args)


def test_exact_and_float_evaluation_agree():
    p = random_mha(4, 3, seed=2)
    X = np.random.default_rng(0).standard_normal((5, 4))
    exact = mha_value(p, np.array([[mpmath.mpf(float(x)) for x in r] for r in X], dtype=object), exact=True)
    assert abs(float(exact) - mha_value(p, X, exact=False)) < 1e-12


def test_key_identity_rational_in_k():
    """f([a]*k + [q]) = V.a - sum_h (v_h.u) / (1 + r_h k) with r_h = exp(u^T W_h q)."""
    p = random_mha(3, 2, seed=5)
    rng = np.random.default_rng(1)
    a, q = rng.standard_normal(3), rng.standard_normal(3)
    u = a - q
    o = mha_oracle(p, exact=False)
    for k in range(6):
        pred = p.v.sum(0) @ a - sum((v @ u) / (1 + np.exp(u @ W @ q) * k)
                                    for W, v in zip(p.W, p.v, strict=True))
        assert abs(o(np.array([a] * k + [q])) - pred) < 1e-12


def test_random_mha_merged_and_zero_heads():
    p = random_mha(3, 4, seed=0, merged=1, zero=1)
    assert np.array_equal(p.W[0], p.W[1]) and not p.v[3].any()
    with pytest.raises(WorkbenchError):
        random_mha(3, 2, merged=1, zero=1)
