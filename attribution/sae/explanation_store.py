"""The stored explanations of a dictionary's features: ``explanations.json.gz`` beside ``dashboards.safetensors``
(a separate file: dashboards built before explanations existed open unchanged). Written by
attribution.sae.explanations, read back with the dashboards (attribution.sae.dashboard)."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from core.errors import ModelFileError

FILE = "explanations.json.gz"
VERSION = 1


def save_explanations(directory: str | Path, data: dict[str, Any]) -> Path:
    """Write ``directory/explanations.json.gz`` atomically (temporary file, then rename)."""
    directory = Path(directory)
    fd, tmp = tempfile.mkstemp(prefix=".explanations-", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        with gzip.open(tmp, "wt", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"), allow_nan=False)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; it is shipped beside the dashboards
        os.replace(tmp, directory / FILE)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return directory / FILE


def load_explanations(directory: str | Path, n_units: int | None = None) -> dict[str, Any] | None:
    """The stored explanations beside a dictionary's dashboards; None when there are none. ModelFileError
    when the file is damaged, of another version, or covers another number of units."""
    path = Path(directory) / FILE
    if not path.exists():
        return None
    if path.is_symlink() or not path.is_file():
        raise ModelFileError(f"explanations {path} is a symlink or not a file; refusing to read it")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise ModelFileError(f"cannot read explanations {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("features"), list):
        raise ModelFileError(f"explanations {path} are damaged or of another version; rebuild them with "
                             f"`workbench sae explain --sae {Path(directory)}`")
    feats = data["features"]
    if n_units is not None and len(feats) != n_units:
        raise ModelFileError(f"explanations {path} cover {len(feats)} units, not {n_units}; rebuild them")
    for e in feats:
        s = e.get("score") if isinstance(e, dict) else None
        if (not isinstance(e, dict) or not isinstance(e.get("text"), str) or not isinstance(e.get("short"), str)
                or not (s is None or (isinstance(s, int | float) and math.isfinite(s) and -1 <= s <= 1))):
            raise ModelFileError(f"explanations {path} are damaged: an entry is not text, short and a score")
    return data


def read_explanations(directory: str | Path, n_units: int, weights: str | None = None) -> list[dict[str, Any]] | None:
    """The features' explanations, or None (no file, a damaged one, or one built for other weights than the
    dashboards' ``weights`` sha256: warned about, never fatal: the dashboards stay usable without them)."""
    try:
        data = load_explanations(directory, n_units)
    except ModelFileError as exc:
        warnings.warn(str(exc), stacklevel=2)
        return None
    if data and weights and data.get("weights_sha256") and data["weights_sha256"] != weights:
        warnings.warn(f"the explanations in {directory} were built for other weights than its dashboards; rebuild "
                      f"them with `workbench sae explain --sae {directory}`", stacklevel=2)
        return None
    return data["features"] if data else None
