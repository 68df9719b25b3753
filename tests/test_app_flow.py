"""Information flow page (AppTest): the graph by position and layer, a node's lens and heads, threshold and
position controls, bad input."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, frame_with, open_page, problems  # noqa: E402

PROMPT = "The capital of France is"


def _nodes(spec: dict) -> list[str]:
    return next(t["customdata"] for t in spec["data"] if t.get("name") == "nodes")


def test_graph_node_panel_and_controls(tiny_llama_dir):
    at = open_page("flow", {"flow_model": str(tiny_llama_dir), "flow_prompt": PROMPT})
    assert not problems(at)
    spec = chart(at, "flow_graph")
    nodes = _nodes(spec)
    assert "M1@4" in nodes and all("@" in n for n in nodes)  # the last layer at the last position, by default
    assert spec["layout"]["xaxis"]["tickvals"] == [0, 1, 2, 3, 4]  # one column per token
    assert at.selectbox(key="flow_node").value == "M1@4"
    lens = frame_with(at, "probability")
    assert len(lens) == 5 and list(lens["probability"]) == sorted(lens["probability"], reverse=True)
    caption = " ".join(c.value for c in at.caption)
    assert "routes into position 4" in caption and "above 0.04" in caption
    # an attention node shows its heads
    attn = next(n for n in nodes if n.startswith("A1@"))
    at.selectbox(key="flow_node").set_value(attn).run()
    assert not problems(at)
    heads = frame_with(at, "head")
    assert len(heads) == 4 and set(heads["head"]) == {"L1.H0", "L1.H1", "L1.H2", "L1.H3"}
    # a lower threshold keeps more nodes, 1 none but the prediction's; the caption names the value in use
    at.number_input(key="flow_threshold").set_value(0.0).run()
    assert not problems(at)
    assert len(_nodes(chart(at, "flow_graph"))) > len(nodes)
    at.number_input(key="flow_threshold").set_value(1.0).run()
    assert _nodes(chart(at, "flow_graph")) == ["M1@4"] and at.number_input(key="flow_threshold").value == 1.0
    assert "above 1" in " ".join(c.value for c in at.caption)
    # another position's prediction
    at.selectbox(key="flow_position").set_value(at.selectbox(key="flow_position").options[2]).run()
    assert not problems(at)
    assert max(int(n.split("@")[1]) for n in _nodes(chart(at, "flow_graph"))) == 2
    assert at.selectbox(key="flow_node").value == "M1@2"


def test_empty_prompt_warns(tiny_llama_dir):
    at = open_page("flow", {"flow_model": str(tiny_llama_dir), "flow_prompt": "  "})
    assert not at.exception and any("prompt is empty" in w.value for w in at.warning)


def test_a_click_reads_the_node():
    from app.flow_view import clicked_node

    event = SimpleNamespace(selection=SimpleNamespace(points=[{"x": 1, "y": 0.5, "customdata": "A1@2"}]))
    assert clicked_node(event, {"A1@2"}) == "A1@2"
    assert clicked_node(event, {"M1@2"}) is None
    assert clicked_node(SimpleNamespace(selection=SimpleNamespace(points=[])), {"A1@2"}) is None
    assert clicked_node(None, {"A1@2"}) is None


def test_a_saved_flow_opens_on_the_runs_page_by_position(tiny_llama):
    from circuits.flow import flow
    from core.store import RunStore

    f = flow(tiny_llama, PROMPT)
    run = f.save(RunStore())
    at = open_page("runs")
    at.selectbox(key="runs_pick").set_value(run.id).run()
    assert not problems(at)
    spec = chart(at, "runs_open_graph")
    assert set(_nodes(spec)) == {n.id for n in f.graph().nodes}  # every node, its edges drawn by position
    assert spec["layout"]["xaxis"]["tickvals"] == list(range(f.n_tokens))


def test_a_click_on_an_attention_edge_shows_its_heads(tiny_llama_dir):
    at = open_page("flow", {"flow_model": str(tiny_llama_dir), "flow_prompt": PROMPT, "flow_threshold": 0.0})
    spec = chart(at, "flow_graph")
    mids = next(t for t in spec["data"] if t.get("name") == "attention edges")
    edge = next(e for e in mids["customdata"] if e.endswith("@4") and e.startswith("M0@"))
    at.session_state["flow_graph"] = {"selection": {"points": [{"customdata": edge}]}}
    at.run()
    assert not problems(at)
    assert at.selectbox(key="flow_node").value == edge.split("->")[1]  # the edge's target, with the edge's heads
    heads = next(d.value for d in at.dataframe if list(d.value.columns) == ["head", "share"])
    assert len(heads) == 4 and list(heads["share"]) == sorted(heads["share"], reverse=True)
    assert any(f"Edge {edge.split('->')[0]}" in m.value for m in at.markdown)
