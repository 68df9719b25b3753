"""The disrupt / recover protocol on a tiny model: curve ends, grids, random near 0, ground truth."""

from __future__ import annotations

import math

import pytest
import torch
from test_baselines_tiny import make_examples, tiny_llama

from attribution.faithfulness import (
    TOKEN_GRID,
    component_grid,
    curve_masks,
    evaluate,
    ranking,
    recall_at_k,
    trapezoid,
)
from core.errors import MethodError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=1)


@pytest.fixture(scope="module")
def examples(model):
    return make_examples(model, 60, seed=0)


def test_grids_hold_both_ends_and_are_symmetric():
    assert TOKEN_GRID[0] == 0 and TOKEN_GRID[-1] == 1 and len(TOKEN_GRID) == 11
    g = component_grid(270)
    assert g[0] == 0 and g[-1] == 1 and abs(g[1] - 1 / 270) < 1e-12 and g == sorted(g)
    assert all(abs(a + b - 1) < 1e-12 for a, b in zip(g, reversed(g), strict=True))
    assert abs(trapezoid([1, 1, 1], [0, 0.3, 1]) - 1) < 1e-12


def test_masks_count_items_and_recover_mirrors_disrupt():
    order = torch.tensor([3, 0, 4, 1, 2])
    d, r = curve_masks(order, [0.0, 0.2, 0.5, 1.0])
    assert d.sum(1).tolist() == [0, 1, 3, 5] and r.sum(1).tolist() == [5, 4, 3, 0]  # r(p) ~ d(1 - p)
    assert d[1].nonzero().flatten().tolist() == [3]  # the top item goes first
    assert not r[2][[3, 0]].any() and r[2][[4, 1, 2]].all()  # recover keeps the top


def test_ties_are_broken_at_random_not_by_index():
    gen = torch.Generator().manual_seed(0)
    firsts = {int(ranking(torch.zeros(10), gen)[0]) for _ in range(30)}
    assert len(firsts) > 3
    assert ranking(torch.tensor([0.1, 0.9, 0.5]), gen).tolist() == [1, 2, 0]


def test_curve_ends_and_json(model, examples):
    res = evaluate(model, examples[:6], ["random", "gradient", "atp"], level="token")
    for m in res.methods.values():
        assert m.disrupt_curve[0] == 100 and m.recover_curve[-1] == 100
        assert math.isclose(m.disrupt_curve[-1], m.recover_curve[0], rel_tol=1e-6)
        assert math.isclose(m.total, m.recover_auc - m.disrupt_auc, abs_tol=1e-9)
    out = res.to_json()
    assert out["level"] == "token" and out["n_examples"] == 6 and out["grid"][0] == 0 and out["grid"][-1] == 1
    assert set(out["methods"]["gradient"]) >= {"disrupt_auc", "recover_auc", "total", "attribution_seconds"}
    assert "| gradient |" in res.markdown() and len(res.plot().data) == 6


def test_random_scores_about_zero_and_patching_beats_it(model, examples):
    res = evaluate(model, examples, ["random", "activation_patching", "atp"], level="head")
    rnd = res.methods["random"]
    assert abs(rnd.total) < max(6.0, 3 * rnd.total_std / math.sqrt(rnd.n_examples)), rnd
    assert res.methods["activation_patching"].total > rnd.total + 10
    atp = res.methods["atp"]
    assert atp.spearman is not None and -1 <= atp.spearman <= 1 and 0 <= atp.recall_at_10 <= 1
    assert atp.spearman > 0.2  # first order tracks the ablation on this model
    assert res.methods["activation_patching"].spearman is None  # it is the reference


def test_neuron_level_and_mean_ablation(model, examples):
    zero = evaluate(model, examples[:4], ["atp", "random"], level="neuron")
    mean = evaluate(model, examples[:4], ["atp", "random"], level="neuron", ablation="mean")
    assert zero.grid[1] == pytest.approx(1 / (2 * 64))
    assert zero.methods["atp"].total != mean.methods["atp"].total
    assert zero.methods["atp"].total > zero.methods["random"].total


def test_attention_at_head_level_ranks_from_edges_and_missing_levels_fail(model, examples):
    res = evaluate(model, examples[:3], ["attention_mean"], level="head")
    assert res.methods["attention_mean"].ranked_from == "qk"
    with pytest.raises(MethodError, match="no head level"):
        evaluate(model, examples[:3], ["rollout"], level="head")
    with pytest.raises(MethodError, match="unknown method"):
        evaluate(model, examples[:3], ["bogus"], level="token")
    with pytest.raises(MethodError, match="no level"):
        evaluate(model, examples[:3], ["random"], level="edge")


def test_abs_ranking_reorders_signed_methods_only(model, examples):
    """rank="abs" puts large negative scores first: it changes a signed method's curves, not an unsigned one's
    (the gradient norm), and the ranking is recorded in the result."""
    few = examples[:5]
    signed = evaluate(model, few, ["input_x_gradient", "gradient_norm"], level="token", rank="signed")
    absolute = evaluate(model, few, ["input_x_gradient", "gradient_norm"], level="token", rank="abs")
    assert signed.methods["gradient_norm"].total == pytest.approx(absolute.methods["gradient_norm"].total)
    assert signed.methods["input_x_gradient"].disrupt_curve != absolute.methods["input_x_gradient"].disrupt_curve
    assert absolute.to_json()["rank"] == "abs" and "ranked by abs score" in absolute.markdown()
    with pytest.raises(MethodError, match="unknown rank"):
        evaluate(model, few, ["random"], level="token", rank="sideways")


def test_recall_at_k():
    assert recall_at_k(torch.tensor([5.0, -4, 0, 0]), torch.tensor([1.0, 2, 0, 0]), k=2) == 1.0
    assert recall_at_k(torch.tensor([0.0, 0, 5, 4]), torch.tensor([1.0, 2, 0, 0]), k=2) == 0.0


def test_saved_run(model, examples, monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path))
    from core.store import RunStore

    res = evaluate(model, examples[:3], ["random", "gradient"], level="token")
    run = res.save()
    again = RunStore().get(run.id)
    assert again.kind == "faithfulness" and (again.path / "table.md").exists()
    assert again.result()["methods"]["gradient"]["total"] == pytest.approx(res.methods["gradient"].total)


def test_call_order_rotates_after_the_ground_truth():
    from attribution.faithfulness import TRUTH, _call_order

    methods = [("dpa",), (TRUTH,), ("atp",), ("random",)]
    orders = [[m[0] for m in _call_order(methods, i)] for i in range(4)]
    assert all(o[0] == TRUTH and sorted(o) == sorted(m[0] for m in methods) for o in orders)
    assert {o[1] for o in orders[:3]} == {"dpa", "atp", "random"}  # each method follows patching in turn
    assert orders[3] == orders[0]
