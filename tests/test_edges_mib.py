"""MIB's other two edge methods: EAP-IG-activations (eap_ig_act) and information flow routes (ifr)."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from circuits.counterfactual import prepare
from circuits.discover import circuit, estimate
from circuits.edges import get_method
from circuits.edges.eap_ig_act import layer_slots
from circuits.edges.ifr import shares
from circuits.graph import CircuitGraph
from circuits.intervene import References, run_masked
from circuits.toy.prompts import task_rows
from core.errors import MethodError

pytestmark = pytest.mark.usefixtures("one_thread")
ROW = {"prompt": "The capital of France is", "target": " Paris", "foil": " Rome"}


@pytest.fixture(scope="module")
def ioi2():
    m = wb.load("ioi-attn-2l1h")
    return m, task_rows(m)[:12]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from attribution.dpa.tiny import save_tiny_llama, tiny_gpt2

    llama = wb.load(str(save_tiny_llama(tmp_path_factory.mktemp("mib") / "m", seed=3, layers=2)))
    return [llama, tiny_gpt2(seed=4, act_fn="gelu_new", layers=2)]


def _scores(m, rows, method, **kw):
    return circuit(m, rows, method=method, evaluate=False, **kw).scores


def test_eap_ig_act_one_step(tiny):
    """alpha = 1 only: pool=own takes each edge's gradient at the clean point, so it is EAP; pool=all (MIB)
    averages in passes that cut the gradient through a downstream layer, so only the edges into the logits
    (downstream of every layer) keep EAP's value."""
    for m in tiny:
        eap = _scores(m, [ROW], "eap", ablation="zero")
        own = _scores(m, [ROW], "eap_ig_act", ablation="zero", steps=1, pool="own")
        mib = _scores(m, [ROW], "eap_ig_act", ablation="zero", steps=1)
        tol = 1e-4 * float(eap.abs().max())
        assert float(eap.abs().max()) > 1e-3
        assert torch.allclose(own, eap, atol=tol), m.name
        g = CircuitGraph.of(m)
        into = torch.tensor([g.edge_name(e)[1] == "logits" for e in range(g.n_edges)])
        assert torch.allclose(mib[into], eap[into], atol=tol), m.name
        assert float((mib[~into] - eap[~into]).abs().max()) > 100 * tol, m.name


def test_eap_ig_act_own_is_complete_per_layer(ioi2):
    """pool=own is integrated gradients along one layer's path: a layer's edge scores sum to the metric's
    drop when that layer's output is patched to the counterfactual's, closer with more steps."""
    m, rows = ioi2
    g = CircuitGraph.of(m)
    ps = prepare(m, rows)
    refs = References(m, g, ps)
    keep = torch.ones(len(layer_slots(g)), g.n_edges, dtype=torch.bool)
    dense_valid = g.dense(torch.arange(g.n_edges, dtype=torch.float64))
    for i, node in enumerate(layer_slots(g)):
        out_of = dense_valid[node][g.valid[node]].long()  # every edge leaving the layer's senders
        keep[i, out_of] = False
    drops = torch.zeros(len(keep), dtype=torch.float64)
    for batch in ps.batches:
        ref = refs.of(batch)
        full = run_masked(m, g, batch, ref, torch.ones(1, g.n_edges, dtype=torch.bool), ps.metric)
        drops += (full - run_masked(m, g, batch, ref, keep, ps.metric)).sum(1).double()
    drops /= ps.n_prompts

    def per_layer(scores):
        dense = g.dense(scores.double())
        return torch.stack([dense[node].sum() for node in layer_slots(g)])

    coarse = per_layer(_scores(m, rows, "eap_ig_act", steps=1, pool="own"))
    fine = per_layer(_scores(m, rows, "eap_ig_act", steps=32, pool="own"))
    assert float(drops.abs().max()) > 1.0
    err_fine = float((fine - drops).abs().max())
    assert err_fine < 0.05 * float(drops.abs().max())
    assert err_fine < 0.5 * float((coarse - drops).abs().max())


def test_eap_ig_act_table_and_bad_input(ioi2, monkeypatch):
    m, rows = ioi2
    # a clock that moves one second per reading, so the two estimates differ by their pass counts alone
    # (two real timings compared flaked on a loaded CI machine)
    ticks = iter(range(10**6))
    monkeypatch.setattr("circuits.discover.time.perf_counter", lambda: float(next(ticks)))
    g = CircuitGraph.of(m)
    ps = prepare(m, rows)
    # the cost grows with the layers it moves: 1 + 2 x 3 x 5 passes on 2 attention layers, eap_ig 16
    assert get_method("eap_ig_act").passes({"steps": 5}, layers=3) == 46
    assert estimate(m, g, ps, "eap_ig_act", {"steps": 5}) > estimate(m, g, ps, "eap_ig", {"steps": 5})
    with pytest.raises(MethodError, match="pool"):
        circuit(m, rows, method="eap_ig_act", pool="some")
    with pytest.raises(MethodError, match="eap_ig_act parameter steps"):
        circuit(m, rows, method="eap_ig_act", steps=0)


def test_ifr_shares_by_hand():
    x = torch.tensor([[[2.0, 0.0]]])  # [batch, pos, d]
    parts = torch.tensor([[[[2.0, 0.0]]], [[[1.0, 1.0]]], [[[-1.0, 0.0]]], [[[0.0, 0.0]]]])
    # proximities max(0, 2 - |x - c|_1): 2, 0, 0, 0 -> the whole share to the part equal to x
    assert shares(x, parts)[:, 0, 0].tolist() == [1.0, 0.0, 0.0, 0.0]
    s = shares(x, torch.tensor([[[[1.0, 0.0]]], [[[1.5, 0.5]]]]))[:, 0, 0]  # proximities 1 and 1
    assert s.tolist() == pytest.approx([0.5, 0.5])


def test_ifr_edges_are_proportions(tiny, ioi2):
    """Every score >= 0, a receiver's scores sum to 1 over its senders (each prompt's position-mean of
    proportions that sum to 1), and a receiver that reads only the embedding gives it everything."""
    for m, rows in [(tiny[0], [ROW]), (tiny[1], [ROW]), (ioi2[0], ioi2[1])]:
        res = circuit(m, rows, method="ifr", ablation="zero", evaluate=False)
        g, dense = res.graph, res.graph.dense(res.scores.double())
        assert float(res.scores.min()) >= 0.0
        assert torch.allclose(dense.sum(0), torch.ones(len(g.receivers), dtype=torch.float64), atol=1e-5), m.name
        assert res.score_of("embed", "L0.H0.q") == pytest.approx(1.0, abs=1e-6)
        assert float(res.scores.max()) < 1.0 + 1e-6 and int((res.scores > 1e-3).sum()) > len(g.receivers)


def test_text_parameters_refused_before_any_model():
    """A text parameter's value is checked against the table (what the bench and the CLI check before a model
    loads), and the table's allowed values are the ones the scorers' modules accept."""
    from attribution.dpa.params import ACT_MODES, NORM_MODES
    from circuits.edges.eap_ig_act import POOLS
    from circuits.edges.edge_pruning import LOSSES

    assert get_method("eap_ig_act").choices["pool"] == POOLS
    assert get_method("edge_pruning").choices["loss"] == LOSSES
    for name in ("dpa", "dpa_norm", "dpa_cf"):
        assert get_method(name).choices == {"act_mode": ACT_MODES, "norm": NORM_MODES}
    with pytest.raises(MethodError, match="pool='some' must be one of all, own"):
        get_method("eap_ig_act").check_params({"pool": "some"})
    with pytest.raises(MethodError, match="norm='loose'"):
        get_method("dpa_norm").check_params({"norm": "loose"})
    assert get_method("eap_ig_act").check_params({"pool": "own"})["pool"] == "own"
