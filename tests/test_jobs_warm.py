"""The warm local Ray instance (issue 27 item 2): a submitted job that goes to Ray starts it once, runs on its
model's actor, a later job reuses the same actor (imports done, model loaded), and the instance shuts itself
down when idle. One Ray start, in processes of their own (this test process never connects to Ray)."""

from __future__ import annotations

import os
import re
import time

import pytest

from core.store import pid_alive
from workbench.scheduler import JobBoard, submit, warm

pytestmark = pytest.mark.slow


def _wait(pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, what
        time.sleep(0.2)


def test_jobs_share_a_warm_instance_and_its_model_actor_which_goes_when_idle(tiny_llama_dir, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCAL_S", "0")  # nothing runs in this process: every job goes to Ray
    monkeypatch.setenv("WORKBENCH_RAY_IDLE_S", "8")
    board = JobBoard()
    spec = {"kind": "attribute", "model": str(tiny_llama_dir), "prompt": "the cat sat on a mat and the dog",
            "target": " ran", "foil": None, "method": "dpa", "level": "head", "position": None}
    pids, host = [], None
    try:
        for prompt in (spec["prompt"], spec["prompt"] + " ran"):
            job = submit({**spec, "prompt": prompt}, board=board, warm_owner=os.getpid())
            _wait(lambda j=job: board.get(j.id).state not in ("queued", "running"), 240, "the job never ended")
            got = board.get(job.id)
            assert got.state == "done" and got.run_id, got.log
            assert any("on the warm instance" in line for line in got.log), got.log
            pids += [int(m) for m in re.findall(r"started \(pid (\d+)\)", "\n".join(got.log))]
            host = warm.live(board.root)
            assert host is not None
        assert len(pids) == 2 and pids[0] == pids[1]  # the same actor, its model loaded once
        _wait(lambda: warm.live(board.root) is None and not pid_alive(host["host"]["pid"]), 60,
              "the idle instance was not shut down")
        _wait(lambda: not pid_alive(pids[0]), 30, "the model's actor outlived its instance")
    finally:
        if host is not None and pid_alive(host["host"]["pid"]):
            import signal

            os.kill(host["host"]["pid"], signal.SIGTERM)
