"""Black-box recovery at its limits: a head count or bound below the truth says so (HeadCountError),
distinct from noise above the breakdown level (NoiseBreakdownError); large noise is a one-line error,
never an internal one; results carry an error estimate that tracks the true error."""

import math

import pytest

from attribution.blackbox.canonical import canonicalize, compare_heads
from attribution.blackbox.noisy import noise_sweep, noisy_mha_oracle
from attribution.blackbox.oracle import Oracle, mha_oracle, random_mha
from attribution.blackbox.recovery import HeadCountError, NoiseBreakdownError, recover
from core.errors import WorkbenchError
from tests.cli_helpers import assert_bad, run_cli


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("heads,bound,flag", [(2, None, "--heads 2"), (1, None, "--heads 1"), (2, 2, "--bound 2")])
def test_head_count_or_bound_below_truth_is_named(exact, heads, bound, flag):
    oracle = mha_oracle(random_mha(3, 3, seed=0), exact=exact)  # 3 true heads
    with pytest.raises(HeadCountError) as exc:
        recover(oracle, heads, bound=bound, seed=0, dps=30)
    msg = str(exc.value)
    assert f"{flag} is below the oracle's number of heads" in msg and "needs 3 poles" in msg
    assert "noise" not in msg.split(";")[0] and "\n" not in msg


def test_undercount_under_noise_is_still_a_head_count():
    p = random_mha(3, 3, seed=0)
    with pytest.raises(HeadCountError):
        recover(noisy_mha_oracle(p, 1e-12, seed=0), 2, seed=0, dps=30)


@pytest.mark.parametrize("noise", [1e-8, 1e-7])
def test_noise_above_breakdown_is_blamed_on_noise_not_heads(noise):
    # d=3, H=2, seed 0 is ill-conditioned (K ~ 1e7): it breaks down between 1e-9 and 1e-8
    with pytest.raises(NoiseBreakdownError) as exc:
        recover(noisy_mha_oracle(random_mha(3, 2, seed=0), noise, seed=0), 2, seed=0, dps=30)
    msg = str(exc.value)
    assert f"noise {noise:g} is above this instance's breakdown level" in msg
    assert "head count is not the problem" in msg and "\n" not in msg


def test_error_estimate_tracks_the_true_error():
    p = random_mha(4, 2, seed=0)
    for noise in (1e-12, 1e-9):
        rec = recover(noisy_mha_oracle(p, noise, seed=0), 2, seed=0, dps=30)
        cmp = compare_heads(canonicalize(p), rec.W, rec.v)
        true = max(cmp.max_rel_error_W, cmp.max_rel_error_v)
        assert rec.reliable and 0.1 < rec.error_estimate / true < 10
        assert rec.to_json()["reliable"] is True
    exact = recover(mha_oracle(p, exact=True), 2, seed=0, dps=30)
    assert exact.error_estimate == 0.0 and exact.reliable


def test_near_breakdown_result_is_marked_unreliable():
    rec = recover(noisy_mha_oracle(random_mha(3, 2, seed=0), 1e-9, seed=0), 2, seed=0, dps=30)
    assert not rec.reliable and math.isinf(rec.error_estimate)  # true error 1.3e-2


def test_not_the_attention_model_is_neither():
    def f(X):
        return float(sum(abs(x) ** 1.5 for x in X[-1]) + 0.3 * len(X) ** 0.5)

    with pytest.raises(WorkbenchError) as exc:
        recover(Oracle(f, 2, name="not-attention"), 1, seed=0, dps=30)
    assert type(exc.value) is WorkbenchError  # neither HeadCountError nor NoiseBreakdownError
    assert "does not follow the attention model" in str(exc.value)


def test_sweep_records_outcomes_and_reliable_level():
    sw = noise_sweep(random_mha(4, 2, seed=0), [1e-12, 1e-9, 1e-5], seed=0)
    assert sw.outcome[:2] == ["ok", "ok"] and sw.outcome[2] == "NoiseBreakdownError"
    assert sw.reliable_up_to() == 1e-9
    assert sw.to_json()["reliable_up_to"] == 1e-9 and "outcome" in sw.table().columns


@pytest.mark.parametrize("noise", ["1e-5", "1e-3"])
def test_cli_large_noise_is_one_line(monkeypatch, capsys, tmp_path, noise):
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path))
    code, out, err = run_cli(monkeypatch, capsys, "recover-heads", "--d", "3", "--heads", "2", "--noise", noise,
                             "--no-save")
    assert_bad(code, err, "noise")
    assert "internal error" not in err and "breakdown level" in err


def test_cli_heads_below_truth_is_one_line(monkeypatch, capsys, tmp_path):
    f = tmp_path / "three_heads.py"
    f.write_text("from attribution.blackbox.oracle import random_mha, mha_value\n"
                 "P = random_mha(3, 3, seed=0)\n"
                 "def f(X):\n    return mha_value(P, X, exact=False)\n")
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path))
    code, out, err = run_cli(monkeypatch, capsys, "recover-heads", "--d", "3", "--heads", "2", "--oracle",
                             f"{f}:f", "--no-save")
    assert_bad(code, err, "--heads 2 is below the oracle's number of heads")
