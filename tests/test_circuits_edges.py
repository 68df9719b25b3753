"""Edge-level circuits: the graph, the edge-ablated forward, DPA edges against a brute-force reference,
and the toy zoo's known circuits found by every method."""

from __future__ import annotations

import pytest
import torch
from circuit_checks import masked_ends

import workbench as wb
from circuits.counterfactual import prepare
from circuits.discover import CircuitResult, circuit
from circuits.edges.reference import dpa_edge_reference
from circuits.graph import CircuitGraph
from circuits.intervene import References, head_slot
from circuits.toy.prompts import task_rows
from core.errors import MethodError, PromptError, RangeError

pytestmark = pytest.mark.usefixtures("one_thread")
METHODS = ("eap", "eap_ig", "dpa", "activation_patching")


def test_graph_counts_smollm2_shape():
    g = CircuitGraph(30, 9, True)  # smollm2-135m: 30 layers x 9 heads, an MLP per layer
    assert g.summary() == {"n_nodes": 302, "n_edges": 123_211, "n_senders": 301, "n_receivers": 841}
    assert g.edge_name(0) == ("embed", "L0.H0.q")
    assert g.edge_name(g.n_edges - 1) == ("L29.mlp", "logits")
    # a head input reads the embedding and every earlier head and MLP; an MLP also reads its own layer's heads
    assert int(g.valid[:, g.receiver_index["L3.H5.k"]].sum()) == 1 + 3 * 10
    assert int(g.valid[:, g.receiver_index["L3.mlp"]].sum()) == 1 + 3 * 10 + 9
    assert g.edge_id("L2.mlp", "L3.H5.q") >= 0
    with pytest.raises(RangeError, match="no edge"):
        g.edge_id("L3.H5", "L3.H4.q")
    with pytest.raises(RangeError, match="no sender"):
        g.edge_id("L99.H0", "logits")


def test_prune_connected_leaves_no_dangling_node():
    g = CircuitGraph(3, 2, True)
    mask = torch.zeros(g.n_edges, dtype=torch.bool)
    for src, dst in [("embed", "L0.H0.v"), ("L0.H0", "L2.H1.q"), ("L2.H1", "logits"),  # a full path
                     ("L1.H1", "L2.mlp"),  # L1.H1 reads nothing in the circuit, L2.mlp reaches nothing
                     ("embed", "L1.H0.k")]:  # L1.H0 writes to nothing in the circuit
        mask[g.edge_id(src, dst)] = True
    kept = g.prune_connected(mask)
    assert {g.edge_name(e) for e in torch.nonzero(kept).flatten().tolist()} == {
        ("embed", "L0.H0.v"), ("L0.H0", "L2.H1.q"), ("L2.H1", "logits")}
    scores = torch.randn(g.n_edges, generator=torch.Generator().manual_seed(0))
    greedy = g.greedy(scores, 15)
    assert 0 < int(greedy.sum()) <= 15 and bool((g.prune_connected(greedy) == greedy).all())


@pytest.fixture(scope="module")
def ioi2():
    m = wb.load("ioi-attn-2l1h")
    return m, task_rows(m)


def test_masked_forward_keeps_clean_and_reference_runs(ioi2):
    m, rows = ioi2
    clean, corrupt = masked_ends(m, rows[:20])
    assert float((clean - corrupt).abs().min()) > 1.0  # the counterfactual flips the answer


def test_eap_is_exact_on_edges_into_the_logits(ioi2):
    """No final norm: the logits are linear in what reaches them, so EAP equals path patching there."""
    m, rows = ioi2
    eap = circuit(m, rows[:30], method="eap", evaluate=False)
    exact = circuit(m, rows[:30], method="activation_patching", evaluate=False)
    into = [e for e in range(eap.graph.n_edges) if eap.graph.edge_name(e)[1] == "logits"]
    assert torch.allclose(eap.scores[into], exact.scores[into], rtol=1e-4, atol=1e-4)
    assert float(exact.scores[into].abs().max()) > 1.0


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from attribution.dpa.tiny import save_tiny_llama, tiny_gpt2

    llama = wb.load(str(save_tiny_llama(tmp_path_factory.mktemp("edges") / "m", seed=1, layers=3)))
    return [llama, tiny_gpt2(seed=2, act_fn="gelu_new", layers=3)]


@pytest.mark.parametrize("params", [{}, {"w_q": 0.7, "w_k": 0.1, "w_v": 0.3, "w_gate": 0.2, "w_up": 0.9}])
def test_dpa_edges_equal_brute_force_reference(tiny_models, params):
    """RoPE, grouped-query attention, RMSNorm and SwiGLU (Llama); LayerNorm, GELU, learned positions (GPT-2)."""
    from attribution.dpa.engine import dpa_all

    row = {"prompt": "The capital of France is", "target": " Paris", "foil": " Rome"}
    for m in tiny_models:
        res = circuit(m, [row], method="dpa", ablation="zero", evaluate=False, **params)
        enc = m.encode(row["prompt"], row["target"], row["foil"])
        ref = dpa_edge_reference(m, enc, **params)
        assert float(ref.abs().max()) > 0.1  # not a vacuous comparison
        assert torch.allclose(res.scores, ref, atol=1e-5 * float(ref.abs().max()) + 1e-6), m.name
        # a head's outgoing edges sum to its DPA head score (t above it = the sum of the receivers' targets)
        g, dense = res.graph, res.graph.dense(res.scores)
        heads = dpa_all(m, enc, levels=("head",), **params).levels["head"].sum(-1)
        sums = torch.stack([dense[head_slot(g, la):head_slot(g, la) + g.n_heads].sum(1) for la in range(g.n_layers)])
        assert torch.allclose(sums, heads, atol=1e-5)


# -- known answers on the toy zoo ---------------------------------------------------------------------
def _rank(res: CircuitResult, src: str, dst: str) -> int:
    order = torch.argsort(res.scores.abs(), descending=True).tolist()
    return order.index(res.graph.edge_id(src, dst))


@pytest.mark.parametrize("method", METHODS)
def test_ioi_2l1h_known_circuit(ioi2, method):
    """Both heads and L0.H0's query composition into L1.H0 (issue 3's path patching: Q 0.116 vs K 0.007)."""
    m, rows = ioi2
    res = circuit(m, rows, method=method, edges=5, grid=(5,))
    assert _rank(res, "L1.H0", "logits") == 0
    assert _rank(res, "L0.H0", "L1.H0.q") < 6
    assert res.score_of("L0.H0", "L1.H0.q") > 3 * abs(res.score_of("L0.H0", "L1.H0.k"))
    assert res.score_of("L0.H0", "L1.H0.q") > 3 * abs(res.score_of("L0.H0", "L1.H0.v"))
    known = [("L1.H0", "logits"), ("embed", "L1.H0.q"), ("L0.H0", "L1.H0.q"), ("embed", "L0.H0.q"),
             ("embed", "L0.H0.v")]
    mask = torch.zeros(res.graph.n_edges, dtype=torch.bool)
    for src, dst in known:
        mask[res.graph.edge_id(src, dst)] = True
    from circuits.evaluate import mask_faithfulness

    ps = prepare(m, rows)
    assert mask_faithfulness(m, res.graph, ps, References(m, res.graph, ps), mask) >= 0.9
    assert res.faithfulness.normalized[0] >= 0.85  # each method's own top 5


@pytest.mark.parametrize("method", METHODS)
def test_modadd_known_circuit(method):
    """a + b mod p: heads carry a and b to '=' (embed -> head v), hand them to the MLP, the MLP writes the
    answer; 16 of the 23 edges keep 90% of the logit difference."""
    m = wb.load("modadd-dense")
    rows = task_rows(m)[:120]
    res = circuit(m, rows, method=method, edges=16, grid=(16,))
    assert _rank(res, "L0.mlp", "logits") == 0
    top = {(e["src"], e["dst"]) for e in res.top(10)}
    assert sum((f"L0.H{h}", "L0.mlp") in top for h in range(4)) >= 3
    assert sum(("embed", f"L0.H{h}.v") in top for h in range(4)) >= 2
    assert res.faithfulness.normalized[0] >= 0.9


@pytest.mark.parametrize("method", METHODS)
def test_markov_known_circuit(method):
    """Order-4 chain (lags 1, 2, 4): the current token goes straight to the logits; heads H2 and H1 read
    the earlier lags by value; H0 barely matters."""
    m = wb.load("markov-3h")
    rows = task_rows(m)[:80]
    res = circuit(m, rows, method=method, edges=8, grid=(8, 16))
    top = {(e["src"], e["dst"]) for e in res.top(5)}
    assert {("L0.H2", "logits"), ("embed", "logits")} <= top
    assert ("embed", "L0.H2.v") in top
    assert abs(res.score_of("L0.H0", "logits")) < abs(res.score_of("L0.H2", "logits")) / 5
    assert res.faithfulness.normalized[-1] >= 0.85


# -- bad input ----------------------------------------------------------------------------------------
def test_bad_input_is_a_typed_error(ioi2):
    m, rows = ioi2
    with pytest.raises(MethodError, match="unknown edge method"):
        circuit(m, rows, method="acdc")
    with pytest.raises(RangeError, match="positive"):
        circuit(m, rows, method="eap", edges=0)
    with pytest.raises(PromptError, match="same number of tokens"):
        circuit(m, [dict(rows[0], corrupt=rows[0]["corrupt"][:-1])], method="eap")
    with pytest.raises(PromptError, match="foil"):
        circuit(m, [{k: v for k, v in rows[0].items() if k != "foil"}], method="eap", metric="logit_diff")
    with pytest.raises(PromptError, match="empty"):
        circuit(m, [], method="eap")
    with pytest.raises(MethodError, match="no parameter"):
        circuit(m, rows, method="eap_ig", stepz=3)
    with pytest.raises(MethodError, match="steps"):
        circuit(m, rows, method="eap_ig", steps=0)


def test_save_and_reload(ioi2):
    m, rows = ioi2
    res = circuit(m, rows[:10], method="dpa", edges=4, grid=(2, 4))
    back = CircuitResult.from_run(res.save())
    assert torch.equal(back.scores, res.scores) and back.top() == res.top()
    assert back.faithfulness.normalized == res.faithfulness.normalized
    again = back.evaluate(m, grid=(2, 4))
    assert again.normalized == pytest.approx(res.faithfulness.normalized, abs=1e-5)
    fig = back.plot()
    assert any(t.name == "nodes (click to inspect)" for t in fig.data)


def test_patching_cost_estimate_and_refusal(ioi2, monkeypatch):
    import circuits.discover as discover
    from circuits.discover import estimate

    m, rows = ioi2
    g = CircuitGraph.of(m)
    ps = prepare(m, rows[:16])
    for method, params in [("eap", {}), ("eap_ig", {"steps": 5}), ("dpa", {}), ("activation_patching", {"copies": 4})]:
        seconds = estimate(m, g, ps, method, params)
        assert 0 < seconds < 60, (method, seconds)
    ticks = iter(range(10**6))  # one second per clock reading: the two estimates differ by their passes alone
    with monkeypatch.context() as clock:
        clock.setattr("circuits.discover.time.perf_counter", lambda: float(next(ticks)))
        assert estimate(m, g, ps, "eap_ig", {"steps": 20}) > estimate(m, g, ps, "eap_ig", {"steps": 2})
    seen = []
    monkeypatch.setattr(discover, "PATCHING_LIMIT_EDGES", 5)  # as if the graph were smollm2's
    with pytest.raises(MethodError, match="would take about"):
        circuit(m, rows[:16], method="activation_patching")
    res = circuit(m, rows[:16], method="activation_patching", sample=4, evaluate=False, on_estimate=seen.append)
    assert len(seen) == 1 and seen[0] > 0 and int((res.scores != 0).sum()) <= 4
