"""Integrated gradients reports its completeness gap (Captum's convergence delta), warns when its scores do
not add up, offers baselines other than the zero embedding, and faithfulness tables mark unconverged IG."""

from __future__ import annotations

import warnings

import pytest
import torch
from test_baselines_tiny import PROMPT, tiny_llama

from attribution import attribute
from attribution.baselines.integrated_gradients import ConvergenceWarning, path_points
from core.errors import MethodError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def llama():
    return tiny_llama()


def _metric_with_embedding(m, enc, embed) -> float:
    """logit(F) - logit(C) with every position's embedding replaced by ``embed`` [d_model]."""
    def put(x, hook):
        return embed.expand_as(x).clone()

    with torch.no_grad():
        logits = m.run_with_hooks(enc.tokens, fwd_hooks=[("hook_embed", put)])[0, -1]
    return float(logits[enc.target_id] - logits[enc.foil_id])


def test_every_ig_result_carries_its_convergence_delta(llama):
    enc = llama.encode(PROMPT, "F", "C")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = attribute(llama, PROMPT, "F", "C", method="ig", level="token", steps=8)
    logits = llama.logits(enc.tokens)[0, -1]
    f_x = float(logits[enc.target_id] - logits[enc.foil_id])
    f_0 = _metric_with_embedding(llama, enc, torch.zeros(llama.arch.d_model))
    assert res.target_logit == pytest.approx(f_x, abs=1e-5)
    assert res.baseline_logit == pytest.approx(f_0, abs=1e-5)
    assert res.convergence_delta == pytest.approx(float(res.scores.double().sum()) - (f_x - f_0), abs=1e-4)
    out = res.to_json()
    assert out["convergence_delta"] == res.convergence_delta and out["converged"] == res.converged
    assert res.converged == (abs(res.convergence_delta) <= 0.1 * abs(f_x - f_0))
    # methods without a path carry no gap
    grad = attribute(llama, PROMPT, "F", "C", method="gradient", level="token")
    assert grad.convergence_delta is None and grad.converged is None and "convergence_delta" not in grad.to_json()


def test_unconverged_ig_warns_and_a_converged_one_does_not(llama):
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = attribute(llama, PROMPT, "F", "C", method="ig", level="token", steps=2)
    assert res.converged is False
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = attribute(llama, PROMPT, "F", "C", method="ig", level="token", steps=64, baseline="mean")
    assert res.converged is True


def test_baselines_and_schedules(llama):
    enc = llama.encode(PROMPT, "F", "C")
    mean = llama.W_E.mean(0)
    res = attribute(llama, PROMPT, "F", "C", method="ig", level="token", steps=64, baseline="mean")
    assert res.baseline_logit == pytest.approx(_metric_with_embedding(llama, enc, mean), abs=1e-5)
    res = attribute(llama, PROMPT, "F", "C", method="ig", level="token", steps=64, baseline=3)
    assert res.baseline_logit == pytest.approx(_metric_with_embedding(llama, enc, llama.W_E[3]), abs=1e-5)
    for schedule in ("uniform", "cubic"):
        alphas, weights = path_points(50, schedule)
        assert float(weights.sum()) == pytest.approx(1.0, abs=2e-3)  # a quadrature of the unit interval
        assert 0 < float(alphas.min()) and float(alphas.max()) < 1
    assert float(path_points(50, "cubic")[0][:17].max()) < 0.04  # a third of the points near the baseline
    for bad in ({"baseline": "median"}, {"baseline": 10**6}, {"schedule": "log"}, {"baseline": "pad"}):
        with pytest.raises(MethodError):  # the toy's symbol tokenizer has no pad token
            attribute(llama, PROMPT, "F", "C", method="ig", level="token", **bad)


def test_faithfulness_marks_unconverged_ig(llama):
    from attribution.faithfulness import evaluate

    rows = [{"prompt": PROMPT, "target": "F", "foil": "C"}, {"prompt": "B C D A =", "target": "A", "foil": "D"}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = evaluate(llama, rows, ["integrated_gradients", "random"], level="token",
                       params={"ig": {"steps": 2}})
    ig, rnd = res.methods["integrated_gradients"], res.methods["random"]
    assert ig.unconverged == 2 and ig.convergence_gap > 0.1
    assert rnd.unconverged is None and "unconverged" not in rnd.summary()
    assert res.to_json()["methods"]["integrated_gradients"]["unconverged"] == 2
    assert "unconverged" in res.markdown().splitlines()[2]
    assert all("relative_gap" in r for r in res.per_example if r["method"] == "integrated_gradients")


def test_keep_first_holds_the_first_position_at_its_embedding(llama):
    enc = llama.encode(PROMPT, "F", "C")
    res = attribute(llama, PROMPT, "F", "C", method="ig", level="token", steps=32, baseline="mean",
                    keep_first=True)
    assert float(res.scores[0]) == 0.0 and res.scores[1:].abs().max() > 0
    mean = llama.W_E.mean(0)

    def put(x, hook):
        out = mean.expand_as(x).clone()
        out[:, 0] = x[:, 0]
        return out

    with torch.no_grad():
        logits = llama.run_with_hooks(enc.tokens, fwd_hooks=[("hook_embed", put)])[0, -1]
    assert res.baseline_logit == pytest.approx(float(logits[enc.target_id] - logits[enc.foil_id]), abs=1e-5)
    assert res.convergence_delta == pytest.approx(
        float(res.scores.double().sum()) - (res.target_logit - res.baseline_logit), abs=1e-4)
