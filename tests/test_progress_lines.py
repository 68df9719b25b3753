"""Long work reports as it goes, on a terminal or not: a line per finished unit with its time, the count done
and the estimate of what is left (core.progress), written by `bench circuits` to a stderr that is a file and
kept in the job's record."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

from core.progress import Lines, clock, unit_line


def test_unit_line_counts_and_estimates():
    line = unit_line("ioi x eap edge", 41.25, 3, 12, 90.0)
    assert "ioi x eap edge: 41.2 s" in line and "3/12" in line
    assert "about 4m30s left" in line  # 30 s a unit so far, 9 units left
    assert "left" not in unit_line("x", 1.0, 0, 12, 5.0)  # nothing done: no estimate yet
    assert clock(59) == "59 s" and clock(61) == "1m01s" and clock(3700) == "1h01m"


def test_lines_write_to_a_stream_that_is_not_a_terminal():
    ticks = iter([0.0, 10.0, 25.0])
    out = io.StringIO()
    lines = Lines(total=2, stream=out, clock=lambda: next(ticks))
    lines.done("layer 0")
    lines.done("layer 1")
    text = out.getvalue().splitlines()
    assert len(text) == 2
    assert "layer 0: 10.0 s" in text[0] and "1/2" in text[0] and "about 10 s left" in text[0]
    assert "layer 1: 15.0 s" in text[1] and "2/2" in text[1]


def test_bench_circuits_to_a_file_prints_a_line_per_unit(tiny_llama_dir, tmp_path):
    rows = [{"prompt": f"The cat number {i} sat on the mat", "corrupt": f"The dog number {i} sat on the mat",
             "target": " and", "foil": " or", "split": "train" if i < 5 else "test"} for i in range(10)]
    task = tmp_path / "t.jsonl"
    task.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs"), "WORKBENCH_JOBS": str(tmp_path / "jobs"),
           "OMP_NUM_THREADS": "1"}
    err = tmp_path / "stderr.log"
    with err.open("w") as stderr:
        done = subprocess.run([sys.executable, "-m", "workbench.cli", "bench", "circuits", "--model",
                               str(tiny_llama_dir), "--tasks", str(task), "--methods", "eap,dpa", "--levels", "edge",
                               "--n-train", "4", "--n-test", "4", "--no-filter", "--json"],
                              stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=600, env=env)
    log = err.read_text()
    assert done.returncode == 0, log
    units = [line for line in log.splitlines() if re.search(r"\] t x (eap|dpa) edge: \d+\.\d s", line)]
    assert len(units) == 2, log
    assert "1/2" in units[0] and "2/2" in units[1] and "left" in units[0]
    json.loads(done.stdout)  # stdout stays the result alone
    records = [json.loads(r.read_text()) for r in (tmp_path / "jobs").glob("*.json") if r.name != "costs.json"]
    assert len(records) == 1, "no job record"  # costs.json beside it is the board's measured costs, not a job
    job = records[0]
    assert any(re.search(r"(eap|dpa) edge: \d+\.\d s", line) for line in job["log"])


def test_a_quiet_job_gets_a_working_line_at_least_every_minute(capsys):
    from types import SimpleNamespace

    from workbench.commands.jobs import ProgressLines

    lines = ProgressLines(SimpleNamespace(is_terminal=False))
    lines.beat(lines.t0 + 100.0)  # no job shown yet (a job refused at once): nothing
    job = SimpleNamespace(kind="bench_circuits", log=[], done=3, total=10, eta_s=120.0)
    lines.show(job)
    lines.beat(lines.t0 + 10.0)  # a line came recently: nothing
    lines.beat(lines.t0 + 55.0)
    lines.beat(lines.t0 + 60.0)  # 5 s after the last line: nothing
    lines.beat(lines.t0 + 106.0)
    text = capsys.readouterr().err.splitlines()
    assert len(text) == 2, text
    assert "bench-circuits: working" in text[0] and "3/10" in text[0] and "about 2m00s left" in text[0]
    assert "1m46s]" in text[1], text


def test_heartbeat_beats_until_its_block_ends_and_swallows_failures():
    import time

    from core.progress import Heartbeat

    calls = []

    def beat():
        calls.append(1)
        raise RuntimeError("a reporter's failure")

    with Heartbeat(beat, every_s=0.01):
        deadline = time.monotonic() + 30.0
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(calls) >= 3
    after = len(calls)
    time.sleep(0.1)
    assert len(calls) == after  # stopped with the block
