"""Jobs in app tests: a submit that records the job without starting its driver (which would start Ray)."""

from __future__ import annotations


def fake_submit(monkeypatch) -> list:
    """Replace workbench.scheduler.submit (what app/jobs_view.py calls) for this test; returns the jobs made."""
    import workbench.scheduler
    from workbench.scheduler import runner

    made = []

    def submit(spec, workers=1, address=None, board=None, **_):  # models, seconds: where it would run
        made.append(runner.create(spec, workers, "local", board or workbench.scheduler.JobBoard()))
        return made[-1]

    monkeypatch.setattr(workbench.scheduler, "submit", submit)
    return made
