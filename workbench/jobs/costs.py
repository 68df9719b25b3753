"""Measured costs of finished jobs, so the next job of the same shape gets an estimate before it starts.

After a job ends well, the driver records its seconds per item (one worker's worth: wall time x shards that
ran at once / items) under the kind's ``cost_key(spec)`` (what the per-item cost depends on: model, method,
level, prompt length...) in ``<jobs>/costs.json``. An estimate is items x that cost / the shards that will
run at once. The file is rewritten whole (temporary file, then rename); a damaged one is ignored.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

FILE = "costs.json"
KEEP = 0.5  # weight of the newest measurement against what was recorded before


def _read(root: Path) -> dict[str, float]:
    try:
        data = json.loads((root / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    # a damaged entry (a string, a bool, NaN, Infinity, <= 0) is dropped, never used for an estimate
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0} if isinstance(data, dict) else {}


def key_of(kind: Any, spec: dict[str, Any]) -> str | None:
    fn = getattr(kind, "cost_key", None)
    return None if fn is None else f"{spec['kind']}|{fn(spec)}"


def per_item(root: Path, kind: Any, spec: dict[str, Any]) -> float | None:
    key = key_of(kind, spec)
    return None if key is None else _read(root).get(key)


def record(root: Path, kind: Any, spec: dict[str, Any], seconds: float, items: int, parallel: int) -> None:
    """Fold one finished job's measured cost into the table (never fails the job)."""
    key = key_of(kind, spec)
    if key is None or items <= 0 or seconds <= 0:
        return
    cost = seconds * max(1, parallel) / items
    try:
        table = _read(root)
        table[key] = KEEP * cost + (1 - KEEP) * table[key] if key in table else cost
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".costs-", suffix=".tmp", dir=root)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(table, fh, indent=0, sort_keys=True)
        os.replace(tmp, root / FILE)
    except OSError:
        pass


