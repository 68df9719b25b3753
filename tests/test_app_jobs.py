"""Jobs page: lists jobs in every state, cancels a running one, opens a finished one's run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402
from workbench.scheduler import JobBoard, run  # noqa: E402


def test_jobs_page_lists_cancels_and_opens():
    done, _ = run({"kind": "sleep", "seconds": 0.1, "steps": 2})
    board = JobBoard()
    running = board.create({"kind": "sleep"}, "a long one")
    running.state, running.done, running.total, running.eta_s = "running", 30, 120, 42.0
    board.write(running)
    at = open_page("jobs")
    assert not problems(at), problems(at)
    text = " ".join(str(m.value) for m in at.markdown)
    assert done.id in text and running.id in text and "a long one" in text
    # states are coloured text, not emoji (they render as empty boxes without an emoji font)
    assert ":green[**done**]" in text and ":blue[**running**]" in text and "✅" not in text
    bars = [p for p in at.get("progress")]
    assert bars and "30 / 120 items" in str(bars[0].proto.text) and "42 s left" in str(bars[0].proto.text)
    at.button(key=f"jobs_cancel_{running.id}").click().run()
    assert board.cancel_requested(running.id)
    at.button(key=f"jobs_open_{done.id}").click().run()
    assert at.session_state["runs_id"] == done.run_id and RunStore().get(done.run_id)


def test_attribution_page_asks_before_long_patching(tiny_llama_dir, monkeypatch):
    """A component level over the threshold shows its measured estimate and a job button instead of running
    in the app (the threshold is lowered so the tiny model's patching counts as long)."""
    from app import jobs_view

    monkeypatch.setattr(jobs_view, "THRESHOLD_S", 0.0)
    state = {"attr_model": str(tiny_llama_dir), "attr_prompt": "When Mary and John went to the store, John gave",
             "attr_methods": ["dpa", "activation_patching"], "attr_detail": "activation_patching"}
    at = open_page("attribution", state)
    assert not problems(at), problems(at)
    warnings = " ".join(str(w.value) for w in at.warning)
    assert "Estimate: activation_patching at the head level" in warnings and "ms each (measured)" in warnings
    assert "neuron level" in warnings
    labels = [b.label for b in at.button]
    assert any(label.startswith("Run activation_patching · head as a job") for label in labels)
    assert any("gives no head scores" in str(i.value) for i in at.info)  # nothing computed in the app


def test_enter_in_a_field_of_the_jobs_forms_starts_nothing(monkeypatch):
    """Enter in the Prompts (or Seconds) field must not submit the form: only the Start button starts a job
    (the browser honours the form's enter_to_submit flag; pressing Enter is checked in Chromium by
    tests/test_app_browser_jobs.py)."""
    monkeypatch.setenv("WORKBENCH_JOBS_DEMO", "1")
    at = open_page("jobs")
    assert not problems(at), problems(at)
    forms = {f.proto.form.form_id: f.proto.form.enter_to_submit for f in at.main.form}
    assert forms == {"jobs_faith": False, "jobs_sleep": False}
    at.number_input(key="jobs_limit").set_value(3).run()
    assert not problems(at) and JobBoard().list() == []
