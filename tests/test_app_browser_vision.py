"""The Vision page in headless Chromium with dinov2-small: a real photograph (scikit-image's astronaut) and
its maps, for a linear head and then for the saliency decoder's region; no error element; screenshots."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import app_in_chromium, assert_no_errors, settle

from app.serving import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.real,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]


def test_photograph_maps_in_chromium(tmp_path, tiny_llama_dir):
    with app_in_chromium(tmp_path, 2000) as (page, port):
        # the root first: a fresh server's first deep link runs the page without app/main.py's navigation
        page.goto(f"http://127.0.0.1:{port}/?model={urllib.parse.quote(str(tiny_llama_dir))}", timeout=60_000)
        settle(page)
        page.goto(f"http://127.0.0.1:{port}/vision?model=dinov2-small&methods=attention,rollout,dap",
                  timeout=60_000)
        settle(page, timeout=300)
        chart = page.locator(".js-plotly-plot").first
        chart.wait_for(timeout=120_000)
        titles = chart.locator(".annotation-text").all_text_contents()
        assert {"attention", "rollout", "dap"} <= set(titles), titles
        assert page.get_by_text("Photograph").count() and page.get_by_text("prediction").count()
        page.screenshot(path=str(tmp_path / "vision-dinov2-photo.png"), full_page=True)
        assert_no_errors(page)
        page.get_by_text("Decision (head)").wait_for()
        page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').nth(1).click()
        page.get_by_role("option", name="saliency").click()
        settle(page, timeout=300)
        page.get_by_text("mean saliency in the region").first.wait_for(timeout=120_000)
        page.screenshot(path=str(tmp_path / "vision-dinov2-saliency.png"), full_page=True)
        assert_no_errors(page)
        print(f"screenshots: {tmp_path}")
