"""The seed papers' findings (shared/specs/toy_tasks.md), measured on the shipped checkpoints.

Thresholds were fixed from the papers' claims before measuring. Findings that did not reproduce
are xfail with the measured numbers in the reason; they were not tuned until they passed.
"""

import pytest

from circuits.toy import findings


@pytest.fixture(scope="module")
def ioi1():
    return findings.ioi_heads("ioi-attn-1l2h")


@pytest.fixture(scope="module")
def ioi2():
    return findings.ioi_heads("ioi-attn-2l1h") | {"comp": findings.ioi_composition("ioi-attn-2l1h")}


@pytest.fixture(scope="module")
def carry():
    return {
        n: findings.carry_redistribution(n) for n in ("carry-dense", "carry-moe-learned", "carry-moe-frozen")
    }


@pytest.fixture(scope="module")
def modadd():
    return {n: findings.modadd_fourier(n) for n in ("modadd-dense", "modadd-glu")}


def test_ioi_1l2h_is_perfect(ioi1):
    assert ioi1["accuracy"] == 1.0


@pytest.mark.xfail(
    reason="measured on ioi-attn-1l2h (seed 0): mean-ablating L0H0 -> 0.908, L0H1 -> 0.868 "
    "test accuracy (zero: 0.908/0.908; resample: 0.421/0.368; reference = train split). "
    "Both heads learned the same QK anti-match + copy circuit (redundant), not an additive/contrastive split."
)
def test_ioi_1l2h_each_head_is_needed(ioi1):
    assert max(ioi1["mean"].values()) < 0.75


def test_ioi_2l1h_each_layer_head_is_needed(ioi2):
    assert ioi2["accuracy"] == 1.0
    assert max(ioi2["mean"].values()) < 0.75


def test_ioi_2l1h_composes_through_query(ioi2):
    c = ioi2["comp"]
    # path patching L0H0 -> L1H0: the effect travels through L1H0's query, not its key or value
    assert c["path_q"] > 0.05 and c["path_q"] > 3 * max(abs(c["path_k"]), abs(c["path_v"]))


@pytest.mark.xfail(
    reason="measured per-digit accuracy drop ratio attention/FFN (mean ablation, 1000 test sums): "
    "dense 1.12, MoE learned top-1 0.95, MoE frozen top-1 1.16 (carried digits: 1.17, 1.04, 1.27). "
    "Both sublayers are needed for nearly every digit in these 1-layer models; no clear shift to "
    "attention with learned routing."
)
def test_carry_moe_shifts_computation_to_attention(carry):
    assert carry["carry-moe-learned"]["attn_over_ffn"] > carry["carry-dense"]["attn_over_ffn"]


def test_carry_frozen_router_nearly_matches_learned(carry):
    assert carry["carry-moe-frozen"]["accuracy"] >= carry["carry-moe-learned"]["accuracy"] - 0.05


@pytest.mark.xfail(
    reason="measured: per-neuron Fourier concentration dense 0.829, GLU 0.888 (key freqs "
    "[12, 13, 19] vs [15, 19]); subspace concentration 0.963 vs 0.961. GLU did not lower "
    "per-neuron concentration on p=41."
)
def test_glu_rotates_fourier_out_of_neurons(modadd):
    assert modadd["modadd-glu"]["per_neuron"] < modadd["modadd-dense"]["per_neuron"]


def test_glu_keeps_fourier_subspace(modadd):
    for r in modadd.values():
        assert r["accuracy"] == 1.0
    assert modadd["modadd-glu"]["subspace"] > 0.8 and modadd["modadd-dense"]["subspace"] > 0.8


@pytest.fixture(scope="module")
def markov():
    return findings.markov_stages("markov-3h")


@pytest.mark.xfail(
    reason="measured on markov-3h (lags 1, 2, 4 weighted 3, 2, 1; 1500 steps): final best lag per "
    "head [1, 2, 1]; lag 4 never claimed; test loss 0.644 vs Bayes 0.580."
)
def test_markov_heads_specialise_one_lag_each(markov):
    assert len(set(markov["final_best_lag"])) == len(markov["final_best_lag"])


def test_markov_heads_first_compete_then_split(markov):
    stages = [s for s in markov["stages"] if s["step"] > 0]
    compete = [s["step"] for s in stages if set(s["best_lag"]) == {markov["top_lag"]}]
    assert compete, markov["stages"]  # a phase where every head sits on the most important lag
    later = [s for s in stages if s["step"] > compete[0] and len(set(s["best_lag"])) > 1]
    assert later  # followed by heads taking different lags


def test_icl_regression_learns_in_context():
    r = findings.icl_fit("icl-regression")
    assert r["test_loss"] < 0.5 * r["baseline_loss"]
