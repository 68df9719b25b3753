"""Attribution page, slow levels: over the threshold a level shows its measured estimate and a button (the
confirmation) instead of running here; the job's panel shows inline; a finished job's result joins the page
and opens at once in a new session; a cancelled job can be started again."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from job_helpers import fake_submit  # noqa: E402

from app.testing import chart, open_page, problems  # noqa: E402


def state(model_dir) -> dict:
    return {"attr_model": str(model_dir), "attr_prompt": "When Mary and John went to the store, John gave",
            "attr_methods": ["activation_patching"]}


@pytest.fixture
def recorded(monkeypatch):
    """Jobs the page starts are recorded only (no Ray driver); the threshold is 0 so every component level of
    activation patching counts as slow."""
    import app.jobs_view as J

    monkeypatch.setattr(J, "THRESHOLD_S", 0.0)
    return fake_submit(monkeypatch)


def test_slow_levels_ask_first_run_as_jobs_and_are_shared(recorded, tiny_llama_dir):
    from workbench.scheduler import JobBoard
    from workbench.scheduler.runner import drive

    board = JobBoard()
    at = open_page("attribution", state(tiny_llama_dir))
    assert not problems(at), problems(at)
    warnings = " ".join(w.value for w in at.warning)
    assert "activation_patching at the head level" in warnings and "at the neuron level" in warnings
    assert {"attr_job_go_head", "attr_job_go_neuron"} <= {b.key for b in at.button}
    assert not recorded  # nothing started without the confirmation
    at.button(key="attr_job_go_head").click().run()
    assert not problems(at) and len(recorded) == 1 and recorded[0].spec["level"] == "head"
    assert any("queued" in m.value and "activation_patching" in m.value for m in at.markdown)  # its panel

    job, _ = drive(board.get(recorded[0].id), board)  # the job runs (here) and saves its run
    assert job.state == "done"
    at.run()
    assert not problems(at)
    assert "attr_job_go_head" not in {b.key for b in at.button}  # the head result is on the page now
    assert chart(at, "attr_head_grid")["data"]  # the head grid, from the job's run

    fresh = open_page("attribution", state(tiny_llama_dir))  # another session: opened at once, no button
    assert not problems(fresh) and "attr_job_go_head" not in {b.key for b in fresh.button}
    assert "attr_job_go_neuron" in {b.key for b in fresh.button}

    fresh.button(key="attr_job_go_neuron").click().run()
    neuron = recorded[-1]
    board.request_cancel(neuron.id)
    with pytest.raises(Exception, match="cancelled"):
        drive(board.get(neuron.id), board)
    fresh.run()
    assert not problems(fresh)
    assert any("cancelled" in i.value for i in fresh.info)  # what happened, and the button to start it again
    assert "attr_job_go_neuron" in {b.key for b in fresh.button}


def test_a_job_over_an_hour_needs_a_second_confirmation(recorded, tiny_llama_dir, monkeypatch):
    """Issue 50 finding 7: a 5.6-hour neuron-level job started with one click. Over an hour (the neuron
    level's estimate faked here), its button stays disabled until the checkbox naming the hours is ticked;
    a short level's button needs one click as before."""
    from dataclasses import replace

    import attribution.cost as cost

    real = cost.estimate

    def estimate(model, enc, method, level, *a, **k):
        got = real(model, enc, method, level, *a, **k)
        return replace(got, seconds_per_item=20_000.0 / got.items) if level == "neuron" and got else got

    monkeypatch.setattr(cost, "estimate", estimate)
    at = open_page("attribution", state(tiny_llama_dir))
    assert not problems(at), problems(at)
    sure = at.checkbox(key="attr_job_go_neuron_sure")
    assert "5.6 h" in sure.label and not sure.value
    assert at.button(key="attr_job_go_neuron").disabled and not at.button(key="attr_job_go_head").disabled
    assert "attr_job_go_head_sure" not in {c.key for c in at.checkbox}  # not long: no second question
    assert not recorded
    at.checkbox(key="attr_job_go_neuron_sure").check().run()
    assert not at.button(key="attr_job_go_neuron").disabled
    at.button(key="attr_job_go_neuron").click().run()
    assert not problems(at) and [j.spec["level"] for j in recorded] == ["neuron"]
