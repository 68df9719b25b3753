"""Running the CLI inside the test process and checking the bad-input contract."""

from __future__ import annotations

import sys


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """workbench.cli.main in this process (torch is already imported): (exit code, stdout, stderr)."""
    from workbench.cli import main

    monkeypatch.setattr(sys, "argv", ["workbench", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad(code: int, err: str, *words: str) -> None:
    """Bad input: exit 2, exactly one 'error:' line naming the problem, no traceback."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], lines[0]


def here_and_on_two_workers(monkeypatch, capsys, *args: str) -> tuple[dict, dict]:
    """A command's --json output run in this process (one torch thread, as a Ray worker runs) and as a job on
    two local Ray workers: (here, on_ray). Both must succeed; the job must have run both shards."""
    import json

    from workbench.scheduler import JobBoard

    code, out, err = run_cli(monkeypatch, capsys, *args, "--threads", "1")
    assert code == 0, err
    here = json.loads(out)
    code, out, err = run_cli(monkeypatch, capsys, *args, "--workers", "2")
    assert code == 0, err
    on_ray = json.loads(out)
    job = JobBoard().get(on_ray["job_id"])
    assert job.state == "done" and job.workers == 2 and sum("started (pid" in line for line in job.log) == 2
    return here, on_ray
