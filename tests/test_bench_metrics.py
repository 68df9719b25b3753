"""MIB's metrics (circuits/bench/metrics.py): CPR and CMD equal their definitions on hand-built curves, the
grid's sizes, the normalisation, bootstrap intervals, node-level circuits and the fast masked forward."""

from __future__ import annotations

import pytest
import torch

from circuits.bench import metrics as mib
from circuits.graph import CircuitGraph
from core.errors import MethodError


def test_cpr_cmd_equal_their_definitions_on_hand_built_curves():
    # three points: trapezoids by hand (an overshoot counts as distance from 1 in CMD)
    xs, f = [0.25, 0.5, 1.0], [0.0, 2.0, 1.0]
    assert mib.area_under(xs, f) == pytest.approx(0.25 * (0 + 2) / 2 + 0.5 * (2 + 1) / 2)  # 1.0
    assert mib.area_from_1(xs, f) == pytest.approx(0.25 * (1 + 1) / 2 + 0.5 * (1 + 0) / 2)  # 0.5
    # on MIB's grid: a perfect curve, and the identity f(x) = x (trapezoids are exact for a line)
    grid = list(mib.GRID)
    assert mib.area_under(grid, [1.0] * 10) == pytest.approx(0.999)
    assert mib.area_from_1(grid, [1.0] * 10) == 0.0
    assert mib.area_under(grid, grid) == pytest.approx((1 - 0.001 ** 2) / 2)
    assert mib.area_from_1(grid, grid) == pytest.approx(0.999 - (1 - 0.001 ** 2) / 2)
    # linear axis, not log: moving the value at 0.5 moves CPR by half the two neighbouring widths
    bumped = [1.0] * 8 + [0.0, 1.0]
    assert mib.area_under(grid, bumped) == pytest.approx(0.999 - (0.5 - 0.2) / 2 - (1 - 0.5) / 2)
    with pytest.raises(MethodError):
        mib.area_under([0.5, 0.2], [1, 1])


def test_grid_sizes_and_normalisation():
    assert mib.sizes(mib.GRID, 123_211) == [123, 246, 616, 1232, 2464, 6160, 12321, 24642, 61605, 123211]
    assert mib.sizes(mib.GRID, 301)[:4] == [0, 0, 1, 3]  # int(), as MIB: the smallest node circuits are empty
    values = torch.tensor([[2.0, 4.0, 6.0]])
    out = mib.normalized(values, torch.tensor([6.0]), torch.tensor([2.0]))
    assert out.tolist() == [[0.0, 0.5, 1.0]]


def test_bootstrap_collapses_without_prompt_variation_and_brackets_the_estimate():
    fractions = [0.25, 0.5, 1.0]
    # masks: 3 circuits, full, empty; every prompt identical -> every resample gives the same areas
    per = torch.tensor([[0.2], [0.6], [1.0], [1.0], [0.0]]).repeat(1, 8).double()
    ci = mib.bootstrap(per, 3, 4, [0, 1, 2], [0, 1, 2], fractions, n_boot=50)
    cpr = mib.area_under(fractions, [0.2, 0.6, 1.0])
    assert ci["cpr"] == pytest.approx([cpr, cpr])
    noisy = per + torch.linspace(-0.1, 0.1, 8).double()[None] * torch.tensor([[1.0], [3.0], [0.0], [0.0], [0.0]])
    ci = mib.bootstrap(noisy.double(), 3, 4, [0, 1, 2], [0, 1, 2], fractions, n_boot=200)
    assert ci["cpr"][0] < cpr < ci["cpr"][1]


def test_node_level_circuits_keep_chosen_nodes_outgoing_edges_and_are_connected():
    g = CircuitGraph(2, 2, True)
    scores = torch.zeros(len(g.senders))
    for name in ("embed", "L0.H1", "L1.mlp"):
        scores[g.sender_index[name]] = 1.0
    mask = mib.top_nodes(g, scores, 3, absolute=False)
    names = {g.edge_name(e) for e in torch.nonzero(mask).flatten().tolist()}
    assert names == {("embed", "L0.H1.q"), ("embed", "L0.H1.k"), ("embed", "L0.H1.v"), ("embed", "L1.mlp"),
                     ("L0.H1", "L1.mlp"), ("L1.mlp", "logits"), ("embed", "logits"), ("L0.H1", "logits")}
    # without the embedding nothing is reachable: MIB's prune empties the circuit
    scores[g.sender_index["embed"]] = -5.0
    assert not mib.top_nodes(g, scores, 2, absolute=False).any()
    assert mib.top_nodes(g, scores, 3, absolute=True).any()


def test_dense_masked_forward_equals_the_sparse_one(tiny_llama):
    from circuits.bench.forward import run_masked_dense
    from circuits.bench.prompts import task_prompts
    from circuits.intervene import References, run_masked

    torch.set_num_threads(1)
    rows = [{"prompt": "The cat sat on the mat and the cat", "corrupt": "The dog sat on the mat and the dog",
             "target": " sat", "foil": " ran"},
            {"prompt": "One two three one two", "corrupt": "One two four one two", "target": " three",
             "foil": " four"}]
    g = CircuitGraph.of(tiny_llama)
    ps = task_prompts(tiny_llama, rows, batch_size=2)
    refs = References(tiny_llama, g, ps)
    b = ps.batches[0]
    gen = torch.Generator().manual_seed(0)
    keep = torch.rand(3, g.n_edges, generator=gen) < torch.tensor([[0.1], [0.5], [0.9]])
    dense = run_masked_dense(tiny_llama, g, b, refs.of(b), keep, "logit_diff")
    sparse = run_masked(tiny_llama, g, b, refs.of(b), keep, "logit_diff")
    assert torch.allclose(dense, sparse, atol=1e-4)


def test_known_circuit_auroc_is_one_for_an_oracle_and_low_for_its_inverse():
    from circuits.bench.known import known_mask, mib_auroc, rank_auroc

    g = CircuitGraph(2, 1, False)  # ioi-attn-2l1h's graph
    known = known_mask(g, "ioi-attn-2l1h")
    oracle = known.float() + 0.01 * torch.arange(g.n_edges).float() / g.n_edges
    assert rank_auroc(oracle, known) == 1.0
    assert rank_auroc(1 - oracle, known) == 0.0
    r = mib_auroc(g, oracle, known)
    assert r["tpr"][-1] == 1.0 and r["fpr"][-1] == 1.0 and r["auroc"] > 0.9


def test_the_ffn_toys_known_circuit_carries_the_answer_and_its_complement_nothing():
    """modadd-dense's known circuit (circuits/bench/known.py) is a fact about the model, checked by patching."""
    import workbench as wb
    from circuits.bench.forward import prompt_metrics
    from circuits.bench.known import known_mask
    from circuits.counterfactual import prepare
    from circuits.intervene import References
    from circuits.toy.prompts import task_rows

    m = wb.load("modadd-dense")
    g = CircuitGraph.of(m)
    ps = prepare(m, task_rows(m)[:80])
    known = known_mask(g, "modadd-dense")
    full, empty, circuit, rest = prompt_metrics(m, g, ps, References(m, g, ps),
                                                torch.stack([torch.ones_like(known), ~torch.ones_like(known),
                                                             known, ~known])).mean(1).tolist()
    assert int(known.sum()) == 13
    assert (circuit - empty) / (full - empty) > 0.9
    assert abs((rest - empty) / (full - empty)) < 0.05
