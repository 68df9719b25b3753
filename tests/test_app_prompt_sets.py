"""Prompt sets page: a bundled prompt file attributed on a tiny Llama, the views, saving, a bad upload."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from job_helpers import fake_submit  # noqa: E402

from app.testing import chart, frame_with, open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402


def state(model_dir) -> dict:
    return {"sets_model": str(model_dir), "sets_file": "ioi.jsonl", "sets_limit": 3, "sets_method": "dpa",
            "sets_level": "head", "sets_batch": 2}


@pytest.fixture
def page(tiny_llama_dir):
    return open_page("prompt_sets", state(tiny_llama_dir))


def test_attribute_a_prompt_file(page):
    at = page
    assert not problems(at)
    at.button(key="sets_go").click().run()
    assert not problems(at), problems(at)
    table = frame_with(at, "top_item")
    assert len(table) == 3 and table["prompt"].iloc[0].startswith("When Alice and Robert")
    mean = chart(at, "sets_mean")
    assert mean["data"][0]["type"] == "heatmap"
    assert chart(at, "sets_one")["data"]
    before = len(RunStore().list())
    at.button(key="sets_save").click().run()
    assert not problems(at) and len(RunStore().list()) == before + 1


def test_methods_and_levels_follow_each_other(page):
    at = page
    at.selectbox(key="sets_method").set_value("rollout").run()
    assert not problems(at)
    assert at.selectbox(key="sets_level").options == ["token"]


def test_a_slow_set_runs_as_a_job_and_any_session_opens_its_result(page, monkeypatch, tiny_llama_dir):
    """Over the threshold the page shows the measured estimate and a job button instead of running here; the
    finished job's run is read back in this session and opened at once by a new one."""
    import app.jobs_view as J
    from workbench.scheduler import JobBoard
    from workbench.scheduler.runner import drive

    board = JobBoard()
    started = fake_submit(monkeypatch)  # the job's record, not its Ray driver
    monkeypatch.setattr(J, "THRESHOLD_S", 0.0)
    at = page.run()
    assert not problems(at)
    assert any("Estimate: 3 prompts x" in w.value for w in at.warning)
    assert not [b for b in at.button if b.key == "sets_go"]  # nothing starts here without the confirmation
    at.button(key="sets_job_go").click().run()
    assert not problems(at) and len(started) == 1
    assert any("queued" in m.value for m in at.markdown)  # the job's panel, inline
    job, _ = drive(board.get(started[0].id), board)  # the job runs (here, in this test) and saves its run
    assert job.state == "done" and job.run_id
    at.run()
    assert not problems(at)
    table = frame_with(at, "top_item")
    assert len(table) == 3 and table["prompt"].iloc[0].startswith("When Alice and Robert")
    fresh = open_page("prompt_sets", state(tiny_llama_dir))
    assert not problems(fresh) and len(frame_with(fresh, "top_item")) == 3  # opened from the run, no button
    assert len(started) == 1
