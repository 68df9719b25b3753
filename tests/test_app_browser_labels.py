"""Graph labels at the app's default size, in headless Chromium (issue 50, finding 5): every node label of a
circuit graph, the output tokens beside the logits included, lies inside the figure, and inside the plotting area
wherever plotly clips a trace to it (at 1,100 px, before the fix, the rightmost output token was cut); a graph
taller than the window is offered fitted to it; an imported graph's edges are not called "dpa"."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import assert_no_errors, settle

from app import serving
from app.serving import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

QUIET = {"STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none"}

# Each text label of a chart's scatter traces: its box, the figure's box, the plotting area's, whether clipped.
LABELS_JS = """gd => {
  const svg = gd.querySelector('.main-svg').getBoundingClientRect();
  const L = gd._fullLayout, r = gd.getBoundingClientRect();
  const area = {left: r.left + L.xaxis._offset, right: r.left + L.xaxis._offset + L.xaxis._length};
  const out = [];
  gd.querySelectorAll('.scatterlayer .trace').forEach(tr => {
    const clipped = !!tr.closest('[clip-path]') || !!tr.querySelector('.text[clip-path], g.text [clip-path]');
    tr.querySelectorAll('.textpoint text').forEach(t => {
      const b = t.getBoundingClientRect();
      if (b.width > 0) out.push({text: t.textContent, left: b.left, right: b.right, clipped: clipped,
                                 svgLeft: svg.left, svgRight: svg.right, areaLeft: area.left, areaRight: area.right});
    });
  });
  return out;
}"""


def outside(labels: list[dict]) -> list[str]:
    bad = []
    for b in labels:
        lo, hi = (b["areaLeft"], b["areaRight"]) if b["clipped"] else (b["svgLeft"], b["svgRight"])
        if b["left"] < lo - 1 or b["right"] > hi + 1:
            bad.append(f"{b['text']!r} at [{b['left']:.0f}, {b['right']:.0f}] outside [{lo:.0f}, {hi:.0f}]")
    return bad


@pytest.mark.parametrize("width", [1100, 1400])  # a laptop's window and the app tests' default
def test_circuit_labels_are_not_clipped_at_the_default_size(tmp_path, tiny_llama_dir, width):
    with serving.app_in_chromium(tmp_path / "app.log", 1400, env=QUIET, width=width) as (page, port):
        # one prompt's circuit (drawn in the page on a small model) has the top output tokens beside the logits
        page.goto(f"http://127.0.0.1:{port}/circuits?model={urllib.parse.quote(str(tiny_llama_dir))}",
                  timeout=120_000)
        settle(page)
        graph = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=re.compile(r"dpa: \d+ of")))
        graph = graph.first
        graph.wait_for(timeout=300_000)
        page.wait_for_function("gd => gd.querySelectorAll('.scatterlayer .textpoint text').length > 3",
                               arg=graph.element_handle(), timeout=120_000)
        labels = graph.evaluate(LABELS_JS)
        page.screenshot(path=str(tmp_path / "circuit-labels.png"), full_page=True)
        texts = [b["text"] for b in labels]
        assert len(labels) >= 4 and any("p=" in t for t in texts), texts  # the output tokens are drawn
        assert not outside(labels), outside(labels)
        assert_no_errors(page)


def test_labels_inside_moves_edge_labels_inward():
    """The rule the browser test checks, on a figure alone: a label centred on a node at either edge is set to
    the node's inner side and the trace may draw into the margins."""
    import plotly.graph_objects as go

    from app.graph_view import labels_inside

    fig = go.Figure(go.Scatter(x=[0.0, 0.5, 1.0], y=[0, 0, 0], mode="markers+text", textfont={"size": 11},
                               text=["' a much longer token' p=0.10", "mid", "' right token'<br>p=0.01"],
                               textposition="top center"))
    fig.update_layout(width=900, margin={"l": 70, "r": 30, "t": 90, "b": 110}, xaxis={"range": [0.0, 1.0]})
    labels_inside(fig)
    assert list(fig.data[0].textposition) == ["top right", "top center", "top left"]
    assert fig.data[0].cliponaxis is False


def test_a_tall_graph_is_fitted_and_an_imported_graphs_edges_are_named_truthfully():
    import plotly.graph_objects as go

    from app.graph_view import FIT, TALL, fit_height, graph_name, node_edges
    from circuits.subgraph import GraphEdge, GraphNode, Provenance, Subgraph

    tall = go.Figure(layout={"height": 3000})
    assert fit_height(tall, "t") and tall.layout.height == FIT  # the toggle's default (bare mode) is on
    short = go.Figure(layout={"height": TALL})
    assert not fit_height(short, "s") and short.layout.height == TALL
    nodes = [GraphNode("a", "token", -1, 0), GraphNode("logits", "logits", 1, 0)]
    imported = Subgraph(nodes, [GraphEdge("a", "logits", 0.5)],
                        Provenance("m", "dpa", "feature-graph", params={"imported": {"format": "graph-json"}}))
    assert set(node_edges({"dpa": imported}, "a")["method"]) == {"imported graph-json"}
    own = Subgraph(nodes, [GraphEdge("a", "logits", 0.5)], Provenance("m", "dpa", "feature-graph"))
    assert graph_name("dpa", own) == "dpa"
