"""Navigation in headless Chromium: a fresh server's first deep link opens its page under the app's own
navigation (no file names), /attribution opens the Attribution page, every page is listed (Runs and Jobs
without "View more"), and the page loads nothing from outside the app (its favicon included)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import assert_no_errors, settle
from test_app_browser_clicks import app_in_chromium

from app.serving import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

NAV = '[data-testid="stSidebarNav"]'


def test_deep_links_navigation_and_no_outside_requests(tmp_path, tiny_llama_dir):
    with app_in_chromium(tmp_path, 1200) as (page, port):
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        base = f"http://127.0.0.1:{port}"
        # the very first request of a fresh server is a deep link
        page.goto(f"{base}/lens?model={urllib.parse.quote(str(tiny_llama_dir))}", timeout=60_000)
        settle(page)
        assert page.locator("h1").first.inner_text().strip() == "Lens"
        nav = page.locator(NAV).first.inner_text()
        for title in ("Model", "Attribution", "Lens", "Circuits", "Feature graph", "Runs", "Jobs"):
            assert title in nav, nav
        assert "View" not in nav and "main" not in nav.split(), nav  # all listed, no file-name navigation
        icon = page.locator('link[rel*="icon"]').first.get_attribute("href") or ""
        assert not icon.startswith("http") or icon.startswith(base), icon
        page.goto(f"{base}/attribution?model={urllib.parse.quote(str(tiny_llama_dir))}", timeout=60_000)
        settle(page)
        assert page.locator("h1").first.inner_text().strip() == "Attribution"
        assert not page.get_by_text("Page not found").count()
        assert_no_errors(page)
        page.goto(f"{base}/runs", timeout=60_000)
        settle(page)
        assert page.locator("h1").first.inner_text().strip() == "Runs"
        outside = [u for u in requests if not u.startswith((base, "data:", "blob:", "about:"))
                   and not u.startswith(base.replace("127.0.0.1", "localhost"))]
        assert not outside, outside[:10]
