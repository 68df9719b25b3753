"""Graph interaction's logic without a browser (issue 37 item 4): pruning by cumulative influence, supernodes
(grouping, checks, suggestions), pins and supernodes kept with the run and carried into the graph-JSON
export's qParams, the hover marks on the figure, the controls' bad input on the page."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from circuits import interact as I  # noqa: E402
from circuits.graph import GraphEdge, GraphNode, Provenance, Subgraph  # noqa: E402
from core.errors import ArgumentError, RunStoreError  # noqa: E402


def circuit() -> Subgraph:
    """embed -> two L0 heads (alike: both feed L1.H0's query) -> L1.H0 -> logits; a weak MLP beside."""
    nodes = [GraphNode("embed", "embed", -1), GraphNode("L0.H0", "head", 0, metadata={"head": 0}),
             GraphNode("L0.H1", "head", 0, metadata={"head": 1}), GraphNode("L1.H0", "head", 1, metadata={"head": 0}),
             GraphNode("L1.mlp", "mlp", 1), GraphNode("logits", "logits", 2)]
    edges = [GraphEdge("embed", "L0.H0", 1.0, "v"), GraphEdge("embed", "L0.H1", 0.9, "v"),
             GraphEdge("L0.H0", "L1.H0", 0.5, "q"), GraphEdge("L0.H1", "L1.H0", 0.45, "q"),
             GraphEdge("L1.H0", "logits", 2.0), GraphEdge("L1.mlp", "logits", 0.1), GraphEdge("embed", "L1.mlp", 0.1)]
    return Subgraph(nodes, edges, Provenance("toy", "dpa", "circuit", [{"prompt": "x", "target": " a"}]))


def test_prune_keeps_the_influential_share_and_the_ends():
    sub = circuit()
    infl = I.influence(sub)
    assert infl["L1.H0"] > infl["L0.H0"] > infl["L0.H1"] > infl["L1.mlp"] > 0
    assert {n.id for n in I.prune(sub, 1.0).nodes} == {n.id for n in sub.nodes}
    half = I.prune(sub, 0.5)
    assert {n.id for n in half.nodes} == {"embed", "L0.H0", "L1.H0", "logits"}  # ~0.49 + ~0.26 of 1.95
    assert all(e.source in {"embed", "L0.H0", "L1.H0"} for e in half.edges)
    tiny = I.prune(sub, 0.01)
    # the top node (never none), with its strongest path up from the embeddings (issue 50: pruning keeps paths)
    assert {n.id for n in tiny.nodes} == {"embed", "L0.H0", "L1.H0", "logits"}
    counts = [len(I.prune(sub, t).nodes) for t in (0.05, 0.5, 0.8, 1.0)]
    assert counts == sorted(counts)  # the threshold only adds nodes as it rises


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, float("nan"), "x", None])
def test_threshold_outside_zero_one_is_refused(bad):
    with pytest.raises(ArgumentError, match=r"\(0, 1\]"):
        I.check_threshold(bad)


def test_group_sums_edges_and_drops_inner_ones():
    sub = circuit()
    g = I.group(sub, [I.Supernode("early", ["L0.H0", "L0.H1"])])
    ids = [n.id for n in g.nodes]
    assert "⊕ early" in ids and "L0.H0" not in ids and "L0.H1" not in ids
    edges = {(e.source, e.target): e for e in g.edges}
    assert edges[("embed", "⊕ early")].score == pytest.approx(1.9)
    assert edges[("⊕ early", "L1.H0")].score == pytest.approx(0.95) and edges[("⊕ early", "L1.H0")].role == "q"
    node = g.node("⊕ early")
    assert node.kind == "supernode" and node.metadata["rep"] == "L0.H0" and node.layer == 0
    only = I.pinned_only(g, ["L0.H1", "L1.H0"])  # a pinned member pins its supernode
    assert {n.id for n in only.nodes} == {"⊕ early", "L1.H0"} and len(only.edges) == 1


def test_supernode_checks():
    taken = [I.Supernode("early", ["L0.H0"])]
    with pytest.raises(ArgumentError, match="at least one member"):
        I.check_supernode("x", [])
    with pytest.raises(ArgumentError, match="needs a label"):
        I.check_supernode("  ", ["L0.H1"])
    with pytest.raises(ArgumentError, match="already in the supernode"):
        I.check_supernode("y", ["L0.H0"], taken=taken)
    with pytest.raises(ArgumentError, match="already a supernode labelled"):
        I.check_supernode("early", ["L0.H1"], taken=taken)
    with pytest.raises(ArgumentError, match="not in the graph"):
        I.check_supernode("y", ["L9.H9"], present={"L0.H1"})
    assert I.check_supernode(" late  heads ", ["L1.H0", "L1.H0"]).to_json() == {"name": "late heads",
                                                                                 "members": ["L1.H0"]}


def test_suggestions_follow_edge_profiles_and_explanations():
    sub = circuit()
    got = I.suggest(sub)
    assert [sorted(s.members) for s in got] == [["L0.H0", "L0.H1"]]
    assert got[0].name == "L0 heads" and "similarity" in got[0].reason
    # features: two alike by edges and words, one alike by edges but not words
    nodes = [GraphNode("emb@p0", "token", -1, 0), GraphNode("logits", "logits", 9, 1)]
    nodes += [GraphNode(f"L1.f{i}@p1", "feature", 1, 1, metadata={"token": " x"}) for i in range(3)]
    edges = [GraphEdge("emb@p0", f"L1.f{i}@p1", 1.0) for i in range(3)]
    edges += [GraphEdge(f"L1.f{i}@p1", "logits", 1.0 + 0.1 * i) for i in range(3)]
    feats = Subgraph(nodes, edges, Provenance("toy", "dpa", "feature-graph"))
    text = {"L1.f0@p1": "city names in France", "L1.f1@p1": "names of French cities",
            "L1.f2@p1": "closing brackets in code"}
    got = I.suggest(feats, text, min_similarity=0.55)  # 0.3 edges + 0.5 x words 0.2 + 0.2 position
    assert [sorted(s.members) for s in got] == [["L1.f0@p1", "L1.f1@p1"]]
    assert got[0].name == "names"  # the word the members share
    score = I.matches([s.members for s in got], [["L1.f0@p1", "L1.f1@p1"], ["L1.f2@p1"]])
    assert score["recall"] == 0.5 and score["precision"] == 1.0


def _feature_run(tmp_path):
    from circuits.subgraph import feature_subgraph
    from core.store import RunStore

    fg = feature_subgraph(model="toy", prompt="a b", tokens=["a", " b"], target=" c", foil=None,
                          target_logit=1.0,
                          dictionaries=[{"name": "sae-L1", "tag": "L1", "path": None, "kind": "sae"}],
                          nodes=[{"id": "emb@p0", "kind": "token", "row": -1.0, "position": 0, "token": "a",
                                  "influence": 1.0, "label": ""},
                                 *[{"id": f"L1.f{i}@p1", "kind": "feature", "row": 1.0, "position": 1, "token": " b",
                                    "dictionary": "sae-L1", "feature": i, "activation": 1.0, "score": 0.5,
                                    "influence": 0.5, "label": ""} for i in (3, 4)],
                                 {"id": "logits", "kind": "logits", "row": 2.0, "position": 1, "influence": 1.0,
                                  "label": "logits"}],
                          edges=[{"src": "emb@p0", "dst": "L1.f3@p1", "score": 1.0},
                                 {"src": "emb@p0", "dst": "L1.f4@p1", "score": 0.5},
                                 {"src": "L1.f3@p1", "dst": "logits", "score": 1.0},
                                 {"src": "L1.f4@p1", "dst": "logits", "score": 0.5}],
                          seconds=0.1, n_passes=2)
    store = RunStore(tmp_path / "runs")
    return fg, store, fg.save(store)


def test_supernodes_kept_with_the_run_and_in_the_export(tmp_path):
    from circuits.runs import run_bytes

    _fg, store, run = _feature_run(tmp_path)
    assert I.load(run).supernodes == []
    ann = I.Annotations(pinned=["L1.f3@p1"], supernodes=[I.Supernode("b features", ["L1.f3@p1", "L1.f4@p1"])])
    I.keep(run, ann)
    again = store.get(run.id)  # read back through the store
    assert I.load(again).to_json() == ann.to_json()
    assert [r["id"] for r in store.list()] == [run.id]  # the file is no new run, the run stays sound
    doc = json.loads(run_bytes(again, "graph-json")[0])
    q = doc["qParams"]
    ids = {n["node_id"] for n in doc["nodes"]}
    assert q["supernodes"] == [["b features", "1_3_1", "1_4_1"]] and {"1_3_1", "1_4_1"} <= ids
    assert q["pinnedIds"] == ["3_-1_1", "1_3_1"]  # the logit stays pinned, then the run's own pins
    with pytest.raises(ArgumentError, match="no members"):
        I.keep(run, I.Annotations(supernodes=[I.Supernode("empty", [])]))
    assert I.load(run).to_json() == ann.to_json()  # nothing lost


def test_supernodes_are_never_written_into_foreign_folders(tmp_path):
    from core.store import Run

    _fg, _store, run = _feature_run(tmp_path)
    foreign = tmp_path / "elsewhere" / run.id
    foreign.mkdir(parents=True)
    (foreign / "meta.json").write_text(json.dumps(run.meta))
    with pytest.raises(RunStoreError, match="not saved by the workbench"):
        I.keep(Run(run.id, foreign, run.meta), I.Annotations(pinned=["x"]))
    assert not (foreign / I.ANNOTATIONS).exists()
    (run.path / I.ANNOTATIONS).write_text('{"pinned": 3}')
    with pytest.raises(RunStoreError, match="damaged"):
        I.load(run)


def test_hover_marks_name_every_edge_segment():
    from app.graph_interact import circuit_figure

    sub = circuit()
    grouped = I.group(sub, [I.Supernode("early", ["L0.H0", "L0.H1"])])
    for drawn in (sub, grouped):
        fig = circuit_figure(sub, drawn, "t", pinned=["L1.H0"], top=[(" a", 0.5), (" b", 0.2)], target=" a")
        segs = [tuple(s) for t in fig.data if t.meta for s in t.meta["wbEdges"]]
        assert sorted(segs) == sorted((e.source, e.target) for e in drawn.edges)  # each edge, by its ends
        nodes = fig.data[-1]
        assert fig.layout.meta == {"wbGraph": 1} and "logit ' b'" in nodes.customdata
        symbols = dict(zip(nodes.customdata, nodes.marker.symbol, strict=True))
        assert symbols["L1.H0"] == "diamond" and symbols.get("⊕ early", "hexagon") == "hexagon"
        assert "p=0.50" in nodes.text[list(nodes.customdata).index("logits")]


def test_controls_bad_input_is_a_message(tiny_llama_dir, one_thread):
    """On the Information flow: a threshold outside (0, 1] and a supernode with no members are messages; the
    graph stays drawn at the last good threshold, the typed label stays."""
    from app.testing import chart, open_page, problems, texts

    at = open_page("attribution", {"attr_model": str(tiny_llama_dir), "attr_methods": ["dpa"]})
    assert not problems(at), problems(at)
    n_all = len(chart(at, "attr_flow")["data"][-1]["customdata"])
    at.number_input(key="attr_flow_prune").set_value(0.3).run()
    n_low = len(chart(at, "attr_flow")["data"][-1]["customdata"])
    assert n_low < n_all
    at.number_input(key="attr_flow_prune").set_value(1.5).run()
    assert not at.exception and any("threshold must be in (0, 1" in w for w in texts(at, "warning"))
    assert len(chart(at, "attr_flow")["data"][-1]["customdata"]) == n_low  # kept at 0.3
    at.text_input(key="attr_flow_sn_name").set_value("nothing").run()
    at.button(key="attr_flow_sn_group").click().run()
    assert not at.exception and any("at least one member" in w for w in texts(at, "warning"))
    assert at.text_input(key="attr_flow_sn_name").value == "nothing"
