"""The feature graph in headless Chromium: rows for the embeddings, every dictionary's layer and the logits,
token positions as columns, node labels that do not overlap, and a clicked node inspected beside the graph."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import assert_no_errors, settle
from test_app_browser_clicks import app_in_chromium, chart_titled, click_point
from test_app_feature_graph import tiny  # noqa: F401 - a tiny Llama and two residual SAEs (L1, L2)

from app.serving import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

BOXES_JS = """gd => Array.from(gd.querySelectorAll('.scatterlayer .trace:last-child .textpoint text'))
  .filter(t => t.textContent.trim()).map(t => { const b = t.getBBox(); return [b.x, b.y, b.width, b.height,
  t.textContent]; })"""


def overlaps(boxes) -> list[tuple[str, str]]:
    out = []
    for i, (x, y, w, h, a) in enumerate(boxes):
        for x2, y2, w2, h2, b in boxes[i + 1:]:
            if x < x2 + w2 and x2 < x + w and y < y2 + h2 and y2 < y + h:
                out.append((a, b))
    return out


def test_feature_graph_rows_columns_labels_and_click(tmp_path, tiny):  # noqa: F811
    model_dir, saes = tiny
    with app_in_chromium(tmp_path, 1800) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/feature_graph?model={urllib.parse.quote(str(model_dir))}",
                  timeout=60_000)
        settle(page)
        for name, value in (("Prompt", "The capital of France is"), ("Target", " Paris"),
                            ("Foil (optional)", " London"),
                            ("More dictionary directories (comma-separated)", ",".join(str(p) for p in saes))):
            box = page.get_by_role("textbox", name=name, exact=True)
            box.fill(value)
            box.press("Enter")
            settle(page)
        page.get_by_role("button", name="Build the feature graph").click()
        settle(page)
        graph = chart_titled(page, "Feature graph")
        graph.wait_for(timeout=60_000)
        info = graph.evaluate("gd => { const t = gd.data[gd.data.length - 1]; return {x: t.x, y: t.y, "
                              "names: t.customdata, rows: gd._fullLayout.yaxis.ticktext, "
                              "cols: gd._fullLayout.xaxis.ticktext} }")
        assert info["rows"][0] == "embeddings" and info["rows"][-1] == "logits", info["rows"]
        assert {"L1", "L2"} <= set(info["rows"]), info["rows"]
        assert len(info["cols"]) == 5 and info["cols"][1].startswith("1:")  # token positions as columns
        names = info["names"]
        assert any(n.startswith("emb@") for n in names) and any(n.startswith("L1.") for n in names)
        # a node's column is its token position
        for n, x in zip(names, info["x"], strict=True):
            if "@p" in n:
                assert x == int(n.split("@p")[1]), (n, x)
        boxes = graph.evaluate(BOXES_JS)
        assert boxes and not overlaps(boxes), overlaps(boxes)
        picker = page.locator('[data-testid="stSelectbox"]').filter(has_text="Node").first
        before = picker.locator("input").first.input_value()  # the most influential feature at first
        i = next(k for k, n in enumerate(names) if n.startswith("L1.f") and n != before)
        click_point(page, graph, info["x"][i], info["y"][i])
        page.get_by_text(f"Open feature {names[i].split('.f')[1].split('@')[0]}").first.wait_for(timeout=30_000)
        assert names[i] in picker.locator("input").first.input_value()  # shown beside the graph
        assert_no_errors(page)
