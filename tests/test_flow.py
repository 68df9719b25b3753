"""circuits.flow: information flow by token (IFR per position) on tiny models, one with a known answer."""

from __future__ import annotations

import pytest
import torch
from test_baselines_tiny import PROMPT, _wrap, tiny_llama

from attribution.baselines.ifr import ifr_all
from circuits.flow import Flow, flow, parse_node
from core.errors import MethodError, PromptError, RangeError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(seed=1)


@pytest.fixture(scope="module")
def copier():
    """One attention-only layer without norms where head 0 reads position 1 from every later query (its query is a
    constant, its key large only where position 1's positional embedding is) and writes it back tripled; head 1
    writes nothing. So every later position takes its attention share from position 1 through head 0 alone."""
    m = _wrap(dict(n_layers=1, d_model=16, n_heads=2, d_head=8, d_mlp=None, attn_only=True, act_fn="relu",
                   normalization_type=None, positional_embedding_type="standard"), 0, "copier")
    tl = m.tl
    with torch.no_grad():
        tl.embed.W_E.mul_(0.05)
        tl.pos_embed.W_pos.zero_()
        tl.pos_embed.W_pos[1, 0] = 10.0
        a = tl.blocks[0].attn
        for p in (a.W_Q, a.W_K, a.W_V, a.W_O, a.b_Q, a.b_K, a.b_V, a.b_O):
            p.zero_()
        a.b_Q[0, 0] = 5.0
        a.W_K[0, 0, 0] = 5.0
        a.W_V[0, :8, :8] = 3 * torch.eye(8)
        a.W_O[0, :8, :8] = torch.eye(8)
    return m


def test_every_receivers_shares_sum_to_one(llama):
    f = flow(llama, PROMPT)
    into_attn = f.attn.sum((2, 3)) + f.resid_attn  # [layer, query]
    assert torch.allclose(into_attn, torch.ones_like(into_attn), atol=1e-5)
    assert torch.allclose(f.mlp + f.resid_mlp, torch.ones_like(f.mlp), atol=1e-5)
    assert (f.attn >= 0).all() and (f.mlp >= 0).all()
    future = torch.triu(torch.ones(f.n_tokens, f.n_tokens), 1).bool()  # causal: no share from a later key
    assert f.attn.sum(2)[:, future].abs().max() == 0


def test_the_embeddings_importance_is_ifrs_token_level(llama):
    f = flow(llama, PROMPT)
    token = ifr_all(llama, llama.encode(PROMPT))["token"]
    assert torch.allclose(f.importance()["E"][0], token, atol=1e-5)
    assert abs(float(f.importance(2)["E"][0, 3:].sum())) < 1e-6  # position 2's prediction sees nothing later


def test_a_head_that_copies_position_one_is_the_only_attention_route(copier):
    f = flow(copier, PROMPT)
    last = f.n_tokens - 1
    assert (f.attn[0, 1:, 0, 1] > 0.5).all()  # head 0 from key 1, at every query that sees it
    others = f.attn[0, 1:, 0].clone()
    others[:, 1] = 0
    assert others.max() < 1e-3 and f.attn[0, :, 1].max() == 0  # no other key; head 1 writes nothing
    g = f.graph(threshold=0.04)
    attn_edges = [(e.source, e.target) for e in g.edges if e.role == "attn"]
    assert attn_edges == [("E@1", f"A0@{last}")]
    # the tripled copy swamps the small embedding at the last position: its residual edge falls below 0.04
    assert f.resid_attn[0, last] < 0.04
    assert {n.id for n in g.nodes} == {"E@1", f"A0@{last}", f"M0@{last}"}
    heads = f.heads_into(0, last, 1)
    assert heads[0]["head"] == "L0.H0" and heads[0]["share"] > 0.5 and heads[1]["share"] == 0
    assert f.describe(f"A0@{last}")["heads"][0]["top key"] == 1


def test_pruning_keeps_only_what_reaches_the_prediction(llama):
    f = flow(llama, PROMPT)
    g = f.graph(threshold=0.1)
    top = f"M{f.n_layers - 1}@{f.n_tokens - 1}"
    assert all(e.score > 0.1 for e in g.edges)
    down: dict[str, list[str]] = {}
    for e in g.edges:
        down.setdefault(e.target, []).append(e.source)
    seen, todo = {top}, [top]
    while todo:
        for s in down.get(todo.pop(), []):
            if s not in seen:
                seen.add(s)
                todo.append(s)
    assert seen == {n.id for n in g.nodes}  # every node reachable from the prediction
    assert len(f.graph(0.0).edges) > len(g.edges) > len(f.graph(1.0).edges) == 0
    other = f.graph(threshold=0.1, position=2)
    assert max(n.position for n in other.nodes) == 2


def test_lens_describe_plot_and_save(llama, tmp_path):
    f = flow(llama, PROMPT)
    d = f.describe("M1@6", top_k=3)
    assert len(d["lens"]) == 3 and d["lens"][0]["token"] == f.predictions[6]
    assert d["mlp share"] + d["residual share"] == pytest.approx(1.0, abs=1e-5)
    fig = f.plot(threshold=0.05, selected="M1@6")
    clickable = [t for t in fig.data if t.name == "nodes"]
    assert set(clickable[0].customdata) == {n.id for n in f.graph(0.05).nodes}
    run = f.save(tmp_path, threshold=0.05)
    from circuits.runs import subgraph_of

    back = subgraph_of(run)
    assert {e.source for e in back.edges} == {e.source for e in f.graph(0.05).edges}
    assert not back.is_feature_graph


def test_bad_input_is_one_typed_error(llama):
    f = flow(llama, PROMPT)
    with pytest.raises(RangeError, match="outside"):
        f.graph(threshold=1.5)
    with pytest.raises(RangeError, match="position 9"):
        f.graph(position=9)
    with pytest.raises(RangeError, match="not a flow node"):
        f.describe("L3.H1")
    with pytest.raises(RangeError, match="no node"):
        f.describe("A7@0")
    with pytest.raises(PromptError):
        flow(llama, "  ")
    with pytest.raises(MethodError):
        flow(object(), PROMPT)
    assert parse_node("F1@3") == ("F", 1, 3)
    assert isinstance(f, Flow)


def test_cli_routes_and_bad_input(monkeypatch, capsys):
    import json

    from tests.cli_helpers import assert_bad, run_cli

    args = ("flow", "ioi-attn-1l2h", "N1 and N2 then N2", "--no-save")
    code, out, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["tokens"] == ["N1", "and", "N2", "then", "N2"] and r["position"] == 4
    assert r["attention"] and r["attention"][0]["to"] == 4 and r["attention"][0]["heads"]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "information flow" in out and "strongest attention edges" in out, err
    assert_bad(*run_cli(monkeypatch, capsys, *args, "--threshold", "2")[::2], "--threshold")
    assert_bad(*run_cli(monkeypatch, capsys, *args, "--position", "9")[::2], "position 9")
    assert_bad(*run_cli(monkeypatch, capsys, "flow", "ioi-attn-1l2h", " ")[::2], "empty prompt")


def test_a_saved_flow_graph_plots_by_position_from_the_graph_alone(llama, tmp_path):
    from circuits.runs import subgraph_of

    f = flow(llama, PROMPT).at(0.05)
    back = subgraph_of(f.save(tmp_path))
    fig = back.plot()
    nodes = next(t for t in fig.data if t.name == "nodes")
    assert set(nodes.customdata) == {n.id for n in f.graph().nodes}
    assert list(fig.layout.xaxis.tickvals) == list(range(f.n_tokens))  # one column per token, as drawn live
    assert any(f.prediction in (a.text or "") for a in fig.layout.annotations)
