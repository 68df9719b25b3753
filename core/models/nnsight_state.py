"""What a TransformerLens-style hook keeps survives a remote trace.

A hook such as ``def keep(x, hook): cache[hook.name] = x`` works by its side effect on a dict it closes over. Run
locally, the trace's body and the caller share that dict. Sent to NDIF, the hook travels by value and fills the
server's copy, and a server returns only the names the trace's body binds and saves (ndif 0.1.2:
results/models/ndif_local.md), so the caller's dict stays empty. ``hook_state`` lists the dicts and lists the hooks
close over (through nested functions and partials); the trace saves that list, and ``restore_state`` writes what
came back into the caller's own containers, so the hooks' side effects read the same on either transport."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any


def hook_state(fns: Iterable[Callable | None], depth: int = 3) -> list[Any]:
    """The dicts and lists ``fns`` close over, each once, in a fixed order."""
    found: dict[int, Any] = {}

    def visit(obj: Any, left: int) -> None:
        if isinstance(obj, dict | list):
            values = obj.values() if isinstance(obj, dict) else obj
            if not any(callable(v) for v in values):  # data, not a table of functions (not sent back by value)
                found.setdefault(id(obj), obj)
        elif left <= 0:
            return
        elif isinstance(obj, functools.partial):
            for part in (obj.func, *obj.args, *obj.keywords.values()):
                visit(part, left - 1)
        elif callable(obj) and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                try:
                    visit(cell.cell_contents, left - 1)
                except ValueError:  # an empty cell (a name bound after the function was made)
                    continue

    for fn in fns:
        if fn is not None:
            visit(fn, depth)
    return list(found.values())


def restore_state(mine: list[Any], returned: list[Any]) -> None:
    """Write the containers a trace returned into the caller's own (no-op where they are the same objects, as in
    a local trace)."""
    for here, there in zip(mine, returned, strict=True):
        if here is there:
            continue
        if isinstance(here, dict):
            here.clear()
            here.update(there)
        else:
            here[:] = there
