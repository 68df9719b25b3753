"""Every click a caption promises, done in headless Chromium: a Lens grid cell opens its top-k list, an SAE
heatmap cell opens the feature's dashboard, an Information-flow node on the Attribution page opens its
drill-down."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import app_in_chromium as _app_in_chromium
from test_app_browser import assert_no_errors, settle
from test_app_sae import PROMPT, sae_dir  # noqa: F401 - the SAE page's tiny dictionary fixture

from app.serving import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

# Edits to the working tree while a test runs must not show Streamlit's "File change" status (settle waits
# for that widget to go away).
QUIET = {"STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none"}


def app_in_chromium(tmp_path: Path, height: int):
    return _app_in_chromium(tmp_path, height, env=QUIET)


# Where a data point of a plotly chart is on the screen: its axes map data to pixels.
POINT_JS = """(gd, [x, y]) => {
  const L = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + L.xaxis._offset + L.xaxis.d2p(x), r.top + L.yaxis._offset + L.yaxis.d2p(y)];
}"""


def click_point(page, chart, x, y) -> None:
    """Click the chart where data point (x, y) is drawn (a heatmap cell, a graph node)."""
    chart.scroll_into_view_if_needed()
    px, py = chart.evaluate(POINT_JS, [x, y])
    page.mouse.click(px, py)
    settle(page)


def chart_titled(page, text: str):
    return page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=text)).first


def test_lens_cell_click_opens_its_top_k(tmp_path, tiny_llama_dir):
    with app_in_chromium(tmp_path, 1600) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/lens?model={urllib.parse.quote(str(tiny_llama_dir))}", timeout=60_000)
        settle(page)
        grid = chart_titled(page, "lens: top token")
        grid.wait_for(timeout=60_000)
        assert page.get_by_text("Top 5 at L1, position 4").count()  # the default cell: last layer, last position
        xs = grid.evaluate("gd => gd.data[0].x")
        click_point(page, grid, xs[1], "embed")
        page.get_by_text("Top 5 at embed, position 1").first.wait_for(timeout=30_000)
        click_point(page, grid, xs[3], "L0")
        page.get_by_text("Top 5 at L0, position 3").first.wait_for(timeout=30_000)
        texts = grid.locator("g.hm text, .heatmaplayer text").all_text_contents()
        assert texts and all(t.strip() for t in texts), texts  # no blank top-token text
        assert_no_errors(page)


def test_sae_heatmap_click_opens_the_dashboard(tmp_path, sae_dir):  # noqa: F811
    with app_in_chromium(tmp_path, 1600) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/sae?sae={urllib.parse.quote(str(sae_dir))}", timeout=60_000)
        settle(page)
        box = page.get_by_role("textbox", name="Prompt", exact=True).first
        box.fill(PROMPT)
        box.press("Enter")
        settle(page)
        heat = chart_titled(page, "Strongest features per position")
        heat.wait_for(timeout=60_000)
        rows = heat.evaluate("gd => gd.data[0].y")
        xs = heat.evaluate("gd => gd.data[0].x")
        feature = int(rows[1].split()[0][1:])
        click_point(page, heat, xs[0], rows[1])
        page.get_by_role("heading", name=f"{feature}:").first.wait_for(timeout=30_000)
        assert page.get_by_text("max activation").count()  # the dashboard's numbers are drawn
        assert page.get_by_label("Feature id").input_value() == str(feature)
        assert_no_errors(page)


def test_information_flow_node_click_inspects_it(tmp_path, tiny_llama_dir):
    with app_in_chromium(tmp_path, 2400) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/?model={urllib.parse.quote(str(tiny_llama_dir))}", timeout=60_000)
        settle(page)
        page.get_by_role("tab", name="Information flow").click()
        settle(page)
        graph = chart_titled(page, "DPA circuit")
        graph.wait_for(timeout=60_000)
        nodes = graph.evaluate("gd => { const t = gd.data[gd.data.length - 1]; return [t.x, t.y, t.customdata] }")
        heads = [i for i, name in enumerate(nodes[2]) if ".H" in name]
        assert heads, nodes[2]
        i = heads[0]
        click_point(page, graph, nodes[0][i], nodes[1][i])
        name = nodes[2][i]
        page.get_by_text(f"{name} direct logit effect").first.wait_for(timeout=30_000)
        page.get_by_text(f"{name} attention pattern").first.wait_for(timeout=30_000)
        assert_no_errors(page)
