"""How the workbench words things for people: an exception as one line, a duration in the unit a person reads."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none), at most 200 characters:
    what every one-line error of the CLI, the app and the job log quotes from a cause."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def duration(seconds: float) -> str:
    """'45 s', '12 min' or '3.8 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
