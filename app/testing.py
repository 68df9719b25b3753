"""Helpers for the app's tests (AppTest) and the load script: open a page with preset state, list problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAIN = Path(__file__).resolve().parent / "main.py"


def open_page(page: str, state: dict[str, Any] | None = None, timeout: float = 120):
    """An AppTest on ``pages/<page>.py`` with session state preset, after its first run.

    The navigation's default page is never rendered first, so no test pays for loading the big model
    unless it asks to.
    """
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(MAIN), default_timeout=timeout)
    for key, value in (state or {}).items():
        at.session_state[key] = value
    at.switch_page(f"pages/{page}.py")
    return at.run()


def problems(at: Any) -> list[str]:
    """Every exception and error element the run produced (empty when the page is healthy)."""
    return [f"exception: {e.value}" for e in at.exception] + [f"error: {e.value}" for e in at.error]


def texts(at: Any, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(at, kind)]


def frame_with(at: Any, column: str):
    """The first dataframe element that has ``column``."""
    for d in at.dataframe:
        if column in d.value.columns:
            return d.value
    raise AssertionError(f"no dataframe with column {column!r}")


def chart(at: Any, key: str) -> dict[str, Any]:
    """The plotly spec (a dict) of the chart drawn with ``key``."""
    import json

    for c in at.get("plotly_chart"):
        if getattr(c, "key", None) == key or (c.proto.id or "").endswith(f"-{key}"):
            return json.loads(c.proto.spec)
    raise AssertionError(f"no chart with key {key!r}")


def array(value: Any):
    """A plotly array from a spec: a plain list, or the typed {"dtype", "bdata", "shape"} form of plotly 6."""
    import base64

    import numpy as np

    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = [int(s) for s in str(value.get("shape", len(arr))).split(",")]
        return arr.reshape(shape)
    return np.asarray(value)
