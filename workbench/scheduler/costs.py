"""Measured costs of finished jobs, so the next job of the same shape gets an estimate before it starts.

After a job ends well, the driver records its seconds per item (one worker's worth: wall time x shards that
ran at once / items) under the kind's ``cost_key(spec)`` (what the per-item cost depends on: model, method,
level, prompt length...) in ``<jobs>/costs.json``. An estimate is items x that cost / the shards that will
run at once. The file is rewritten whole (temporary file, then rename); a damaged one (unreadable, too large,
nested too deeply, a symlink) is ignored.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from core.errors import WorkbenchError

FILE = "costs.json"
KEEP = 0.5  # weight of the newest measurement against what was recorded before
MAX_BYTES = 4 * 2**20  # one number per shape of job: a few kB


def _read(root: Path) -> dict[str, float]:
    from core.checks import read_json

    if not (root / FILE).exists():
        return {}
    try:
        data = read_json(root / FILE, f"the job costs file {root / FILE}", WorkbenchError, max_bytes=MAX_BYTES,
                         strict=False)  # a NaN entry is dropped below, the others kept
    except WorkbenchError:
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
    from core.store import write_atomic

    table = _read(root)
    table[key] = KEEP * cost + (1 - KEEP) * table[key] if key in table else cost
    try:  # a full disk leaves no temporary behind (write_atomic) and the old table in place
        write_atomic(root / FILE, json.dumps(table, indent=0, sort_keys=True), "the job costs file", WorkbenchError)
    except WorkbenchError:
        pass


