"""Contexts as text and HTML: every token HTML-escaped (never Markdown), whitespace made visible so a
context stays on one line, each token shaded by the unit's activation on it."""

from __future__ import annotations

import html
from typing import Any

SYMBOLS = {"\n": "↵", "\r": "␍", "\t": "⇥"}


def visible(token: str) -> str:
    """A token with newlines, carriage returns and tabs as symbols; a token of spaces only as dots."""
    out = "".join(SYMBOLS.get(ch, ch) for ch in token)
    if out and not out.strip(" "):
        out = "·" * len(out)
    return out


def context_text(ctx: dict[str, Any]) -> str:
    """One line of plain text, the activating token in [[ ]]."""
    parts = [visible(t) for t in ctx["tokens"]]
    c = ctx["center"]
    parts[c] = f"[[{parts[c]}]]"
    return "".join(parts)


def context_html(ctx: dict[str, Any], peak: float | None = None, color: str = "230,126,34") -> str:
    """One context as one line of HTML: tokens shaded by activation / ``peak`` (default: the context's
    own max), the activating token underlined, the activation in each token's tooltip."""
    acts = ctx["acts"]
    top = peak if peak and peak > 0 else max([a for a in acts if a > 0], default=1.0)
    spans = []
    for i, (tok, a) in enumerate(zip(ctx["tokens"], acts, strict=True)):
        alpha = max(0.0, min(1.0, a / top)) if top > 0 else 0.0
        style = f"background:rgba({color},{alpha:.2f});"
        if i == ctx["center"]:
            style += "border-bottom:2px solid #c0392b;font-weight:600;"
        if i == 0 and ctx.get("sink"):
            style += "color:#999;"  # position 0 (the attention sink) is never scored
        spans.append(f'<span style="{style}" title="{a:.3f}">{html.escape(visible(tok))}</span>')
    return (
        '<div style="white-space:pre;overflow-x:auto;font-family:ui-monospace,monospace;font-size:0.85em;'
        f'line-height:1.6">{"".join(spans)}</div>'
    )


def contexts_html(contexts: list[dict[str, Any]], peak: float | None = None) -> str:
    """Several contexts, one line each, with the activation in front."""
    rows = []
    for ctx in contexts:
        rows.append(
            '<div style="display:flex;gap:0.6em;align-items:baseline">'
            f'<code style="min-width:5em;text-align:right">{ctx["activation"]:.2f}</code>'
            f"{context_html(ctx, peak)}</div>"
        )
    return "".join(rows)
