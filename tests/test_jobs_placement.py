"""Where jobs run (issue 27): work under the threshold runs in the caller's process (a thread, on a lent
model) with the same record, progress, cancel and saved result as any job; Ray that cannot start is a note
and a local run when Ray was only the runner's choice, one line when it was asked for; a job whose driver
died (SIGKILL, a reboot that reused its pid) reads failed, never running. No test here starts Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from core.store import RunStore
from workbench.scheduler import JobBoard, JobCancelled, JobError, run, submit
from workbench.scheduler.runner import placement, wait_here


def _wait(pred, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.fixture
def no_ray(monkeypatch):
    """Ray's start fails as it does on an overloaded machine; no job driver process may start."""
    import ray

    def fail(*args, **kwargs):
        raise RuntimeError("The current node timed out during startup (forced by the test)")

    monkeypatch.setattr(ray, "init", fail)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    popen = subprocess.Popen

    def no_driver(cmd, *args, **kwargs):
        assert "workbench.scheduler" not in list(map(str, cmd)), f"a job driver process was started: {cmd}"
        return popen(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", no_driver)


def test_placement_follows_the_estimate(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_LOCAL_S", "10")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    short, long = {"kind": "sleep", "seconds": 2, "steps": 4}, {"kind": "sleep", "seconds": 60, "steps": 4}
    assert placement(short, 1, None, tmp_path)[0] == "here"
    assert placement(long, 1, None, tmp_path) == ("ray", "estimated 60 s > 10 s")
    assert placement(short, 2, None, tmp_path)[0] == "ray"  # workers asked for
    assert placement(short, 1, "127.0.0.1:6379", tmp_path)[0] == "ray"  # an address asked for
    assert placement({"kind": "faithfulness", "model": "m", "rows": [], "methods": ["dpa"], "level": "token"}, 1,
                     None, tmp_path) == ("ray", "no estimate yet")
    assert placement(long, 1, None, tmp_path, seconds=3.0)[0] == "here"  # the caller measured it
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 8.0, 8.0))  # a busy machine: estimates grow
    assert placement(long, 1, None, tmp_path, seconds=30.0)[0] == ("here" if (os.cpu_count() or 1) <= 2 else "ray")


def test_small_work_runs_in_this_process_with_progress_cancel_and_save(no_ray):
    board, seen = JobBoard(), []
    job = submit({"kind": "sleep", "seconds": 0.3, "steps": 3}, board=board)
    assert wait_here(job.id, timeout=30)
    got = board.get(job.id)
    assert got.state == "done" and got.run_id and got.done == got.total == 3, got.log
    assert got.driver["pid"] == os.getpid() and got.ray_address is None
    assert any("runs in this process" in line for line in got.log) and not any("Ray" in line for line in got.log)
    assert RunStore().get(got.run_id).result() == {"steps": 3, "workers": 1}
    seen.append(got)
    long = submit({"kind": "sleep", "seconds": 8, "steps": 400}, board=board)  # under 10 s: here too
    _wait(lambda: board.get(long.id).done >= 2, timeout=30)
    board.request_cancel(long.id)
    assert wait_here(long.id, timeout=30)
    got = board.get(long.id)
    assert got.state == "cancelled" and got.run_id is None and "nothing was saved" in got.error
    assert [r["kind"] for r in RunStore().list()] == ["sleep"]  # only the first job's run


def test_a_job_in_a_thread_gives_the_result_of_run(tiny_llama_dir, one_thread, no_ray):
    """The same faithfulness job, run by ``run`` (the command's process) and by ``submit`` in a thread on a
    lent model (the app's), stores the same numbers."""
    import workbench as wb
    from tests.test_jobs import _rows

    model = wb.load(str(tiny_llama_dir))
    spec = {"kind": "faithfulness", "model": str(tiny_llama_dir), "rows": _rows(model, 3),
            "methods": ["random", "atp"], "level": "head", "ablation": "mean"}
    ran, _ = run(spec)
    lock = threading.RLock()
    job = submit(spec, models={str(tiny_llama_dir): (model, lock)}, seconds=1.0)
    assert wait_here(job.id, timeout=120)
    got = JobBoard().get(job.id)
    assert got.state == "done" and got.driver["pid"] == os.getpid(), got.log
    a, b = RunStore().get(ran.run_id).result(), RunStore().get(got.run_id).result()
    # Equal to float rounding: a new thread gets OpenMP's default thread count, not the caller's
    # torch.set_num_threads, so its reductions may sum in another order (seen: 0.3295719 vs 0.3295730).
    for name, m in a["methods"].items():
        for key in set(m) - {"attribution_seconds"}:
            assert b["methods"][name][key] == pytest.approx(m[key], rel=1e-4, abs=1e-6), (name, key)


def test_ray_that_cannot_start_is_a_note_unless_asked_for(no_ray, monkeypatch, capsys, tmp_path):
    board = JobBoard()
    job, result = run({"kind": "sleep", "seconds": 0.2, "steps": 4}, workers=2)  # Ray chosen, not asked for
    assert job.state == "done" and result.steps == [0, 1, 2, 3] and job.ray_address is None
    notes = [line for line in board.get(job.id).log if "Ray is unavailable" in line]
    assert len(notes) == 1 and "running in this process instead" in notes[0] and "timed out" in notes[0]
    started = time.monotonic()
    with pytest.raises(JobError, match="cannot connect to Ray at local"):
        run({"kind": "sleep", "seconds": 0.2, "steps": 4}, workers=2, address="local")  # asked for
    assert time.monotonic() - started < 10 and board.list()[0].state == "failed"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "a b c", "target": " d"}) + "\n")
    code, out, err = cli(monkeypatch, capsys, "attribute-set", "--model", "ioi-attn-1l2h", "--prompts", str(prompts),
                         "--ray-address", "local", "--json")
    assert_bad(code, err, "cannot connect to Ray at local")
    assert out == ""


DRIVER_SPEC = {"kind": "sleep", "seconds": 60, "steps": 600}


def test_a_killed_driver_reads_failed_and_jobs_list_shows_no_live_job(monkeypatch, capsys):
    """A job's driver process (here without Ray: one worker, no address) is killed with SIGKILL mid-job:
    the job reads failed at once and `jobs list` shows no live job; a record whose pid now names another
    process (a reboot reused it) reads failed too."""
    board = JobBoard()
    job = board.create(DRIVER_SPEC, "sleep 60 s")
    child = subprocess.Popen([sys.executable, "-m", "workbench.scheduler", str(board.root), job.id],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # the driver lowers its session group's priority
    try:
        _wait(lambda: board.get(job.id).done >= 2, timeout=60)
        running = board.get(job.id)
        assert running.state == "running" and running.driver["pid"] == child.pid
        child.kill()  # SIGKILL: nothing of the driver's runs again
        child.wait(10)
    finally:
        child.kill()
        child.wait()
    got = board.get(job.id)
    assert got.state == "failed" and f"pid {child.pid}" in got.error and got.run_id is None
    reused = board.create(DRIVER_SPEC, "before a reboot")
    reused.state = "running"
    reused.driver = {**reused.driver, "pid": os.getpid(), "started": reused.driver["started"] - 3600}
    board.write(reused)
    code, out, err = cli(monkeypatch, capsys, "jobs", "list", "--json")
    assert code == 0, err
    states = {row["id"]: row["state"] for row in json.loads(out)}
    assert states == {job.id: "failed", reused.id: "failed"}
    assert board.get(reused.id).error.startswith("the process that ran this job")
    assert RunStore().list() == []


def test_cancel_reaches_a_job_in_a_thread_between_shards(no_ray):
    """A cancel request made before a shard starts stops the job there (nothing runs, nothing is saved)."""
    from workbench.scheduler.runner import create, drive

    board = JobBoard()
    job = create({"kind": "sleep", "seconds": 0.1, "steps": 2}, 1, None, board)
    board.request_cancel(job.id)
    with pytest.raises(JobCancelled):
        drive(job, board)
    assert board.get(job.id).state == "cancelled" and RunStore().list() == []
