"""Every page in a real headless browser: `workbench app` on a free port, Debian's chromium via Playwright.

Each page must finish rendering with no Streamlit exception or error element; a screenshot per page
is written under the test's temporary folder.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from app import serving
from app.serving import CHROMIUM, CHROMIUM_ARGS, free_port, settle, start_app, stop_app

ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]



def app_in_chromium(tmp_path: Path, height: int, env: dict[str, str] | None = None):
    """`workbench app` on a free port and one headless Chromium page 1400 x ``height`` (app.serving's): yields
    (page, port); the browser and the server are stopped however the test ends."""
    pytest.importorskip("playwright.sync_api")
    return serving.app_in_chromium(tmp_path / "app.log", height, env)


def assert_no_errors(page) -> None:
    errors = page.locator(ERRORS)
    assert not errors.count(), [errors.nth(i).inner_text()[:300] for i in range(errors.count())]


def app_pages() -> list[str]:
    """Every page's URL path, from app/main.py's PAGES (the default page is the root)."""
    import ast

    tree = ast.parse((Path(__file__).resolve().parents[1] / "app" / "main.py").read_text())
    pages = next(ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PAGES")
    return ["" if i == 1 else Path(path).stem for i, (path, _title, _icon) in enumerate(pages)]


LLM_PAGES = {"", "model", "circuits", "probes", "lens", "flow"}  # given the tiny model so the test stays fast
QUERIES = {"vision": "?methods=attention,rollout,dap"}


def test_every_page_in_chromium(tmp_path, tiny_llama_dir):
    playwright = pytest.importorskip("playwright.sync_api")
    port = free_port()
    log = tmp_path / "app.log"
    proc = start_app(port, log)
    tiny = urllib.parse.quote(str(tiny_llama_dir))
    pages = {path: f"?model={tiny}" if path in LLM_PAGES else QUERIES.get(path, "") for path in app_pages()}
    assert {"", "vision", "runs"} <= set(pages)
    shots = []
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                for path, query in pages.items():
                    started = time.time()
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.goto(f"http://127.0.0.1:{port}/{path}{query}", timeout=60_000)
                    settle(page)
                    errors = page.locator(ERRORS)
                    texts = [errors.nth(i).inner_text()[:300] for i in range(errors.count())]
                    shot = tmp_path / f"{path or 'attribution'}.png"
                    page.screenshot(path=str(shot), full_page=True)
                    shots.append(shot)
                    assert not texts, f"/{path}: {texts}"
                    assert page.locator("h1").first.inner_text().strip()
                    page.close()
                    print(f"/{path}: rendered in {time.time() - started:.1f} s")
            finally:
                browser.close()
    finally:
        stop_app(proc)
    assert all(s.stat().st_size > 10_000 for s in shots) and len(shots) == len(pages)
    loads = [
        line.split(" in ")[0]
        for line in log.read_text().splitlines()
        if "[workbench-app] loaded model" in line
    ]
    assert loads and len(loads) == len(set(loads)), f"a model was loaded twice: {loads}"


def test_circuits_click_a_node_in_chromium(tmp_path, tiny_llama_dir):
    """Open a toy circuit in the browser (drawn on open), click a node of the graph: its drill-down appears below."""
    with app_in_chromium(tmp_path, 2400) as (page, port):
        # the root first: a fresh server's first deep link runs the page without app/main.py's navigation
        page.goto(f"http://127.0.0.1:{port}/?model={urllib.parse.quote(str(tiny_llama_dir))}", timeout=60_000)
        settle(page)
        page.goto(f"http://127.0.0.1:{port}/circuits?model=ioi-attn-2l1h", timeout=60_000)
        settle(page)
        # a toy model's quick methods are drawn on open; a Run button exists only for what is not computed yet
        run = page.get_by_role("button", name="Run dpa")
        if run.count():
            run.click()
            settle(page)
        page.wait_for_selector(".js-plotly-plot .scatterlayer", timeout=60_000)
        page.screenshot(path=str(tmp_path / "circuits-run.png"))
        nodes = page.locator(".js-plotly-plot").first.locator(".scatterlayer .trace").last
        point = nodes.locator("path.point").nth(2)  # embed, L0.H0, L1.H0, logits
        box = point.bounding_box()
        assert box, "the graph's node markers are not drawn"
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        settle(page)
        page.get_by_text("L1.H0 direct logit effect").first.wait_for(timeout=30_000)
        page.get_by_text("L1.H0 attention pattern").first.wait_for(timeout=30_000)
        page.screenshot(path=str(tmp_path / "circuits-node.png"))
        print(f"screenshots: {tmp_path}")
        assert_no_errors(page)


def test_attention_keys_and_first_token_toggle_in_chromium(tmp_path, tiny_llama_dir):
    """The head drill-down labels every key token (plotly used to drop every other one) and the per-position
    views carry the first-token toggle, on, with its tooltip; screenshots of both."""
    prompt = "When Mary and John went to the store, John gave a drink to"
    query = urllib.parse.urlencode({"model": str(tiny_llama_dir), "prompt": prompt, "target": " Mary",
                                    "foil": " John"})
    with app_in_chromium(tmp_path, 3000) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/?{query}", timeout=60_000)
        settle(page)
        chart = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="attention pattern"))
        chart.first.wait_for(timeout=60_000)
        keys = chart.first.locator(".xaxislayer-above .xtick text").all_text_contents()
        assert len(keys) == 14, keys  # one label per token
        assert any("Mary" in k for k in keys) and sum("John" in k for k in keys) == 2, keys
        toggles = page.get_by_text("Exclude the first token from the colour scale")
        assert toggles.count() >= 2  # the token heat map and the attention pattern
        assert page.get_by_label("Exclude the first token from the colour scale").first.is_checked()
        page.screenshot(path=str(tmp_path / "attribution-heads.png"), full_page=True)
        assert_no_errors(page)
