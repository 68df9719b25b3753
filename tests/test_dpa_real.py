"""DPA on the real smollm2-135m: sensible token ranking, completeness, edges at 200 tokens."""

from __future__ import annotations

import pytest
import torch

from attribution.dpa import COMPLETE, dpa_all, dpa_batch, memory_estimate

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("one_thread")]




def test_paris_ranks_france(smollm2):
    enc = smollm2.encode("The capital of France is", " Paris")
    trace = dpa_all(smollm2, enc, levels=("token", "head"))
    scores = dict(zip(trace.tokens, trace["token"].tolist(), strict=True))
    assert trace.tokens == ["The", " capital", " of", " France", " is"]
    content = {t: s for t, s in scores.items() if t != " is"}  # the last position carries the query itself
    assert max(content, key=content.get) == " France", scores
    assert scores[" France"] > 0 and scores[" France"] > scores[" capital"]
    # against a foil city the country is the single most important token
    enc_foil = smollm2.encode("The capital of France is", " Paris", " London")
    foil = dpa_all(smollm2, enc_foil, levels=("token",))
    assert foil.tokens[int(foil["token"].argmax())] == " France"
    # the exact (complete) split sums to the logit on the real model too
    complete = dpa_all(smollm2, enc, levels=("token",), **COMPLETE)
    assert abs(complete.completeness_error()) < 1e-3 * abs(complete.target_logit)


def test_edges_fit_for_200_tokens(smollm2):
    text = "The council met in the old hall to decide what should be done about the bridge. " * 25
    ids = smollm2.to_tokens(text)[0, :200].tolist()
    enc = smollm2.encode(ids, smollm2.top_predictions(ids, 1)[0][0])
    a = smollm2.arch
    assert memory_estimate(smollm2, 200)["qk"] < 1 * 2**30  # far under 24 GiB
    trace = dpa_all(smollm2, enc, levels=("qk", "head"))
    assert tuple(trace["qk"].shape) == (a.n_layers, a.n_heads, 200, 200)
    assert torch.isfinite(trace["qk"]).all()
    assert torch.allclose(trace["qk"].sum(-1), trace["head"], atol=1e-4)


def test_batch_matches_single_prompts(smollm2):
    """Right-padded batches of IOI and fact prompts of different lengths give each prompt its own scores."""
    rows = [("When Mary and John went to the store, John gave a drink to", " Mary", " John"),
            ("The capital of France is", " Paris", None),
            ("Then, Kate and Robert had a long day at the store. Robert gave a ring to", " Kate", " Robert")]
    encs = [smollm2.encode(*row) for row in rows]
    assert len({e.seq_len for e in encs}) == 3
    batch = dpa_batch(smollm2, encs, levels=("token", "head"), batch_size=3)
    for enc, got in zip(encs, batch, strict=True):
        want = dpa_all(smollm2, enc, levels=("token", "head"))
        assert abs(got.target_logit - want.target_logit) < 1e-4
        for level in ("token", "head"):
            assert torch.allclose(got[level], want[level], atol=1e-4, rtol=1e-3), level
