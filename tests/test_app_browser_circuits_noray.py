"""The Circuits page in Chromium on smollm2-135m with Ray unusable (issue 27): the default IOI prompt's DPA
circuit and its faithfulness curve are drawn, computed in the server's own process. Ray cannot be used by the
server: RAY_ADDRESS points at a closed port (any local Ray start refuses it) and no warm instance is allowed.
Run it with a CPU hog in the background to check it on a loaded machine (see issue 27's closing note)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from test_app_browser import app_in_chromium, assert_no_errors, settle

from app.serving import CHROMIUM

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.real,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]


def test_smollm2_circuit_and_curve_without_ray_in_chromium(tmp_path):
    from workbench.scheduler import JobBoard

    board = JobBoard(Path(os.environ["WORKBENCH_RUNS"]) / ".jobs")
    env = {"RAY_ADDRESS": "127.0.0.1:1", "WORKBENCH_RAY_WARM": "0"}
    with app_in_chromium(tmp_path, 2400, env=env) as (page, port):
        page.goto(f"http://127.0.0.1:{port}/", timeout=120_000)
        page.wait_for_selector("h1", timeout=180_000)
        page.goto(f"http://127.0.0.1:{port}/circuits?model=smollm2-135m", timeout=120_000)
        settle(page, timeout=300)
        graph = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=re.compile(r"dpa: \d+ of")))
        graph.first.wait_for(timeout=300_000)
        curve = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="Faithfulness of the top-k edges"))
        curve.first.wait_for(timeout=120_000)
        page.screenshot(path=str(tmp_path / "circuits-smollm2.png"), full_page=True)
        assert not page.get_by_role("button", name=re.compile("^Run")).count()  # nothing left to press
        assert_no_errors(page)
    jobs = board.list()
    assert all(j.state == "done" and j.ray_address is None for j in jobs), [(j.state, j.log) for j in jobs]
    assert all(any("runs in this process" in line for line in j.log) for j in jobs)
