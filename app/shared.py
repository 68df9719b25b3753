"""Results shared by every session of one server: a new session (a new tab, a link) on the default prompt
draws at once from what another session computed, instead of running the engines again.

``shared(key, make)`` returns ``make()``'s value for ``key`` (a tuple naming the model, the inputs and the
engine), computing it once per server; the oldest entries go first beyond ``SIZE``. Values must not be
changed by the page that reads them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import streamlit as st

SIZE = 48  # entries kept per server (a neuron-level result of a long prompt is tens of MB)


@st.cache_resource(show_spinner=False)
def _store() -> dict[str, Any]:
    return {"lock": threading.Lock(), "items": OrderedDict()}


def peek(key: tuple) -> Any | None:
    """The value held for ``key``, or None."""
    held = _store()
    with held["lock"]:
        value = held["items"].get(key)
        if value is not None:
            held["items"].move_to_end(key)
        return value


def put(key: tuple, value: Any) -> None:
    held = _store()
    with held["lock"]:
        held["items"][key] = value
        while len(held["items"]) > SIZE:
            held["items"].popitem(last=False)


def shared(key: tuple, make: Callable[[], Any]) -> Any:
    """``make()`` for ``key``, once per server; a ``None`` from ``make`` (a failure shown in the page) is not
    kept, so the next run tries again."""
    value = peek(key)
    if value is None:
        value = make()  # outside the store's lock: engines take the model's own lock
        if value is not None:
            put(key, value)
    return value
