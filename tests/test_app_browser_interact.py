"""Graph interaction in headless Chromium (issue 37 item 4), on the Circuits page with the tiny Llama: hovering a
node lights its neighbours and edges (and dims the rest) and leaving it restores the graph; a clicked node is
pinned (drawn as a diamond); two nodes are grouped into a labelled supernode (one hexagon instead of them);
the pruning threshold lowered draws fewer nodes. And a researcher's own prompt (issue 37 item 1) typed on
Circuits, Attribution and Feature graph draws a graph with no field fixed by hand."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import assert_no_errors, settle
from test_app_browser_clicks import POINT_JS, app_in_chromium, chart_titled, click_point
from test_app_feature_graph import tiny  # noqa: F401 - a tiny Llama and two residual SAEs (L1, L2)

from app.serving import CHROMIUM, group_supernode

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

NODES_JS = """gd => { const t = gd.data[gd.data.length - 1];
  return {x: t.x, y: t.y, names: t.customdata, symbols: t.marker.symbol}; }"""
# each edge trace's [source, target] per segment, as the page marked them for hovering
EDGES_JS = "gd => gd.data.filter(t => t.meta && t.meta.wbEdges).flatMap(t => t.meta.wbEdges)"
DIMMED_JS = """gd => Array.from(gd.querySelectorAll('.scatterlayer .point'))
  .filter(p => p.style.opacity && Number(p.style.opacity) < 0.5).length"""


def test_hover_pin_group_and_threshold(tmp_path, tiny_llama_dir):
    with app_in_chromium(tmp_path, 2600) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/circuits?model={urllib.parse.quote(str(tiny_llama_dir))}",
                  timeout=60_000)
        settle(page)

        def graph():
            g = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=re.compile(r"dpa: \d+ of"))).first
            g.wait_for(timeout=60_000)
            return g

        g = graph()
        nodes = g.evaluate(NODES_JS)
        edges = [tuple(e) for e in g.evaluate(EDGES_JS)]
        heads = [n for n in nodes["names"] if ".H" in n]
        assert len(heads) >= 2, nodes["names"]
        # hover: the node's edges lit on top, the nodes not next to it dimmed; leaving restores
        name = max(heads, key=lambda n: sum(n in e for e in edges))
        i = nodes["names"].index(name)
        g.scroll_into_view_if_needed()
        px, py = g.evaluate(POINT_JS, [nodes["x"][i], nodes["y"][i]])
        page.mouse.move(px, py)
        page.wait_for_function("([gd, n]) => gd.getAttribute('data-wb-hover') === n",
                               arg=[g.element_handle(), name], timeout=10_000)
        near = set(json.loads(g.get_attribute("data-wb-near")))
        assert near == {name} | {a for e in edges if name in e for a in e if a}
        assert g.locator(".wb-hl path").count() == sum(name in e for e in edges) > 0
        assert g.evaluate(DIMMED_JS) == len(nodes["names"]) - len(near & set(nodes["names"]))
        page.mouse.move(5, 5)
        page.wait_for_function("gd => !gd.getAttribute('data-wb-hover')", arg=g.element_handle(), timeout=10_000)
        assert g.locator(".wb-hl").count() == 0 and g.evaluate(DIMMED_JS) == 0
        # pin: click the node, press Pin: it is drawn as a diamond
        click_point(page, g, nodes["x"][i], nodes["y"][i])
        page.get_by_role("button", name=f"Pin {name}").click()
        settle(page)
        g = graph()
        after = g.evaluate(NODES_JS)
        assert dict(zip(after["names"], after["symbols"], strict=True))[name] == "diamond"
        # group two heads into a supernode: one hexagon replaces them
        page.get_by_text(re.compile(r"Pins and supernodes \(1 pinned")).first.click()
        members = [h for h in heads if h != name][:1] + [name]
        group_supernode(page, "my heads", members, settle)
        g = graph()
        grouped = g.evaluate(NODES_JS)
        assert "⊕ my heads" in grouped["names"] and not set(members) & set(grouped["names"])
        assert dict(zip(grouped["names"], grouped["symbols"], strict=True))["⊕ my heads"] == "hexagon"
        # the threshold lowered: fewer nodes drawn, the caption says how many
        n_before = sum(1 for n in grouped["names"] if not n.startswith("logit "))
        box = page.get_by_label("Pruning threshold (cumulative influence)", exact=True)
        box.fill("0.2")
        box.press("Enter")
        settle(page)
        g = graph()
        pruned = [n for n in g.evaluate(NODES_JS)["names"] if not n.startswith("logit ")]
        assert len(pruned) < n_before, (pruned, n_before)
        page.get_by_text(re.compile(r"Drawn at threshold 0\.2: \d+ of \d+ nodes")).first.wait_for(timeout=10_000)
        page.screenshot(path=str(tmp_path / "interact.png"), full_page=True)
        assert_no_errors(page)


FACT = "The Eiffel Tower is located in the city of"


def test_own_prompt_draws_a_graph_on_three_pages(tmp_path, tiny):  # noqa: F811
    model_dir, saes = tiny
    model = urllib.parse.quote(str(model_dir))
    with app_in_chromium(tmp_path, 2400) as (page, port):

        def type_prompt(name: str = "Prompt", enter: str = "Control+Enter") -> None:
            box = page.get_by_role("textbox", name=name, exact=True).first
            box.fill(FACT)
            box.press(enter)
            settle(page)

        page.goto(f"http://127.0.0.1:{port}/circuits?model={model}", timeout=60_000)
        settle(page)
        type_prompt()
        page.get_by_text("Filled from the model's prediction").first.wait_for(timeout=30_000)
        chart_titled(page, "dpa:").wait_for(timeout=60_000)
        assert "Mary" not in page.get_by_role("textbox", name="Target token").input_value()
        assert_no_errors(page)  # no "Bad prompts" for the IOI example's leftover fields
        page.goto(f"http://127.0.0.1:{port}/?model={model}", timeout=60_000)
        settle(page)
        type_prompt()
        page.get_by_role("tab", name="Information flow").click()
        settle(page)
        chart_titled(page, "DPA circuit").wait_for(timeout=60_000)
        assert_no_errors(page)
        page.goto(f"http://127.0.0.1:{port}/feature_graph?model={model}", timeout=60_000)
        settle(page)
        type_prompt(enter="Enter")
        box = page.get_by_role("textbox", name="More dictionary directories (comma-separated)", exact=True)
        box.fill(",".join(str(p) for p in saes))
        box.press("Enter")
        settle(page)
        assert page.get_by_role("textbox", name="Target", exact=True).input_value() not in ("", " Mary")
        page.get_by_role("button", name="Build the feature graph").click()
        settle(page)
        chart_titled(page, "Feature graph").wait_for(timeout=60_000)
        assert_no_errors(page)
