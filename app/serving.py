"""Running `workbench app` as a server and driving Debian's Chromium against it.

Shared by the browser tests and the load scripts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# Headless, and no background traffic: this machine's network is closed to everything but loopback.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, log: Path, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.Popen:
    """`workbench app --port P` (127.0.0.1 by default), waiting until Streamlit answers its health check."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "app", "--port", str(port)],
        cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT,
        # no file watcher: edits to the tree while a test or load run goes on must not raise the "File change"
        # status (browser tests wait for the status widget to go away)
        env={**os.environ, "STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none", **(env or {})}, start_new_session=True,
    )
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited early: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_app(proc)
    raise RuntimeError(f"the app did not start: {log.read_text()[-2000:]}")


def stop_app(proc: subprocess.Popen) -> None:
    """End the server's whole process group, politely first."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(1.0 if sig == signal.SIGTERM else 0)


def process_running(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (ended, its memory freed, not yet reaped by its parent) is gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(check, timeout: float, what: str, every: float = 0.2):
    """``check()``'s first truthy value, polled every ``every`` s; TimeoutError naming ``what`` after ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout} s")


RUNNING = '[data-testid="stStatusWidget"]'  # Streamlit's "running" widget, shown while a script run is on


def settle(page, timeout: float = 180, quiet_s: float = 2.0, poll_s: float = 0.25) -> float:
    """Wait until the page's script run is over: its title is drawn and no "running" widget has shown for
    ``quiet_s``. Returns the ``time.perf_counter()`` at which it went quiet (the load script times renders
    by it); TimeoutError after ``timeout`` seconds."""
    deadline = time.perf_counter() + timeout
    page.wait_for_selector("h1", timeout=timeout * 1000)
    quiet_since = None
    while time.perf_counter() < deadline:
        now = time.perf_counter()
        if page.locator(RUNNING).count():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_s:
            return quiet_since
        time.sleep(poll_s)
    raise TimeoutError(f"{page.url} still running after {timeout} s")



@contextlib.contextmanager
def app_in_chromium(log: Path, height: int, env: dict[str, str] | None = None, width: int = 1400):
    """`workbench app` on a free port (its output in ``log``, ``env`` added to its environment) and one headless
    Chromium page ``width`` x ``height``: yields (page, port); the browser and the server are stopped however
    the caller ends."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = start_app(port, log, env=env)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": width, "height": height})
            # clicks and reads without their own timeout wait up to 2 minutes, not Playwright's 30 s: on a CI
            # machine at load 20 a tab stayed "not stable" past 30 s while the page redrew
            page.set_default_timeout(120_000)
            try:
                yield page, port
            except Exception as err:
                # a browser test that times out on a loaded machine says what the page and the server showed
                err.add_note(_what_was_shown(page, log))
                raise
            finally:
                browser.close()
    finally:
        stop_app(proc)


def _what_was_shown(page, log: Path) -> str:
    try:
        body = page.inner_text("body", timeout=5_000)[-1500:]
    except Exception as err:  # the page itself may be what failed
        body = f"(unreadable: {type(err).__name__})"
    tail = log.read_text(errors="replace")[-2500:] if log.exists() else "(no log)"
    return f"page {page.url} showed:\n{body}\n--- app log tail ---\n{tail}"


def group_supernode(page, label: str, members: list[str], settle=settle) -> None:
    """On a graph page whose "Pins and supernodes" panel is open: name a supernode ``label``, pick ``members``
    in its Members box and press Group (``settle`` waits after each step)."""
    box = page.get_by_role("textbox", name="Supernode label")
    box.fill(label)
    box.press("Enter")
    settle(page)
    picker = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Members").first
    for m in members:
        picker.locator("input").first.click()
        page.get_by_role("option", name=m, exact=True).click()
        settle(page)
    page.keyboard.press("Escape")
    page.get_by_role("button", name="Group", exact=True).click()
    settle(page)
