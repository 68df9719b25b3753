"""Copy as code and shareable links: the one helper every result view calls.

``share(key, model, calls, params)`` writes the view's arguments into the page URL (``st.query_params``),
so the address bar always reproduces the view, and shows, in a collapsed expander, the notebook code
that computes the same result (``import workbench as wb; m = wb.load(...); r = wb.attribute(...)``) and
the link itself. Pages read the arguments back with ``common.seed_from_query``.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

import streamlit as st


@dataclass(frozen=True)
class Name:
    """A Python name in generated code (``m``), printed bare instead of as a string."""

    text: str

    def __repr__(self) -> str:
        return self.text


M = Name("m")  # the loaded model in every snippet


def call(fn: str, *args: Any, **kwargs: Any) -> str:
    """``fn(arg, ..., key=value)`` in Python syntax; keyword arguments that are None are left out."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items() if v is not None]
    return f"{fn}({', '.join(parts)})"


def code(model: str | None, lines: list[str], imports: tuple[str, ...] = ()) -> str:
    """A notebook cell: ``import workbench as wb``, ``m = wb.load(model)`` (when a model is used), then
    ``lines``."""
    head = ["import workbench as wb", *imports]
    if model is not None:
        head.append(f"m = wb.load({model!r})")
    return "\n".join(head + lines)


def link_params(params: dict[str, Any]) -> str:
    """Write ``params`` (None values dropped, lists comma-joined) into the page URL; returns the query."""
    clean: dict[str, str] = {}
    for k, v in params.items():
        if v is None or v == "" or v == []:
            continue
        clean[k] = ",".join(map(str, v)) if isinstance(v, list | tuple) else str(v)
    try:
        for k in [k for k in st.query_params if k in params and k not in clean]:
            del st.query_params[k]
        changed = {k: v for k, v in clean.items() if st.query_params.get(k) != v}
        if changed:
            st.query_params.update(changed)
    except Exception:  # noqa: BLE001 - a URL that cannot be written must not break the view
        pass
    return urllib.parse.urlencode(clean, quote_via=urllib.parse.quote)


def page_url(query: str) -> str:
    """The current page's address with ``query`` (the server's own host when Streamlit knows it)."""
    base = ""
    try:
        base = (st.context.url or "").split("?")[0]
    except Exception:  # noqa: BLE001 - AppTest has no browser URL
        base = ""
    return f"{base}?{query}" if query else base


def share(key: str, model: str | None, lines: list[str], params: dict[str, Any],
          imports: tuple[str, ...] = (), label: str = "Copy as code · share this view") -> str:
    """The view's notebook code and link (collapsed); returns the code (tests read it)."""
    snippet = code(model, lines, imports)
    query = link_params({"model": model, **params})
    with st.expander(label, expanded=False):
        st.caption("Notebook code that reproduces this result:")
        st.code(snippet, language="python")
        st.caption("A link that opens this view with the same arguments:")
        st.code(page_url(query), language="text")
    st.session_state[f"_share_{key}"] = snippet
    return snippet
