"""scripts/bench_faithfulness.py's timing part (README line 308) on a tiny random model: it compares the
truncated and plain patching results, which the head methods return as a Scored (it crashed on `Scored -
Scored` until it read their scores)."""

from __future__ import annotations

from core.models.tiny import tiny_model


def test_patching_timing_runs_and_truncated_equals_plain():
    from scripts.bench_faithfulness import patching_timing

    model = tiny_model(layers=2, d_model=16, n_ctx=32)
    rows = [{"prompt": [1, 2, 3, 4, 5, 6], "target": 7, "foil": 8}, {"prompt": [2, 3, 4, 5], "target": 1, "foil": 9}]
    out = patching_timing(model, rows, rows, dpa_batch_size=2)
    assert out["max_abs_diff"] < 1e-4  # patching from the ablated layer on gives the plain forward's scores
    assert out["n"] == 2 and out["dpa"] > 0 and out["ratio_plain"] > 0
