"""Runs page, issue 28: a stored circuit opens as its graph with its prompt and target (no raw dump, no tensor
loaded), ?run=ID opens a run, two circuits compare as two graphs and their edge overlap, the listing pages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, open_page, problems  # noqa: E402
from core.store import RunDraft, RunStore  # noqa: E402

ROW = {"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John"}


@pytest.fixture
def circuits(tiny_llama):
    from circuits.discover import circuit

    store = RunStore()
    return [circuit(tiny_llama, [ROW], method=m, edges=15, ablation="zero", evaluate=False).save(store)
            for m in ("dpa", "eap")]


def test_a_circuit_run_opens_as_its_graph(circuits):
    a, _ = circuits
    at = open_page("runs")
    assert not problems(at)
    table = at.dataframe[0].value
    row = table[table["id"] == a.id].iloc[0]
    assert row["prompt"].startswith("When Mary") and row["target"] == " Mary"  # not None
    at.selectbox(key="runs_pick").set_value(a.id).run()
    assert not problems(at)
    nodes = chart(at, "runs_open_circuit")["data"][-1]["customdata"]
    assert "logits" in nodes and len(nodes) > 2
    assert any("target ' Mary'" in str(c.value) for c in at.caption)
    assert not any(t.key == "runs_open_tensor" for t in at.selectbox)  # tensors stay unread until asked
    at.toggle(key="runs_open_tensors_on").set_value(True).run()
    assert not problems(at)
    assert chart(at, "runs_open_tensor_fig")["data"][0]["type"] == "bar"  # the tiny graph's few edges


def test_a_big_tensor_is_summarised():
    import torch

    from app.run_views import tensor_figure

    fig = tensor_figure("scores", torch.randn(123_000))  # a smollm2 circuit's edge scores
    assert fig.data[0].type == "histogram" and "123,000 values" in fig.layout.title.text


def test_deep_link_opens_a_run(circuits):
    from streamlit.testing.v1 import AppTest

    from app.testing import MAIN

    a, _ = circuits
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.query_params["run"] = a.id
    at.switch_page("pages/runs.py")
    at.run()
    assert not problems(at)
    assert at.text_input(key="runs_id").value == a.id
    assert chart(at, "runs_open_circuit")["data"]


def test_two_circuits_compare_as_graphs_and_overlap(circuits):
    at = open_page("runs")
    assert not problems(at)
    assert not any(m.label == "shared edges" for m in at.metric)  # nothing compared until asked
    at.toggle(key="runs_cmp_on").set_value(True).run()
    assert not problems(at)
    assert chart(at, "runs_cmp_graph_A")["data"] and chart(at, "runs_cmp_graph_B")["data"]
    labels = {m.label: m.value for m in at.metric}
    assert "shared edges" in labels and "edge overlap (Jaccard)" in labels
    assert 0.0 <= float(labels["edge overlap (Jaccard)"]) <= 1.0
    edges = next(d.value for d in at.dataframe if "in" in d.value.columns)
    assert set(edges["in"]) <= {"both", "A", "B"} and len(edges) >= 15


def test_the_listing_pages(monkeypatch):
    store = RunStore()
    for i in range(30):
        store.save(RunDraft(kind="note", model="m", method=f"x{i}", args={"prompt": f"p{i}"}))
    at = open_page("runs")
    assert not problems(at)
    assert len(at.dataframe[0].value) == 25
    at.number_input(key="runs_page").set_value(2).run()
    assert not problems(at) and len(at.dataframe[0].value) == 5


def test_feature_graph_and_subgraph_runs_open_with_the_node_inspector(circuits):
    """A feature-graph run saved before Subgraph existed (no stored figure) and a saved Subgraph open as graphs
    through graph_view; a click on a node shows its edges."""
    from test_subgraph import old_feature_graph

    from circuits.discover import CircuitResult

    store = RunStore()
    old = store.save(RunDraft(kind="feature-graph", model="tiny", method="dpa", result=old_feature_graph()))
    sub = CircuitResult.from_run(circuits[0]).subgraph(6).save(store)
    at = open_page("runs")
    at.selectbox(key="runs_pick").set_value(old.id).run()
    assert not problems(at)
    assert set(chart(at, "runs_open_fg")["data"][-1]["customdata"]) == {"L1.f7@p3", "L1.err@p3", "logits"}
    at.session_state["runs_open_fg"] = {"selection": {"points": [{"customdata": "logits"}]}}
    at.run()
    assert not problems(at)
    edges = next(d.value for d in at.dataframe if "direction" in d.value.columns)
    assert list(edges["src"]) == ["L1.f7@p3", "L1.err@p3"] and set(edges["direction"]) == {"in"}
    at.selectbox(key="runs_pick").set_value(sub.id).run()
    assert not problems(at)
    assert "logits" in chart(at, "runs_open_graph")["data"][-1]["customdata"]


def test_a_stored_circuit_opens_with_its_supernodes(circuits):
    """Issue 50 finding 5: the Runs page drew a stored circuit without the supernodes saved with it. It now
    draws them (and the pins), with the Circuits page's controls."""
    from circuits.interact import Annotations, Supernode, keep

    a, _ = circuits
    run = RunStore().get(a.id)
    heads = sorted({n for e in run.result()["edges"] for n in (e["src"], e["dst"])
                    if n not in ("embed", "logits") and ".H" in n})[:2]
    assert len(heads) == 2, run.result()["edges"][:3]
    group = Supernode("two heads", heads)
    keep(run, Annotations(pinned=["logits"], supernodes=[group]))
    at = open_page("runs")
    at.selectbox(key="runs_pick").set_value(a.id).run()
    assert not problems(at)
    nodes = list(chart(at, "runs_open_circuit")["data"][-1]["customdata"])
    assert group.id in nodes and not set(heads) & set(nodes)  # its members drawn as the one supernode
    assert any("1 supernode drawn" in str(c.value) and "1 pinned" in str(c.value) for c in at.caption)
    at.session_state["runs_open_circuit"] = {"selection": {"points": [{"customdata": "embed"}]}}
    at.run()  # a click on a node: the Pin button names it, as on the Circuits page
    assert not problems(at)
    assert at.button(key="runs_open_circ_pin").label == "Pin embed"
    assert at.button(key="runs_open_circ_pin").click().run() and not problems(at)
    assert any("2 pinned" in str(c.value) for c in at.caption)


def test_a_stored_feature_graph_opens_with_its_supernodes():
    """The same for a feature graph (here an imported one): its saved supernode is drawn in place of its
    members, with the Feature graph page's controls."""
    from test_import_graph import FIXTURE

    from circuits.importer import import_graph_json
    from circuits.interact import Annotations, Supernode, keep
    from circuits.runs import load_run

    run = import_graph_json(FIXTURE, RunStore())
    graph = load_run(run)
    features = sorted((n for n in graph.nodes if n.kind == "feature"),
                      key=lambda n: -float(n.metadata.get("influence") or 0.0))[:2]
    group = Supernode("top two", [n.id for n in features])
    keep(run, Annotations(supernodes=[group]))
    at = open_page("runs")
    at.selectbox(key="runs_pick").set_value(run.id).run()
    assert not problems(at)
    nodes = list(chart(at, "runs_open_fg")["data"][-1]["customdata"])
    assert group.id in nodes and not {n.id for n in features} & set(nodes)
    assert any("1 supernode drawn" in str(c.value) for c in at.caption)
