"""Noisy oracle: error grows linearly in s below the breakdown level, and the sweep plots."""

import math

import pytest

from attribution.blackbox.noisy import noise_sweep, noisy_mha_oracle
from attribution.blackbox.oracle import random_mha
from core.errors import WorkbenchError


def test_error_is_linear_in_noise_below_breakdown():
    p = random_mha(3, 2, seed=1)
    sw = noise_sweep(p, [1e-12, 1e-11, 1e-10, 1e-9], seed=0)
    assert all(h == 2 for h in sw.heads_recovered)
    assert abs(sw.slope() - 1.0) < 0.1
    ratios = sw.ratio()
    assert max(ratios) / min(ratios) < 3  # error / s is (nearly) a constant K
    fig = sw.plot()
    assert fig.layout.xaxis.type == "log" and len(fig.data) == 3
    assert list(sw.table().columns)[:3] == ["noise", "rel_error_W", "rel_error_v"]


def test_noisy_oracle_declares_noise_and_rejects_negative():
    o = noisy_mha_oracle(random_mha(2, 1), 1e-3)
    assert o.noise == 1e-3 and not o.exact
    with pytest.raises(WorkbenchError):
        noisy_mha_oracle(random_mha(2, 1), -1.0)


def test_large_noise_is_reported_not_crashing():
    sw = noise_sweep(random_mha(2, 1, seed=0), [1.0], seed=0)
    assert sw.rel_error_W[0] > 1e-3 or math.isinf(sw.rel_error_W[0])
