"""Progress for long work: bars for the notebook API's long calls (patching, circuit discovery, jobs), and
plain lines per finished unit (``Lines``, ``unit_line``) for commands whose stderr may be a log file.

A bar shows only inside a Jupyter kernel: the CLI has its own progress on stderr and the app its own bars, and
a script or a test calling the facade stays quiet. tqdm's notebook bar is used when ipywidgets is installed,
else tqdm's text bar (on the cell's stderr), so an executed notebook shows it without a widget state.
"""

from __future__ import annotations

import sys
from typing import Any


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell), not a terminal IPython or a script."""
    if "ipykernel" not in sys.modules:
        return False
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    return type(shell).__name__ == "ZMQInteractiveShell"


class Bar:
    """A tqdm bar, or nothing outside a notebook. ``total(n)`` sets the count, ``step(k)`` adds k,
    ``to(done, total)`` moves to an absolute count; ``close()`` ends it (use as a context manager)."""

    def __init__(self, desc: str, total: int | None = None, unit: str = "it", show: bool | None = None) -> None:
        self._bar: Any = None
        if show if show is not None else in_notebook():
            import importlib.util

            if importlib.util.find_spec("ipywidgets") is not None:
                from tqdm.notebook import tqdm
            else:  # tqdm.auto would warn "IProgress not found" and fall back to this anyway
                from tqdm.std import tqdm
            self._bar = tqdm(total=total, desc=desc, unit=unit, leave=True, file=sys.stderr, mininterval=0.5)

    def total(self, n: int) -> None:
        if self._bar is not None:
            self._bar.total = int(n)
            self._bar.refresh()

    def step(self, k: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(int(k))

    def to(self, done: int, total: int | None = None) -> None:
        if self._bar is not None:
            if total is not None and self._bar.total != total:
                self._bar.total = int(total)
            self._bar.update(int(done) - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def clock(seconds: float) -> str:
    """Seconds as a short duration: 42 s, 3m05s, 1h02m."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def unit_line(unit: str, seconds: float | None, done: int, total: int | None, elapsed: float,
              left: float | None = None) -> str:
    """One finished unit as a log line: ``[elapsed] unit: its seconds · done/total · about T left``.
    ``left`` defaults to the mean time per unit so far times the units left (none while nothing is done)."""
    parts = [f"[{clock(elapsed):>8}] {unit}" + (f": {seconds:.1f} s" if seconds is not None else "")]
    if total:
        parts.append(f"{min(done, total)}/{total}")
        if left is None and done:
            left = elapsed / done * max(0, total - done)
        if left is not None:
            parts.append(f"about {clock(left)} left")
    return " · ".join(parts)


class Lines:
    """A line per finished unit on a stream (stderr by default), written and flushed whether or not the stream
    is a terminal, so a run scripted to a log file reports as it goes. ``done(unit)`` times the unit from the
    last one (or the start); ``clock`` is injectable for tests."""

    def __init__(self, total: int | None = None, stream: Any = None, clock: Any = None) -> None:
        import time

        self.total, self.n = total, 0
        self._stream = stream
        self._clock = clock or time.monotonic
        self.start = self.last = self._clock()

    def done(self, unit: str, n: int = 1, seconds: float | None = None) -> str:
        now = self._clock()
        own = now - self.last if seconds is None else seconds
        self.n += n
        self.last = now
        line = unit_line(unit, own, self.n, self.total, now - self.start)
        stream = self._stream if self._stream is not None else sys.stderr
        try:
            print(line, file=stream, flush=True)
        except (OSError, ValueError):  # a closed or full stream: progress is never worth a failure
            pass
        return line


class Heartbeat:
    """Calls ``beat()`` every ``every_s`` seconds on a daemon thread while the ``with`` block runs, so a reporter
    can say the work goes on during one long unit that sends no event of its own (a bench cell's evaluation runs
    minutes). A failing ``beat`` is ignored: progress is never worth a failure."""

    def __init__(self, beat: Any, every_s: float = 5.0) -> None:
        import threading

        self.beat, self.every_s = beat, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every_s + 1.0)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - a reporter's failure must not reach the work
                pass
