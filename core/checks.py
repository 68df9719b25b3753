"""Reading back what the workbench wrote, as if anyone may have damaged it since.

Every file the workbench reads again (runs' meta.json, result.json and tensors, job records, dictionaries'
workbench.json and weights, dashboards, tuned lenses, converted model caches) can be truncated, zeroed,
filled with garbage, hold the wrong JSON types, unknown keys, absurd sizes, NaN or Infinity, or be a symlink.
One helper per file kind lives here, and every reader of that kind goes through it:

- ``read_json(path, what, error)``: a JSON file (no symlink, bounded size, UTF-8, no NaN/Infinity);
- ``read_jsonl(path, what, error)``: a JSON-lines file of objects;
- ``read_tensors(path, what, error)``: a safetensors file (no symlink, a sound header, optionally finite);
- ``disk_full(exc)`` / ``disk_full_error(exc, path, what)``: a write that failed for want of space (ENOSPC, EDQUOT,
  from Python or from safetensors) as one line, "no space left on device at PATH";
- ``Fields(data, what, error)``: typed, bounded access to a JSON object's fields (``text``, ``integer``,
  ``number``, ``flag``, ``mapping``, ``items``, ``only``), so no number from a file reaches an allocation
  without a bound checked first.

Each raises the caller's typed error (a WorkbenchError subclass: RunStoreError for runs, ModelFileError for
dictionaries, lenses and caches, JobError for job records) with one line naming the file and the problem.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import DiskFullError, WorkbenchError
from core.text import one_line

if TYPE_CHECKING:
    import torch

MAX_JSON_BYTES = 256 * 2**20  # a run's result.json of 10,000 prompts is a few MB
MAX_TENSOR_BYTES = 64 * 2**30
# No workbench file nests deeper than a few levels: deeper is damage, and would overflow the stack of whatever
# walks it next (json.dumps, the index, a page) even where json.loads itself managed.
MAX_JSON_DEPTH = 100
_MISSING = object()


def _plain_file(path: Path, what: str, error: type[WorkbenchError]) -> None:
    if path.is_symlink():
        raise error(f"{what} is a symlink; refusing to read it")
    if not path.exists():
        raise error(f"{what} is missing")
    if not path.is_file():
        raise error(f"{what} is not a regular file")


def _no_constant(name: str) -> Any:
    raise ValueError("it holds a non-finite number, which strict JSON does not allow")


def _read_text(path: Path, what: str, error: type[WorkbenchError], max_bytes: int) -> str:
    """A plain file's UTF-8 text, refused (``error``, one line) when a symlink, too large or unreadable."""
    _plain_file(path, what, error)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{what} is {size:,} bytes, more than the {max_bytes:,} a workbench file can be")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} is damaged: not UTF-8 text") from None
    except OSError as exc:
        raise error(f"cannot read {what}: {one_line(exc)}") from None


def read_json(path: str | Path, what: str, error: type[WorkbenchError], max_bytes: int = MAX_JSON_BYTES,
              strict: bool = True) -> Any:
    """The JSON value in ``path``; ``error`` (one line) when it is a symlink, too large, not UTF-8, not JSON,
    nested too deeply, or (``strict``) holds NaN/Infinity."""
    path = Path(path)
    text = _read_text(path, what, error, max_bytes)
    return parse_json(text, what, error, strict)


def parse_json(text: str, what: str, error: type[WorkbenchError], strict: bool = True) -> Any:
    """``json.loads`` refusing (``strict``) NaN/Infinity; ``error`` on anything that is not JSON, or is nested
    more than MAX_JSON_DEPTH levels."""
    try:
        return loads_bounded(text, parse_constant=_no_constant if strict else None)
    except JSONTooDeep:
        raise error(f"{what} is damaged: nested more than {MAX_JSON_DEPTH} levels deep, which no workbench file is"
                    ) from None
    except ValueError as exc:
        raise error(f"{what} is damaged: not valid JSON ({one_line(exc)})") from None


class JSONTooDeep(ValueError):
    """JSON that nests lists/objects more than MAX_JSON_DEPTH levels (a ValueError, so "not JSON" catches it)."""


def loads_bounded(text: str, parse_constant: Any = None) -> Any:
    """``json.loads`` bounded in depth: JSONTooDeep when lists/objects nest more than MAX_JSON_DEPTH levels
    (json.loads' own RecursionError included), any other ValueError passed on. The one depth check: every
    reader of JSON from a file (workbench files here, the user's prompt and dataset files) goes through it."""
    try:
        value = json.loads(text, parse_constant=parse_constant)
    except RecursionError:
        raise JSONTooDeep(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    if _too_deep(value, MAX_JSON_DEPTH):
        raise JSONTooDeep(f"nested more than {MAX_JSON_DEPTH} levels deep")
    return value


def _too_deep(value: Any, limit: int) -> bool:
    """Whether lists/objects nest more than ``limit`` levels in ``value`` (walked without recursion)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for want of space: an OSError with ENOSPC or EDQUOT, or the same
    reported by a native writer (safetensors says "No space left on device (os error 28)")."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FULL_ERRNOS
    text = str(exc)
    return type(exc).__name__ == "SafetensorError" and (
        "No space left on device" in text or "Disk quota exceeded" in text
        or any(f"os error {n})" in text for n in DISK_FULL_ERRNOS))


def disk_full_error(path: str | Path, what: str) -> WorkbenchError:
    """The one line for a write that ran out of space (a DiskFullError)."""
    return DiskFullError(f"no space left on device at {path}: {what}")


@contextlib.contextmanager
def output_folder(path: str | Path, what: str) -> Iterator[None]:
    """The block writes into the folder ``path`` (a checkpoint, a dictionary). If it fails, what it added is
    removed, so nothing partial is kept: the folder itself when it did not exist before (and the parents made
    for it, while empty), else the entries that were not there before (never what the user had there). Out of
    space, the error is DiskFullError, one line: "no space left on device at PATH: WHAT"; any other error
    passes through unchanged."""
    import os
    import shutil

    path = Path(path)
    existed = path.is_dir() and not path.is_symlink()
    made = []  # the parents the block may make, innermost first: removed after a failure while empty
    parent = path.absolute().parent
    while not parent.exists() and parent.parent != parent:
        made.append(parent)
        parent = parent.parent
    try:
        before = set(os.listdir(path)) if existed else set()
    except OSError:
        before = None  # unreadable: nothing there is removed
    try:
        yield
    except BaseException as exc:
        with contextlib.suppress(OSError):
            if not existed:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                for folder in made:
                    folder.rmdir()  # OSError (not empty: someone else's since) ends the walk
            elif existed and before is not None:
                for name in set(os.listdir(path)) - before:
                    item = path / name
                    if item.is_dir() and not item.is_symlink():
                        shutil.rmtree(item, ignore_errors=True)
                    else:
                        item.unlink(missing_ok=True)
        if disk_full(exc):
            raise disk_full_error(path, what) from None
        raise


def read_jsonl(path: str | Path, what: str, error: type[WorkbenchError], max_bytes: int = MAX_JSON_BYTES
               ) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one a line (blank lines skipped)."""
    path = Path(path)
    text = _read_text(path, what, error, max_bytes)
    rows = []
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{what} line {i}", error)
        if not isinstance(row, dict):
            raise error(f"{what} line {i} is damaged: it holds a {type(row).__name__}, not a JSON object")
        rows.append(row)
    return rows


def read_tensors(path: str | Path, what: str, error: type[WorkbenchError], finite: bool = False,
                 max_bytes: int = MAX_TENSOR_BYTES) -> dict[str, torch.Tensor]:  # mixed shapes
    """Every tensor of a safetensors file (never a pickle); ``error`` when it is a symlink, truncated, zeroed,
    garbage, or (``finite``) holds a NaN or Infinity in a floating tensor."""
    path = Path(path)
    _plain_file(path, what, error)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise error(f"cannot read {what}: {one_line(exc)}") from None
    if size > max_bytes:
        raise error(f"{what} is {size:,} bytes, more than the {max_bytes:,} this reader accepts")
    if size < 8:
        raise error(f"{what} is damaged: {size} bytes, too short for a safetensors header")
    try:
        from safetensors.torch import load_file

        tensors = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - SafetensorError (truncated, zeroed, garbage) and its kin
        raise error(f"{what} is damaged: {one_line(exc)}") from None
    if finite:
        for name, t in tensors.items():
            if not t_finite(t):
                raise error(f"{what} is damaged: it holds a non-finite value (NaN or Infinity) in {name!r}")
    return tensors


def t_finite(t: Any) -> bool:
    """Whether a tensor holds no NaN or Infinity (integer tensors always do)."""
    import torch

    if not t.is_floating_point() and not t.is_complex():
        return True
    return bool(torch.isfinite(t).all())


class Fields:
    """Typed, bounded fields of one JSON object read from a file: ``Fields(data, "run X meta.json args",
    RunStoreError)``. A missing required field, a wrong type, a value out of its bounds or (``only``) an
    unknown key raises ``error`` naming the field."""

    def __init__(self, data: Any, what: str, error: type[WorkbenchError]) -> None:
        if not isinstance(data, dict):
            raise error(f"{what} is damaged: it holds a {type(data).__name__}, not a JSON object")
        self.data, self.what, self.error = data, what, error

    def _get(self, key: str, default: Any) -> Any:
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is _MISSING:
            raise self.error(f"{self.what} is damaged: no field {key!r}")
        return default

    def _bad(self, key: str, value: Any, want: str) -> WorkbenchError:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return self.error(f"{self.what} is damaged: field {key!r} is {shown}, not {want}")

    def only(self, keys: Iterable[str]) -> Fields:
        """Refuse any key outside ``keys``."""
        unknown = sorted(set(self.data) - set(keys))
        if unknown:
            raise self.error(f"{self.what} is damaged: unknown field(s) {', '.join(map(repr, unknown[:5]))}")
        return self

    def text(self, key: str, default: Any = _MISSING, choices: Iterable[str] | None = None) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise self._bad(key, value, "a string")
        if choices is not None and value not in tuple(choices):
            raise self._bad(key, value, "one of " + ", ".join(choices))
        return value

    def integer(self, key: str, default: Any = _MISSING, lo: int | None = None, hi: int | None = None) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, value, "a whole number")
        return self.bounded(key, value, lo, hi)

    def number(self, key: str, default: Any = _MISSING, lo: float | None = None, hi: float | None = None) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self._bad(key, value, "a finite number")
        return self.bounded(key, float(value), lo, hi)

    def bounded(self, key: str, value: Any, lo: float | None, hi: float | None) -> Any:
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = f"{lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}"
            raise self._bad(key, value, f"within {span}")
        return value

    def flag(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, bool):
            raise self._bad(key, value, "true or false")
        return value

    def mapping(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, dict):
            raise self._bad(key, value, "a JSON object")
        return value

    def fields(self, key: str, default: Any = _MISSING) -> Fields:
        """The field ``key`` (a JSON object) as Fields of its own."""
        return Fields(self.mapping(key, default), f"{self.what} {key!r}", self.error)

    def items(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING, max_len: int = 10**7,
              finite: bool = True) -> Any:
        """A list whose every item is of ``kind`` (numbers finite; bool is never a number)."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list) or len(value) > max_len:
            raise self._bad(key, value, f"a list (of at most {max_len:,} items)")
        numeric = kind in (int, float) or (isinstance(kind, tuple) and set(kind) <= {int, float})
        for item in value:
            if numeric and (isinstance(item, bool) or not isinstance(item, int | float)
                            or (finite and not math.isfinite(item))):
                raise self._bad(key, item, "a list of finite numbers")
            if not numeric and not isinstance(item, kind):
                raise self._bad(key, item, f"a list of {getattr(kind, '__name__', kind)}")
        return value


@contextlib.contextmanager
def reading(what: str, error: type[WorkbenchError]) -> Iterator[None]:
    """Rebuilding an object from what a file holds: a KeyError, TypeError, ValueError, AttributeError or
    IndexError inside (a field missing or of another type than the writer wrote) becomes ``error`` ("WHAT is
    damaged: ..."); typed errors pass through unchanged."""
    try:
        yield
    except WorkbenchError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        detail = f"no field {exc}" if isinstance(exc, KeyError) else one_line(exc)
        raise error(f"{what} is damaged: {detail}") from None
