"""Progress bars for the notebook API's long calls (patching, circuit discovery, jobs).

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
