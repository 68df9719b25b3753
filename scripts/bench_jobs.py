"""Jobs on Ray, measured (issue 16's "done when" lines), on smollm2-135m:

1. sharding: ``faithfulness`` over 20 IOI prompts with 1 worker (this process) and 2 Ray workers: the largest
   difference between their numbers, and the speed-up;
2. responsiveness: DPA of a 30-token prompt in this process (as the app runs it), idle and while an
   activation-patching job (neuron level) runs on Ray; then cancel: seconds until the job is cancelled and
   its worker is gone, and DPA right after;
3. a worker killed mid-job: the job's state and message, and whether any run was written.

    python scripts/bench_jobs.py [--prompts 20] [--methods dpa,random] [--skip 1,2,3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.store import pid_alive  # noqa: E402

PROMPT_30 = ("When Mary and John went to the store on a sunny Saturday morning to buy some bread, fresh milk "
             "and two red apples, John gave a drink to")  # 30 smollm2 tokens




def _wait(pred, timeout: float) -> float:
    start = time.monotonic()
    while not pred():
        if time.monotonic() - start > timeout:
            raise TimeoutError("timed out")
        time.sleep(0.02)
    return time.monotonic() - start


def _numbers(result) -> dict[str, float]:
    return {f"{n}.{k}": v for n, m in result.to_json()["methods"].items() for k, v in m.items()
            if isinstance(v, float) and k != "attribution_seconds"}


def sharding(n_prompts: int, methods: list[str]) -> dict:
    from core.prompt_files import read_prompts
    from workbench.scheduler import run

    rows = read_prompts(str(ROOT / "data/prompts/ioi.jsonl"), n_prompts)
    spec = {"kind": "faithfulness", "model": "smollm2-135m", "rows": rows, "methods": methods, "level": "token",
            "prompts_file": "data/prompts/ioi.jsonl", "threads": 1}
    out = {}
    for workers in (1, 2):
        started = time.perf_counter()
        job, result = run(spec, workers=workers, save=False)
        out[workers] = (time.perf_counter() - started, _numbers(result), job.id)
    (t1, a, _), (t2, b, _) = out[1], out[2]
    diff = max(abs(a[k] - b[k]) for k in a)
    return {"prompts": n_prompts, "methods": methods, "seconds_1_worker": round(t1, 1),
            "seconds_2_workers": round(t2, 1), "speedup": round(t1 / t2, 2), "max_abs_difference": diff,
            "same_keys": sorted(a) == sorted(b)}


def responsiveness() -> dict:
    import workbench as wb
    from workbench.scheduler import JobBoard, submit

    model = wb.load("smollm2-135m")
    enc = model.encode(PROMPT_30, " Mary", " John")

    def dpa_seconds() -> float:
        started = time.perf_counter()
        wb.attribute(model, PROMPT_30, target=" Mary", foil=" John", method="dpa")
        return time.perf_counter() - started

    dpa_seconds()  # warm
    idle = min(dpa_seconds() for _ in range(3))
    board = JobBoard()
    spec = {"kind": "attribute", "model": "smollm2-135m", "prompt": PROMPT_30, "target": " Mary", "foil": " John",
            "method": "activation_patching", "level": "neuron"}
    job = submit(spec, board=board)
    _wait(lambda: board.get(job.id).done > 0, 600)
    busy = [dpa_seconds() for _ in range(3)]
    progress = board.get(job.id)
    pid = int(next(line for line in reversed(progress.log) if "pid" in line).split("pid ")[1].rstrip(")"))
    started = time.monotonic()
    board.request_cancel(job.id)
    cancelled = _wait(lambda: board.get(job.id).state == "cancelled", 30)
    gone = _wait(lambda: not pid_alive(pid), 30) + cancelled
    after = dpa_seconds()
    return {"tokens": enc.seq_len, "dpa_idle_s": round(idle, 3), "dpa_during_job_s": [round(x, 3) for x in busy],
            "job_progress_when_measured": f"{progress.done}/{progress.total}, eta {progress.eta_s} s",
            "cancel_to_cancelled_s": round(cancelled, 2), "cancel_to_worker_gone_s": round(gone, 2),
            "dpa_right_after_cancel_s": round(after, 3), "since_cancel_s": round(time.monotonic() - started, 2)}


def killed_worker() -> dict:
    from core.prompt_files import read_prompts
    from core.store import RunStore
    from workbench.scheduler import JobBoard, submit

    rows = read_prompts(str(ROOT / "data/prompts/ioi.jsonl"), 20)
    spec = {"kind": "faithfulness", "model": "smollm2-135m", "rows": rows, "methods": ["dpa", "gradient"],
            "level": "token"}
    board = JobBoard()
    before = len(RunStore().list())
    job = submit(spec, workers=2, board=board)
    _wait(lambda: board.get(job.id).done >= 2, 600)
    pid = int(next(line for line in reversed(board.get(job.id).log) if "pid" in line).split("pid ")[1].rstrip(")"))
    os.kill(pid, 9)
    seconds = _wait(lambda: board.get(job.id).state != "running", 60)
    got = board.get(job.id)
    return {"state": got.state, "error": got.error, "seconds_to_failed": round(seconds, 2),
            "runs_before": before, "runs_after": len(RunStore().list())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--methods", default="dpa,random")
    ap.add_argument("--skip", default="")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    os.environ.setdefault("WORKBENCH_RUNS", tempfile.mkdtemp(prefix="bench-jobs-runs-"))
    skip = set(args.skip.split(","))
    report = {}
    for part, fn in (("1", lambda: sharding(args.prompts, args.methods.split(","))), ("2", responsiveness),
                     ("3", killed_worker)):
        if part in skip:
            continue
        started = time.perf_counter()
        report[part] = fn()
        report[part]["bench_seconds"] = round(time.perf_counter() - started, 1)
        print(json.dumps({part: report[part]}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
