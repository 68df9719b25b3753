"""The Flow by token page in headless Chromium: the graph by position and layer draws, and a click on a node opens
its logit lens and its heads below the graph."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import assert_no_errors, settle

from app import serving
from app.serving import CHROMIUM
from scripts.screenshots_flow import NODES_JS, POINT_JS, last_attention_node

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

QUIET = {"STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none"}


def test_click_a_node_for_its_lens_and_heads(tmp_path, tiny_llama_dir):
    query = urllib.parse.urlencode({"model": str(tiny_llama_dir), "prompt": "The capital of France is"})
    with serving.app_in_chromium(tmp_path / "app.log", 1800, env=QUIET) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/flow?{query}", timeout=120_000)
        settle(page)
        page.wait_for_selector(".js-plotly-plot .scatterlayer", timeout=120_000)
        gd = page.locator(".js-plotly-plot").first
        ids = gd.evaluate(NODES_JS)
        assert "M1@4" in ids, ids  # the prediction's node: the last layer at the last position
        # the default node's panel: the residual stream after the last layer at the last position
        page.get_by_role("heading", name=re.compile(r"position 4 .* after layer 1$")).first.wait_for(timeout=60_000)
        node = last_attention_node(ids)
        gd.scroll_into_view_if_needed()
        x, y = page.evaluate(POINT_JS, [gd.element_handle(), node])
        page.mouse.click(x, y)
        settle(page)
        page.get_by_text(f"after layer {node[1:].split('@')[0]}'s attention").first.wait_for(timeout=60_000)
        page.get_by_text("Heads: share of this sum").first.wait_for(timeout=60_000)
        page.screenshot(path=str(tmp_path / "flow-click.png"), full_page=True)
        assert_no_errors(page)
