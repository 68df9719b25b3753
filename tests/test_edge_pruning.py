"""Edge pruning (circuits/edges/edge_pruning.py) and its differentiable gated forward
(circuits.intervene.run_soft_masked), on the tiny random Llama."""

from __future__ import annotations

import pytest
import torch

from circuits.graph import CircuitGraph
from core.errors import MethodError

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [{"prompt": "The cat sat on the mat and the cat", "corrupt": "The dog sat on the mat and the dog",
         "target": " sat", "foil": " ran"},
        {"prompt": "One two three one two", "corrupt": "One two four one two", "target": " three",
         "foil": " four"},
        {"prompt": "Mary and John went to the shop; John gave it to", "target": " Mary", "foil": " John",
         "corrupt": "Mary and Anne went to the shop; Anne gave it to"}]


@pytest.fixture(scope="module")
def setup(tiny_llama):
    from circuits.bench.prompts import task_prompts
    from circuits.intervene import References

    g = CircuitGraph.of(tiny_llama)
    ps = task_prompts(tiny_llama, ROWS, batch_size=2)
    return tiny_llama, g, ps, References(tiny_llama, g, ps)


def test_soft_forward_with_all_or_no_edges_is_the_clean_or_the_reference_run(setup):
    from circuits.bench.forward import run_masked_dense
    from circuits.intervene import run_soft_masked

    model, g, ps, refs = setup
    for b in ps.batches:
        ref = refs.of(b)
        with torch.no_grad():
            clean = model.run_with_hooks(b.tokens, fwd_hooks=[])
            corrupt = model.run_with_hooks(b.corrupt, fwd_hooks=[])
            keep_all = run_soft_masked(model, g, b, ref, torch.zeros(g.valid.shape))
            keep_none = run_soft_masked(model, g, b, ref, g.valid.float())
        assert torch.allclose(keep_all, clean, atol=1e-4)
        real = b.real()  # the counterfactual's run, at the prompt's real positions
        assert torch.allclose(keep_none[real], corrupt[real], atol=1e-3)
        # a half-kept float mask agrees with the boolean dense forward where the mask is 0/1
        keep = torch.rand(g.n_edges, generator=torch.Generator().manual_seed(1)) < 0.5
        from circuits.edges.edge_pruning import ablation_matrix

        with torch.no_grad():
            soft = run_soft_masked(model, g, b, ref, ablation_matrix(g, keep.float()))
        hard = run_masked_dense(model, g, b, ref, keep[None], ps.metric)[0]
        assert torch.allclose(b.metric(soft, ps.metric), hard, atol=1e-3)


def test_soft_forward_is_differentiable_in_the_mask(setup):
    from circuits.intervene import run_soft_masked

    model, g, ps, refs = setup
    b = ps.batches[0]
    ablated = (0.5 * g.valid.float()).requires_grad_(True)
    run_soft_masked(model, g, b, refs.of(b), ablated).square().sum().backward()
    assert ablated.grad is not None and torch.isfinite(ablated.grad).all()
    assert ablated.grad[g.valid].abs().sum() > 0 and ablated.grad[~g.valid].abs().sum() == 0


@pytest.mark.parametrize("loss", ["kl", "metric"])
def test_training_lowers_the_loss_and_scores_every_edge(setup, loss):
    from circuits.edges import get_method
    from circuits.edges.edge_pruning import train

    model, g, ps, refs = setup
    grads_before = [p.requires_grad for p in model.tl.parameters()]
    _, hist = train(model, g, ps, refs, steps=30, lr=0.1, l0=0.01, seed=0, loss=loss)
    curve = hist["loss"]
    assert len(curve) == 30 and hist["open"][-1] < hist["open"][0]
    assert sum(curve[-5:]) / 5 < sum(curve[:5]) / 5
    assert [p.requires_grad for p in model.tl.parameters()] == grads_before  # weights frozen only while training
    seen: list[int] = []
    scores = get_method("edge_pruning").scorer()(model, g, ps, refs, on_step=seen.append, steps=3, loss=loss)
    assert scores.shape == (g.n_edges,) and torch.isfinite(scores).all()
    assert ((scores > 0) & (scores < 1)).all() and sum(seen) == ps.n_prompts


def test_bad_parameters_are_one_line_method_errors(setup):
    from circuits.edges import get_method

    model, g, ps, refs = setup
    scorer = get_method("edge_pruning").scorer()
    for bad in ({"steps": 0}, {"steps": 2.5}, {"l0": -1.0}, {"lr": 0.0}, {"lr": float("nan")}, {"seed": -1},
                {"loss": "mse"}):
        with pytest.raises(MethodError) as err:
            scorer(model, g, ps, refs, **bad)
        assert "\n" not in str(err.value) and "edge_pruning" in str(err.value)
    with pytest.raises(MethodError):
        get_method("edge_pruning").check_params({"steps": 0})
