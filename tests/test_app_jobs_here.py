"""Where the app's jobs run (issue 37 item 3): the page estimates first, and work estimated under the runner's
threshold (about 10 s) runs in the server process on the model it holds, as the job record shows (its driver is
this process, its log says so); no Ray start, no driver process. The estimate comes from the page (Prompt
sets: the first prompt measured) or, before any job of its shape ran, from one item measured on the server's
model (Probes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from test_app_probes import upload_session  # noqa: E402

from app.testing import open_page, problems  # noqa: E402
from workbench.scheduler import JobBoard  # noqa: E402


@pytest.fixture
def no_ray(monkeypatch):
    """No Ray start and no job driver process may happen: the job must run in this (the server's) process."""
    import ray

    def fail(*args, **kwargs):
        raise AssertionError("Ray was started for work under the threshold")

    monkeypatch.setattr(ray, "init", fail)
    popen = subprocess.Popen

    def no_driver(cmd, *args, **kwargs):
        assert "workbench.scheduler" not in list(map(str, cmd)), f"a job driver process was started: {cmd}"
        return popen(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", no_driver)
    monkeypatch.setenv("WORKBENCH_LOCAL_S", "10")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))


def _ran_here(job_id: str) -> None:
    board = JobBoard()
    end = time.monotonic() + 60
    while board.get(job_id).state in ("queued", "running"):
        assert time.monotonic() < end, "the job did not end"
        time.sleep(0.1)
    job = board.get(job_id)
    assert job.state == "done", (job.state, job.error, job.log)
    assert job.driver["pid"] == os.getpid()  # the server's process ran it
    assert any("runs in this process (estimated" in line for line in job.log), job.log
    assert not any("runs on Ray" in line for line in job.log)


def test_prompt_sets_job_under_the_threshold_runs_in_the_server(tiny_llama_dir, no_ray, monkeypatch):
    """The page's own estimate (the first prompt, measured) places the job: over the page's 'ask first' limit
    (lowered here to 0) but under the runner's, so it runs in this process once confirmed."""
    from app import jobs_view

    monkeypatch.setattr(jobs_view, "THRESHOLD_S", 0.0)
    at = open_page("prompt_sets", {"sets_model": str(tiny_llama_dir), "sets_file": "ioi.jsonl", "sets_limit": 3,
                                   "sets_method": "dpa", "sets_level": "head", "sets_batch": 2})
    assert not problems(at), problems(at)
    warning = " ".join(str(w.value) for w in at.warning)
    assert "measured on the first prompt" in warning and "in this server" in warning
    at.button(key="sets_job_go").click().run()
    assert not problems(at), problems(at)
    _ran_here(at.session_state["_sets_job"])


def test_probes_first_job_is_estimated_then_runs_in_the_server(no_ray, tmp_path):
    """No job of its shape ran before: one item is measured on the model the server holds, and the job runs
    here."""
    from core.models.tiny import save_tiny

    tiny = save_tiny(tmp_path / "tiny", name="tiny-probe")
    at = upload_session(tiny)
    assert not problems(at), problems(at)
    assert any("measured now on the model this server holds" in str(c.value) for c in at.caption)
    at.button(key="_probe_job_start").click().run()
    assert not problems(at), problems(at)
    _ran_here(at.session_state["_probe_job"])
