"""Edge selection options (circuits/bench/select.py): connected where asked, ratio and bootstrap rules."""

from __future__ import annotations

import pytest
import torch

from circuits.bench.select import SELECTIONS, bootstrapped_scores, is_connected, select_edges
from circuits.graph import CircuitGraph
from core.errors import MethodError


@pytest.fixture
def graph_scores():
    g = CircuitGraph(3, 2, True)
    gen = torch.Generator().manual_seed(1)
    return g, torch.randn(g.n_edges, generator=gen)


@pytest.mark.parametrize("selection", SELECTIONS)
def test_every_selection_keeps_the_circuit_connected(graph_scores, selection):
    g, scores = graph_scores
    chunks = scores[None] + 0.1 * torch.randn(4, g.n_edges, generator=torch.Generator().manual_seed(2))
    for n in (3, 10, 40, g.n_edges):
        for absolute in (False, True):
            mask = select_edges(g, scores, n, selection, absolute=absolute, chunks=chunks)
            assert int(mask.sum()) <= n
            assert is_connected(g, mask)
    assert int(select_edges(g, scores, g.n_edges, selection, chunks=chunks).sum()) == g.n_edges


def test_without_pruning_a_top_k_circuit_can_dangle(graph_scores):
    g, _ = graph_scores
    scores = torch.zeros(g.n_edges)
    scores[g.edge_id("L0.H0", "L1.H1.q")] = 5.0  # L1.H1 writes nowhere in this circuit
    raw = select_edges(g, scores, 1, "topk", connected=False)
    assert int(raw.sum()) == 1 and not is_connected(g, raw)
    assert not select_edges(g, scores, 1, "topk").any()


def test_positive_ratio_fills_the_circuit_with_positive_edges_first():
    g = CircuitGraph(1, 1, False)  # embed -> L0.H0.{q,k,v}, embed -> logits, L0.H0 -> logits
    scores = torch.zeros(g.n_edges)
    scores[g.edge_id("embed", "logits")] = -10.0
    scores[g.edge_id("L0.H0", "logits")] = 1.0
    scores[g.edge_id("embed", "L0.H0.v")] = 0.5
    top = select_edges(g, scores, 2, "topk", absolute=True, connected=False)
    assert bool(top[g.edge_id("embed", "logits")])
    ratio = select_edges(g, scores, 2, "positive_ratio", ratio=1.0, connected=False)
    assert {g.edge_name(e) for e in torch.nonzero(ratio).flatten().tolist()} == {
        ("L0.H0", "logits"), ("embed", "L0.H0.v")}
    with pytest.raises(MethodError):
        select_edges(g, scores, 2, "positive_ratio", ratio=1.5)


def test_bootstrap_ranks_consistent_edges_before_noisy_ones():
    chunks = torch.tensor([[1.0, 3.0, -2.0], [1.1, -2.5, -2.1], [0.9, 2.8, -1.9], [1.0, -2.9, -2.0]])
    s = bootstrapped_scores(chunks)
    # edge 1 has the largest mean |score| chunk by chunk but flips sign: it ranks last
    assert s[0] > 0 and s[2] < 0 and abs(s[1]) < min(abs(s[0]), abs(s[2]))
    with pytest.raises(MethodError):
        bootstrapped_scores(chunks[:1])
