"""FFN extension: exact W and local v, functional agreement inside the activation region."""

from attribution.blackbox.ffn import random_ffn, recover_ffn


def test_ffn_recovery_is_functionally_equivalent_in_region():
    params = random_ffn(4, 2, seed=0)
    res = recover_ffn(params, 2, seed=0, n_fresh=60)
    assert res.pattern_changes_during_queries == 0  # the condition of the extension held
    assert res.recovery.queries == 4 * 2 * 16 - 4 + 1
    assert res.max_rel_error_W < 1e-12 and res.max_rel_error_v_local < 1e-12
    assert res.agreement_region < 1e-9
    # outside the region the pattern differs; the report says how often and how much
    assert 0.0 <= res.fraction_global_in_region <= 1.0
    assert res.to_json()["n_fresh"] == 60
