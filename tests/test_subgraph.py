"""One result type for every graph (circuits.graph.Subgraph): a circuit and a feature graph both become one, it
tabulates, plots, saves and reopens, and reads circuit and feature-graph runs written in the layout used before
it existed. The edge-method table: a new method is one module and one table line (discovery, its estimate and
the Circuits page's list all read it)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from circuits.runs import subgraph_of  # noqa: E402
from core.store import RunDraft, RunStore  # noqa: E402

ROW = {"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John"}


@pytest.fixture(scope="module")
def eap(tiny_llama):
    from circuits.discover import circuit

    return circuit(tiny_llama, [ROW], method="eap", edges=12, ablation="zero", evaluate=False)


def test_a_circuit_becomes_a_subgraph_with_roles_and_provenance(eap):
    sub = eap.subgraph()
    top = eap.top()
    assert len(sub.edges) == len(top) == 12
    for edge, row in zip(sub.edges, top, strict=True):  # same edges, same order; q/k/v split off as the role
        assert edge.source == row["src"] and edge.dst == row["dst"] and edge.score == row["score"]
        assert edge.role in (None, "q", "k", "v") and (edge.role is None) == (edge.target == row["dst"])
    ids = {n.id for n in sub.nodes}
    assert {"embed", "logits"} <= ids and all(e.source in ids and e.target in ids for e in sub.edges)
    assert sub.provenance.model == eap.model and sub.provenance.method == "eap"
    assert sub.provenance.prompts == [ROW] and sub.provenance.params["ablation"] == "zero"
    assert sub.terms == []  # an edge circuit has no error node
    assert list(sub.table().columns) == ["source", "target", "role", "score"]
    assert sub.node("logits").kind == "logits" and sub.node("embed").layer == -1
    assert sorted(sub.plot().data[-1].customdata) == sorted(ids)  # the clickable node trace


def test_saved_subgraph_and_circuit_runs_reopen(eap, tmp_path):
    store = RunStore(tmp_path)
    sub = eap.subgraph(5)
    run = sub.save(store)
    again = subgraph_of(run)
    assert again.to_json() == sub.to_json() and len(again.edges) == 5
    assert (run.path / "graph.plotly.json").exists()  # the Runs page draws its stored figure
    from_circuit = subgraph_of(eap.save(store))  # a circuit run: its saved top edges
    assert [(e.source, e.dst) for e in from_circuit.edges] == [(r["src"], r["dst"]) for r in eap.top()]


def test_a_damaged_subgraph_run_is_a_typed_error(eap, tmp_path):
    from core.errors import RunStoreError

    store = RunStore(tmp_path)
    doc = eap.subgraph(3).to_json()
    doc["edges"][0]["target"] = "nowhere"
    run = store.save(RunDraft(kind="subgraph", model="m", method="eap", result=doc))
    with pytest.raises(RunStoreError, match="damaged"):
        subgraph_of(run)
    with pytest.raises(RunStoreError, match="not a circuit or feature graph"):
        subgraph_of(store.save(RunDraft(kind="note", model="m", method="x")))


def old_feature_graph() -> dict:
    """A feature graph's result.json as the code before Subgraph wrote it (one feature, one error node)."""
    node = {"kind": "feature", "row": 1, "position": 3, "token": " is", "dictionary": "sae-L1", "feature": 7,
            "activation": 0.5, "score": 0.25, "influence": 0.4, "label": "L1.f7@3", "id": "L1.f7@p3"}
    err = dict(node, kind="error", feature=None, activation=None, id="L1.err@p3", label="L1.err@3")
    logits = {"kind": "logits", "row": 2, "position": None, "token": None, "dictionary": None, "feature": None,
              "activation": None, "score": None, "influence": 1.0, "label": "logits", "id": "logits"}
    result = {"model": "tiny", "prompt": "The capital of France is", "tokens": ["The", " capital"],
              "target": " Paris", "foil": None, "target_logit": 1.5, "dictionaries": [], "seconds": 0.1,
              "n_passes": 2, "params": {"per_layer": 4}, "nodes": [node, err, logits],
              "edges": [{"src": "L1.f7@p3", "dst": "logits", "score": 0.3},
                        {"src": "L1.err@p3", "dst": "logits", "score": -0.1}]}
    return result


def test_an_old_feature_graph_run_reopens(tmp_path):
    """A feature-graph run as the code before Subgraph saved it (result and graph.json, no figure)."""
    from circuits.feature_graph import KIND

    run = RunStore(tmp_path).save(RunDraft(kind=KIND, model="tiny", method="dpa", result=old_feature_graph()))
    sub = subgraph_of(run)
    assert [n.id for n in sub.terms] == ["L1.err@p3"]
    assert sub.node("L1.f7@p3").metadata["feature"] == 7 and sub.node("L1.f7@p3").position == 3
    assert sub.provenance.source == KIND and sub.provenance.prompts[0]["target"] == " Paris"
    assert [r["score"] for r in sub.edges_of("logits")] == [0.3, -0.1]


# -- the edge-method table ---------------------------------------------------------------------------------
def dummy_score(model, graph, prompts, refs, on_step=None, scale=1.0):
    """A stand-in edge method: edge e scores scale * e / n_edges."""
    return scale * torch.arange(graph.n_edges, dtype=torch.float32) / graph.n_edges


@pytest.fixture
def dummy(monkeypatch):
    from circuits import edges

    method = edges.EdgeMethod("dummy", __name__, "a test method", {"scale": 2.0}, cost=2.0, label="Dummy method",
                              function="dummy_score")
    monkeypatch.setitem(edges.EDGE_METHODS, "dummy", method)
    return method


def test_a_registered_method_runs_in_discovery_and_its_estimate(dummy, tiny_llama):
    from circuits.counterfactual import prepare
    from circuits.discover import circuit, estimate, methods
    from circuits.graph import CircuitGraph

    res = circuit(tiny_llama, [ROW], method="dummy", edges=4, ablation="zero", evaluate=False, scale=3.0)
    n = res.graph.n_edges
    assert res.method == "dummy" and res.params == {"scale": 3.0}
    assert res.top()[0]["score"] == pytest.approx(3.0 * (n - 1) / n)  # the dummy's largest score, kept first
    assert methods()["dummy"] == "a test method"
    graph, prepared = CircuitGraph.of(tiny_llama), prepare(tiny_llama, [ROW], "zero")
    seconds = estimate(tiny_llama, graph, prepared, "dummy", {"scale": 3.0})  # no KeyError for a new method
    assert math.isfinite(seconds) and seconds > 0


def test_a_registered_method_is_offered_on_the_circuits_page(dummy, one_thread):
    from app.testing import open_page, problems

    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})
    assert not problems(at)
    box = at.multiselect(key="circ_methods")
    assert "Dummy method" in box.options and "DPA" in box.options  # the table's labels
