"""Load script (issue 16, first "done when" line): two browser sessions on one `workbench app` server.

Session B times the Attribution page's DPA of a fresh 30-token prompt on smollm2-135m (idle). Session A
then starts activation patching at the neuron level on the same page (the page shows the measured
estimate; pressing the button is the confirmation) and waits until its job reports items done. Session B
times DPA again on fresh prompts while the job runs. Session A then opens the Jobs page and presses Cancel:
the script measures the seconds until the job's record says cancelled and until its worker and driver
processes are gone, and session B times DPA once more right after (the model usable at once). Last,
session A starts the job again and the script kills its Ray worker (SIGKILL): the seconds until the job is
marked failed, its message, whether session A shows it, and session B's DPA after (the app keeps serving).
No run may be written by any of it.

    .venv/bin/python scripts/load_jobs_app.py [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.serving import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    free_port,
    start_app,
    stop_app,
)
from app.serving import process_running as running  # noqa: E402
from app.serving import wait_until as _wait  # noqa: E402

MODEL = "smollm2-135m"
BASE = ("When Mary and John went to the store on a sunny Saturday morning to buy some bread, fresh milk and two "
        "red apples, John gave a drink to")  # 30 smollm2 tokens
# Fresh prompts of the same length (one word changed), so every timing computes instead of reusing a result.
SWAPS = ["bread", "cheese", "butter", "rice", "honey", "jam", "tea", "soup", "fish", "corn"]
ITEMS = re.compile(r"([\d,]+) / ([\d,]+) items")
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'


def prompt(i: int) -> str:
    return BASE.replace("bread", SWAPS[i % len(SWAPS)])


def wait_until(check, timeout: float, what: str):
    return _wait(check, timeout, what, every=0.05)  # timings: poll finely


def idle(page) -> bool:
    return page.locator('[data-testid="stStatusWidget"]').count() == 0


def dpa_done(page, text: str) -> bool:
    """The page shows the result for ``text``: no element left over from the previous run (Streamlit marks
    those data-stale until the new run replaces them), the new prompt's own token in the token strip, the
    status line done, the metrics drawn, and no script run in progress."""
    word = next((w for w in SWAPS if f" {w}," in text), None)
    return (page.get_by_role("textbox", name="Prompt", exact=True).input_value() == text
            and page.locator('[data-stale="true"]').count() == 0
            and (word is None or page.get_by_text(f"\u2423{word}", exact=False).count() > 0)
            and page.locator("text=/Attributing \\d+ tokens done/").count() > 0
            and page.locator('[data-testid="stMetricValue"]').count() > 0 and idle(page))


def time_dpa(page, text: str, timeout: float = 300) -> float:
    """Seconds from submitting a new prompt in the session until its DPA result is drawn."""
    box = page.get_by_role("textbox", name="Prompt", exact=True)
    box.fill(text)
    started = time.time()
    box.press("Control+Enter")
    try:
        try:  # a short run may end before the running widget ever shows
            wait_until(lambda: not idle(page), 3, "the page never showed its run")
        except TimeoutError:
            pass
        wait_until(lambda: dpa_done(page, text), timeout, "DPA never finished")
    except TimeoutError:
        shot = Path(tempfile.gettempdir()) / "load_jobs_app-timeout.png"
        page.screenshot(path=str(shot), full_page=True)
        raise TimeoutError(f"no DPA result for a fresh prompt within {timeout} s (screenshot {shot})") from None
    errors = page.locator(ERRORS)
    if errors.count():
        raise RuntimeError(errors.first.inner_text()[:300])
    return round(time.time() - started, 2)


def job_items(board) -> tuple[int, int] | None:
    jobs = [j for j in board.list() if j.kind == "attribute" and j.state == "running"]
    return (jobs[0].done, jobs[0].total) if jobs and jobs[0].total else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="DPA timings per phase")
    ap.add_argument("--level", default="neuron", help="activation patching level of the job (head or neuron)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from workbench.scheduler import JobBoard

    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing")
    tmp = Path(tempfile.mkdtemp(prefix="wb-jobload-"))
    runs = tmp / "runs"
    board = JobBoard(runs / ".jobs")
    port = free_port()
    proc = start_app(port, tmp / "app.log", env={"WORKBENCH_RUNS": str(runs)}, timeout=240)
    figures: dict = {"model": MODEL, "prompt_tokens": 30, "level": args.level, "cores": os.cpu_count()}
    url = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            a = browser.new_context(viewport={"width": 1400, "height": 1400}).new_page()
            b = browser.new_context(viewport={"width": 1400, "height": 1400}).new_page()
            q = urllib.parse.urlencode({"model": MODEL, "prompt": prompt(0), "methods": "dpa"})
            b.goto(f"{url}/?{q}", timeout=240_000)
            wait_until(lambda: dpa_done(b, prompt(0)), 600, "session B's first DPA")  # loads and warms the model
            figures["dpa_idle_s"] = [time_dpa(b, prompt(1 + i)) for i in range(args.rounds)]
            print(f"idle: {figures['dpa_idle_s']}", file=sys.stderr, flush=True)

            # session A: activation patching; its component levels show an estimate and a confirm button
            q = urllib.parse.urlencode({"model": MODEL, "prompt": BASE, "methods": "activation_patching"})
            a.goto(f"{url}/?{q}", timeout=240_000)
            button = a.get_by_role("button", name=re.compile(f"Run activation_patching · {args.level} as a job"))
            button.wait_for(timeout=600_000)
            warning = a.get_by_test_id("stAlertContentWarning").filter(has_text=f"at the {args.level} level")
            figures["estimate_shown"] = warning.first.inner_text()[:300]
            button.click()
            wait_until(lambda: (got := job_items(board)) and got[0] > 0, 300, "the patching job never progressed")
            (job,) = [j for j in board.list() if j.kind == "attribute"]
            figures["job"] = job.id
            print(f"job {job.id} running: {job_items(board)}", file=sys.stderr, flush=True)
            figures["dpa_during_job_s"] = [time_dpa(b, prompt(3 + i)) for i in range(args.rounds)]
            print(f"during: {figures['dpa_during_job_s']}", file=sys.stderr, flush=True)
            job = board.get(job.id)
            figures["job_progress_at_cancel"] = f"{job.done}/{job.total}, eta {job.eta_s} s"
            pids = [job.driver["pid"]] + [int(m) for m in re.findall(r"started \(pid (\d+)\)", "\n".join(job.log))]

            # session A cancels it from the Jobs page
            a.goto(f"{url}/jobs", timeout=60_000)
            cancel = a.get_by_role("button", name="Cancel")
            cancel.first.wait_for(timeout=60_000)
            pressed = time.time()
            cancel.first.click()
            wait_until(lambda: board.get(job.id).state == "cancelled", 30, "the job was never marked cancelled")
            figures["cancel_marked_s"] = round(time.time() - pressed, 2)
            wait_until(lambda: not any(running(pid) for pid in pids[1:]), 30, f"workers {pids[1:]} still run")
            figures["cancel_worker_gone_s"] = round(time.time() - pressed, 2)  # the model's memory and locks
            wait_until(lambda: not running(pids[0]), 30, f"driver {pids[0]} still runs")
            figures["cancel_driver_gone_s"] = round(time.time() - pressed, 2)  # it also stops its Ray instance
            figures["dpa_after_cancel_s"] = time_dpa(b, prompt(7))

            # session A starts it again from the Attribution page; its Ray worker is killed mid-job
            a.goto(f"{url}/?{q}", timeout=240_000)
            button.wait_for(timeout=600_000)
            button.click()
            wait_until(lambda: (got := job_items(board)) and got[0] > 0, 300, "the second job never progressed")
            (again,) = [j for j in board.list() if j.kind == "attribute" and j.state == "running"]
            (worker,) = [int(m) for m in re.findall(r"started \(pid (\d+)\)", "\n".join(again.log))]
            os.kill(worker, 9)
            killed = time.time()
            wait_until(lambda: board.get(again.id).state == "failed", 60, "the job was never marked failed")
            figures["killed_worker_failed_s"] = round(time.time() - killed, 2)
            figures["killed_worker_message"] = board.get(again.id).error
            a.get_by_test_id("stAlertContentError").filter(has_text="died").first.wait_for(timeout=60_000)
            figures["killed_worker_shown_in_session_a"] = True
            figures["dpa_after_kill_s"] = time_dpa(b, prompt(8))
            figures["runs_written"] = len([d for d in runs.iterdir() if not d.name.startswith(".")])
            for name, page in (("a", a), ("b", b)):
                page.screenshot(path=str(tmp / f"session-{name}.png"), full_page=True)
            browser.close()
    finally:
        stop_app(proc)
    figures["load_avg_1m"] = round(os.getloadavg()[0], 2)
    figures["screenshots"] = str(tmp)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
