"""Load test: eight browser sessions at once on the attribution page, each with its own prompt.

Starts `workbench app` on a free port (127.0.0.1), opens N headless-Chromium sessions together on
/?prompt=..., waits for every one to finish, and checks that each shows its own correct result (the
suggested target and foil are the ones the page suggests for *its* prompt, the model's top-1 token and a
foil shaped like it, and the target − foil logit matches a direct forward pass), that no session shows an
exception, and that the model was loaded once. Then measures a warm DPA run for a 30-token prompt in one
session. Prints peak memory of the server.

    .venv/bin/python scripts/load_test_app.py [--sessions 8] [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.serving import CHROMIUM, CHROMIUM_ARGS, free_port, start_app, stop_app  # noqa: E402

ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
PROMPTS = [
    "The capital of France is",
    "When Mary and John went to the store, John gave a drink to",
    "The Eiffel Tower is located in the city of",
    "One, two, three, four,",
    "The opposite of hot is",
    "She opened the door and saw a big",
    "In the morning I like to drink a cup of",
    "The first president of the United States was George",
]
WARM_PROMPT = (
    "In the small town by the river, the baker opened his shop early every morning, and the "
    "children who walked past on their way to school asked for"
)


class PeakMemory(threading.Thread):
    """Samples the resident memory of a process and its children every 0.1 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        import psutil

        self.proc = psutil.Process(pid)
        self.peak = 0
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def rss(self) -> int:
        import psutil

        total = 0
        for p in [self.proc] + self.proc.children(recursive=True):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def run(self) -> None:
        while not self.stop.is_set():
            now = self.rss()
            self.peak = max(self.peak, now)
            self.samples.append((time.time(), now))
            time.sleep(0.1)



def done(page) -> bool:
    """Finished: the token heatmap's metrics are drawn and no script run is in progress."""
    return (
        page.locator('[data-testid="stMetricValue"]').count() > 0
        and page.locator('[data-testid="stStatusWidget"]').count() == 0
    ) or page.locator(ERRORS).count() > 0


def field(page, name: str):
    return page.get_by_role("textbox", name=name, exact=True)


def read(page) -> dict:
    metric = page.locator('[data-testid="stMetric"]').first
    errors = page.locator(ERRORS)
    value = metric.locator('[data-testid="stMetricValue"]').inner_text().replace("−", "-")
    return {
        "prompt": field(page, "Prompt").input_value(),
        "target": field(page, "Target token").input_value(),
        "foil": field(page, "Foil token (optional)").input_value(),
        "logit_diff": float(value),
        "errors": [errors.nth(i).inner_text()[:200] for i in range(errors.count())],
    }


def expected(model_name: str, rows: list[dict]) -> list[dict]:
    """The target and foil the attribution page suggests (app.attr_inputs.suggestions: top-1, and a foil shaped like
    it, ' London' for ' Paris') and their logit difference, straight from the model (after the browser part)."""
    import threading
    from types import SimpleNamespace

    import torch

    import workbench as wb
    from app.attr_inputs import suggestions
    from app.readouts import prompt_pass

    m = wb.load(model_name)
    loaded = SimpleNamespace(model=m, lock=threading.Lock())
    out = []
    for r in rows:
        ppass = prompt_pass(loaded, r["prompt"])
        target, foil = suggestions(ppass, len(ppass.tokens) - 1)
        logits = m.logits(m.to_tokens(r["prompt"]))[0, -1]
        ids = {m.decode([int(i)]): int(i) for i in torch.softmax(logits.float(), -1).topk(8).indices}
        out.append({"target": target, "foil": foil, "logit_diff": float(logits[ids[target]] - logits[ids[foil]])})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing")
    tmp = Path(tempfile.mkdtemp(prefix="wb-load-"))
    port, log = free_port(), tmp / "app.log"
    try:
        proc = start_app(port, log, env={"WORKBENCH_RUNS": str(tmp / "runs")}, timeout=180)
    except RuntimeError as exc:
        sys.exit(str(exc))
    mem = PeakMemory(proc.pid)
    mem.start()
    idle_rss = mem.rss()
    prompts = (PROMPTS * (args.sessions // len(PROMPTS) + 1))[: args.sessions]
    figures: dict = {"sessions": args.sessions, "model": args.model, "server_rss_idle_mb": idle_rss / 2**20}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            pages = [browser.new_context(viewport={"width": 1300, "height": 900}).new_page() for _ in prompts]
            started = time.time()
            for page, prompt in zip(pages, prompts, strict=True):  # all sessions start before any finishes
                q = urllib.parse.urlencode({"model": args.model, "prompt": prompt, "methods": "dpa"})
                page.goto(f"http://127.0.0.1:{port}/?{q}", wait_until="commit")
            finish: dict[int, float] = {}
            while len(finish) < len(pages) and time.time() - started < args.timeout:
                for i, page in enumerate(pages):
                    if i not in finish and done(page):
                        time.sleep(0.5)
                        if done(page):
                            finish[i] = time.time() - started
                            print(f"session {i} done at {finish[i]:.1f} s", file=sys.stderr, flush=True)
                time.sleep(0.2)
            rows = [read(page) for page in pages]
            figures["all_sessions_done_s"] = max(finish.values()) if finish else None
            figures["per_session_done_s"] = [round(finish.get(i, float("nan")), 2) for i in range(len(pages))]
            figures["rss_after_sessions_mb"] = mem.rss() / 2**20
            # a warm 30-token DPA run in one session, end to end in the browser
            page = pages[0]
            box = field(page, "Prompt")
            box.fill(WARM_PROMPT)
            t0 = time.time()
            box.press("Control+Enter")
            page.wait_for_function(
                "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000
            )
            page.wait_for_selector("text=Attributing 30 tokens done", timeout=120_000)
            figures["warm_dpa_30_tokens_browser_s"] = time.time() - t0
            status = page.locator("text=Attributing 30 tokens done").first.inner_text()
            figures["warm_dpa_30_tokens_status"] = status
            for i, page in enumerate(pages):
                page.screenshot(path=str(tmp / f"session{i}.png"))
            browser.close()
    finally:
        mem.stop.set()
        mem.join()
        stop_app(proc)
    loads = [line for line in log.read_text().splitlines() if "[workbench-app] loaded model" in line]
    want = expected(args.model, rows)
    ok = []
    for r, w in zip(rows, want, strict=True):
        ok.append(
            not r["errors"]
            and r["target"] == w["target"]
            and r["foil"] == w["foil"]
            and abs(r["logit_diff"] - w["logit_diff"]) < 2e-3
        )
    figures.update(
        server_peak_rss_mb=mem.peak / 2**20,
        model_loads=len(loads),
        load_lines=loads,
        sessions_correct=sum(ok),
        sessions_with_errors=sum(bool(r["errors"]) for r in rows),
        results=[{**r, "expected": w} for r, w in zip(rows, want, strict=True)],
        artifacts=str(tmp),
    )
    print(json.dumps(figures, indent=1, default=str))
    passed = all(ok) and len(loads) == 1 and len(finish) == len(pages)
    print(
        f"\n{'PASS' if passed else 'FAIL'}: {sum(ok)}/{len(rows)} sessions correct, model loaded "
        f"{len(loads)} time(s), server peak RSS {mem.peak / 2**20:.0f} MiB "
        f"(idle {idle_rss / 2**20:.0f} MiB), "
        f"all {len(rows)} sessions done in {figures['all_sessions_done_s']:.1f} s, "
        f"warm 30-token DPA in the browser {figures['warm_dpa_30_tokens_browser_s']:.2f} s"
    )
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
