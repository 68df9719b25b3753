"""Work in flight follows the fields (issue 50 item 2), without a browser: a job this session started for fields
edited since is cancelled, one for the same work is left alone, and one that already ended is not touched."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app import circuit_jobs as CJ  # noqa: E402
from app import jobs_view as J  # noqa: E402

ROWS = [{"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John"}]


@dataclass
class Job:
    id: str
    key: str
    state: str


@dataclass
class Board:
    jobs: dict[str, Job]
    cancelled: list[str] = field(default_factory=list)

    def get(self, job_id: str) -> Job:
        return self.jobs[job_id]

    def request_cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


@pytest.fixture
def session(monkeypatch):
    import streamlit as st

    state: dict = {}
    monkeypatch.setattr(st, "session_state", state)
    return state


def spec(foil: str):
    return CJ.discover_spec("smollm2-135m", [dict(ROWS[0], foil=foil)], "dpa", {}, "mean", "greedy")


@pytest.mark.parametrize("state,cancel", [("running", True), ("queued", True), ("done", False), ("failed", False)])
def test_an_edited_field_cancels_the_job_it_supersedes(monkeypatch, session, state, cancel):
    from workbench.scheduler.board import spec_key

    old, new = spec(" John"), spec(" Tom")
    assert spec_key(old) != spec_key(new)
    board = Board({"j1": Job("j1", spec_key(old), state)})
    monkeypatch.setattr(J, "board", lambda: board)
    session["_circ_job_dpa"] = "j1"
    assert CJ.supersede(new, "_circ_job_dpa") == ("j1" if cancel else None)
    assert board.cancelled == (["j1"] if cancel else [])
    assert ("_circ_job_dpa" in session) is not cancel


def test_the_same_work_is_left_running(monkeypatch, session):
    from workbench.scheduler.board import spec_key

    same = spec(" John")
    board = Board({"j1": Job("j1", spec_key(same), "running")})
    monkeypatch.setattr(J, "board", lambda: board)
    session["_circ_job_dpa"] = "j1"
    assert CJ.supersede(spec(" John"), "_circ_job_dpa") is None and not board.cancelled
    assert CJ.supersede(same, "_circ_job_other") is None  # nothing started under that key


def test_hours_read_as_a_person_would():
    assert CJ._hours(20_000) == "5.6 h" and CJ._hours(600) == "10 min" and CJ._hours(42) == "42 s"
    assert CJ.CONFIRM_S == 3600.0


def test_a_job_over_an_hour_needs_a_second_confirmation(one_thread, monkeypatch):
    """An estimate over an hour (faked here on the toy model): the Run button is disabled until the user ticks
    the confirmation that names the hours; then one job starts."""
    from job_helpers import fake_submit

    from app.testing import open_page, problems

    monkeypatch.setenv("WORKBENCH_LOCAL_S", "0")  # nothing runs in the page
    monkeypatch.setattr(CJ, "_estimate", lambda *a, **k: 20_000.0)
    made = fake_submit(monkeypatch)
    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})
    assert not problems(at)
    assert any("about 5.6 h here" in str(w.value) for w in at.warning)
    assert at.button(key="circ_run").disabled and not made
    at.checkbox(key="circ_run_sure").check().run()
    assert not at.button(key="circ_run").disabled
    at.button(key="circ_run").click().run()
    assert not problems(at) and len(made) == 1
