"""Files damaged on purpose, one way each: the hardening tests and scripts/bad_inputs.py (which asks the CLI the
same questions end to end) share these."""

from __future__ import annotations

import json
from pathlib import Path


def symlink(f: Path) -> None:
    """``f`` becomes a symlink to its own content, moved to ``f.real``."""
    target = f.with_name(f.name + ".real")
    f.rename(target)
    f.symlink_to(target)


def nan_tensor(f: Path, key: str | None = None) -> None:
    """One NaN in the safetensors file ``f``: in tensor ``key`` (default: its first floating one)."""
    from safetensors.torch import load_file, save_file

    t = load_file(str(f))
    key = key or next(k for k, v in t.items() if v.is_floating_point())
    t[key] = t[key].clone()
    t[key].view(-1)[0] = float("nan")
    save_file(t, str(f))


def edit_json(f: Path, change) -> None:
    """The JSON file ``f`` rewritten by ``change(data)`` (which edits in place or returns the new data)."""
    data = json.loads(f.read_text())
    data = change(data) or data
    f.write_text(json.dumps(data))
