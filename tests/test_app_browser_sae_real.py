"""Issue 28 item 7 in Chromium on smollm2-135m: the SAE page opens on the IOI prompt with each feature's readable
explanation and its simulation score, and the name feature f2231 heads the heatmap (it was 10th)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_app_browser import app_in_chromium, assert_no_errors, settle

from app.serving import CHROMIUM

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.real,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]


def test_sae_page_shows_explanations_scores_and_the_name_feature_first(tmp_path):
    with app_in_chromium(tmp_path, 1600, env={"STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none"}) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/sae", timeout=120_000)
        settle(page, timeout=300)
        heatmap = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="Strongest features"))
        heatmap.first.wait_for(timeout=300_000)
        rows = heatmap.first.evaluate("gd => gd.data[0].y")
        assert rows[0].startswith("f2231 first names · sim 0."), rows[:3]
        assert all(" · sim " in r for r in rows), rows  # every row names its score, uncut
        prompt = page.get_by_label("Prompt", exact=True).first.input_value()
        assert prompt.startswith("When Mary and John went to the store")  # the IOI prompt is the default
        assert_no_errors(page)
