"""The run store: one directory per run, written atomically, indexed in SQLite (WAL).

A run directory holds ``meta.json`` (model, method, arguments, versions, git commit, timings),
``tensors.safetensors`` and tables as CSV. Runs are built in ``<root>/.tmp-*`` and renamed
into place, so a killed writer never leaves a half run visible; the index is updated after the
rename and is rebuilt from the directories when it disagrees with them (or is corrupt).

One bad entry never breaks the store: a run directory whose ``meta.json`` is unreadable or
malformed, or that is (or holds) a symlink, is reported by ``damaged()``, skipped by ``list()``,
refused by ``get()`` and can still be removed. Leftover ``.tmp-*`` (killed writers) and
``.rm-*`` (interrupted removals) directories are swept on ``list()``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import RunStoreError
from workbench.text import one_line

META = "meta.json"
TENSORS = "tensors.safetensors"
INDEX = "index.sqlite"
# A run id as save() makes it: 20250101-120000-KIND-abc123.
RUN_ID = re.compile(r"^\d{8}-\d{6}-.+-[0-9a-f]{6}$")
# A .tmp-* directory whose writer cannot be checked is left alone this long (a save takes seconds).
STALE_TMP_SECONDS = 3600
# A run kind's old spelling -> the one written now: runs saved under the old one still list and open.
KIND_ALIASES = {"vit-eval": "vit_eval"}
# meta.json fields the index stores: each a string or absent/null.
TEXT_FIELDS = ("created", "kind", "model", "method")


def same_kind(a: str | None, b: str | None) -> bool:
    """Whether two run kinds are the same kind (one may be an old spelling of the other)."""
    return a is not None and b is not None and KIND_ALIASES.get(a, a) == KIND_ALIASES.get(b, b)


def default_root() -> Path:
    return Path(os.environ.get("WORKBENCH_RUNS", Path.home() / ".workbench" / "runs"))


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
            text=True, timeout=5,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _versions() -> dict[str, str]:
    from importlib import metadata

    names = ["torch", "transformers", "transformer-lens", "nnsight", "sae-lens", "scikit-learn"]
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


@dataclass
class Run:
    """A stored run as read back from disk."""

    id: str
    path: Path
    meta: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.meta.get("kind", "")

    def _file(self, name: str) -> Path | None:
        """The run's file ``name`` (None when absent); a symlink is refused, never followed."""
        file = self.path / name
        if file.is_symlink():
            raise RunStoreError(f"run {self.id}: {name} is a symlink; refusing to read it")
        return file if file.exists() else None

    def tensors(self) -> dict[str, Any]:
        """The run's tensors ({} when it has none); RunStoreError when the file is damaged (truncated,
        zeroed, garbage, a symlink) or holds NaN/Infinity (save() never writes one)."""
        file = self._file(TENSORS)
        if file is None:
            return {}
        from workbench.checks import read_tensors

        return read_tensors(file, f"run {self.id}'s {TENSORS}", RunStoreError, finite=True)

    def table(self, name: str):
        import pandas as pd

        file = self._file(f"{name}.csv")
        if file is None:
            raise RunStoreError(f"run {self.id} has no table {name!r}")
        return pd.read_csv(file)

    def tables(self) -> list[str]:
        return sorted(p.stem for p in self.path.glob("*.csv"))

    def result(self) -> dict[str, Any]:
        """The run's result.json ({} when absent); RunStoreError unless it is a strict JSON object."""
        file = self._file("result.json")
        if file is None:
            return {}
        from workbench.checks import read_json

        data = read_json(file, f"run {self.id}'s result.json", RunStoreError)
        if not isinstance(data, dict):
            raise RunStoreError(f"run {self.id}'s result.json is damaged: it holds a {type(data).__name__}, "
                                "not a JSON object")
        return data

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The JSON objects of the run's JSON-lines file ``name`` (e.g. prompts.jsonl)."""
        file = self._file(name)
        if file is None:
            raise RunStoreError(f"run {self.id} has no {name}")
        from workbench.checks import read_jsonl

        return read_jsonl(file, f"run {self.id}'s {name}", RunStoreError)

    def fields(self, key: str | None = None) -> Any:
        """meta.json (or its object field ``key``, {} when absent) as checks.Fields: typed, bounded reads."""
        from workbench.checks import Fields

        if key is None:
            return Fields(self.meta, f"run {self.id}'s meta.json", RunStoreError)
        return Fields(self.meta, f"run {self.id}'s meta.json", RunStoreError).fields(key, {})


@dataclass
class RunDraft:
    """What a caller hands the store: everything is written in one atomic step."""

    kind: str
    model: str | None = None
    method: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)  # name -> pandas DataFrame
    figures: dict[str, Any] = field(default_factory=dict)  # name -> plotly figure
    files: dict[str, str | bytes] = field(default_factory=dict)  # name -> content


def _check_finite(draft: RunDraft) -> None:
    from workbench.errors import NonFiniteError
    from workbench.options import first_non_finite

    for part in ("result", "args", "timings", "tensors"):
        found = first_non_finite(getattr(draft, part), part)
        if found:
            raise NonFiniteError(f"{draft.kind} run not saved: it holds a non-finite value ({found})")


def _corrupt(exc: sqlite3.Error) -> bool:
    """The index file is not a database or is damaged (as opposed to busy, locked or unwritable)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT) or type(exc) is sqlite3.DatabaseError


def _host() -> str:
    # No "-" in it: a temporary directory's name is split at "-" to find its writer.
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: it exists
        return True
    return True


def _abandoned(path: Path, now: float) -> bool:
    """Whether a ``.tmp-HOST-PID-xxxx`` directory was left by a writer that is gone.

    A writer on this host is gone when its pid is; one on another host (or with a name we cannot
    parse) only after STALE_TMP_SECONDS without a change, since its pid cannot be checked from here.
    A live pid older than a day is a reused pid, not a writer (a save takes seconds).
    """
    try:
        age = now - path.lstat().st_mtime
    except OSError:
        return False
    parts = path.name[len(".tmp-"):].rsplit("-", 2)
    if len(parts) == 3 and parts[0] == _host() and parts[1].isdigit() and int(parts[1]) > 0:
        return not pid_alive(int(parts[1])) or age > 24 * 3600
    return age > STALE_TMP_SECONDS


def _delete(path: Path) -> None:
    """Delete a file, a symlink (never what it points to) or a directory tree; errors are ignored."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


def check_run_dir(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(meta, None) for a sound run directory, else (None, why it is damaged).

    Sound: a real directory (no symlink anywhere in it, so reading a run never leaves the store) whose
    meta.json is a JSON object with string-or-null created/kind/model/method and an object summary.
    """
    if path.is_symlink():
        return None, "the run directory is a symlink"
    if not path.is_dir():
        return None, "not a directory"
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            if os.path.islink(os.path.join(top, name)):
                rel = os.path.relpath(os.path.join(top, name), path)
                return None, f"{rel} is a symlink"
    file = path / META
    if not file.exists():
        return None, "no meta.json"
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read meta.json: {one_line(exc)}"
    except ValueError as exc:
        return None, f"meta.json is not valid JSON: {one_line(exc)}"
    if not isinstance(meta, dict):
        return None, f"meta.json holds a {type(meta).__name__}, not a JSON object"
    for key in TEXT_FIELDS:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return None, f"meta.json field {key!r} is a {type(meta[key]).__name__}, not a string"
    if meta.get("summary") is not None and not isinstance(meta["summary"], dict):
        return None, "meta.json field 'summary' is not a JSON object"
    return meta, None


class RunStore:
    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # -- index ---------------------------------------------------------------------------
    # The index is derived data: the run directories are the truth. A corrupt index is deleted and
    # rebuilt; an index that cannot be written never fails a command whose work is done.
    def _open_index(self) -> sqlite3.Connection:
        self.root.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.root / INDEX, timeout=30)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute(
                "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created TEXT, kind TEXT,"
                " model TEXT, method TEXT, summary TEXT)"
            )
        except BaseException:
            con.close()
            raise
        return con

    def _drop_index(self) -> None:
        for name in (INDEX, f"{INDEX}-wal", f"{INDEX}-shm"):
            try:
                (self.root / name).unlink(missing_ok=True)
            except OSError:
                pass

    def _connect(self) -> sqlite3.Connection:
        """A connection to the index; a corrupt index file is replaced by an empty one."""
        try:
            return self._open_index()
        except OSError as exc:
            raise RunStoreError(f"cannot open run store at {self.root}: {one_line(exc)}") from None
        except sqlite3.Error as exc:
            if not _corrupt(exc):
                raise RunStoreError(f"cannot open run store at {self.root}: {one_line(exc)}") from None
        self._drop_index()
        try:
            return self._open_index()
        except (OSError, sqlite3.Error) as exc:
            raise RunStoreError(f"cannot open run store at {self.root}: {one_line(exc)}") from None

    def _update_index(self, change: Any) -> None:
        """Apply ``change(con)`` in one transaction, best effort: on a corrupt index, rebuild and retry
        once; any other failure is ignored (list() reconciles the index with the directories)."""
        for _attempt in range(2):
            try:
                con = self._connect()
            except RunStoreError:
                return
            try:
                with con:
                    change(con)
                return
            except sqlite3.Error as exc:
                if not _corrupt(exc):
                    return
            finally:
                con.close()
            self._drop_index()

    @staticmethod
    def _row(run_id: str, meta: dict[str, Any]) -> tuple:
        return (run_id, meta.get("created"), meta.get("kind"), meta.get("model"), meta.get("method"),
                json.dumps(meta.get("summary") or {}))

    def _index(self, con: sqlite3.Connection, run_id: str, meta: dict[str, Any]) -> None:
        con.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)", self._row(run_id, meta))

    def _reconcile(self, runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
        """Make the index hold exactly the sound runs (missing, changed, stale and damaged rows fixed)."""

        def change(con: sqlite3.Connection) -> None:
            have = {r[0]: tuple(r) for r in con.execute("SELECT * FROM runs")}
            for stale in have.keys() - runs.keys():
                con.execute("DELETE FROM runs WHERE id = ?", (stale,))
            for run_id, (_path, meta) in runs.items():
                if have.get(run_id) != self._row(run_id, meta):
                    self._index(con, run_id, meta)

        self._update_index(change)

    # -- write ---------------------------------------------------------------------------
    def save(self, draft: RunDraft) -> Run:
        """Write a run atomically and index it; returns the stored run. A NaN or Infinity in the
        result, args, timings or tensors is refused (NonFiniteError) and nothing is written."""
        _check_finite(draft)
        now = _dt.datetime.now(_dt.UTC)
        run_id = f"{now:%Y%m%d-%H%M%S}-{draft.kind}-{uuid.uuid4().hex[:6]}"
        meta = {
            "id": run_id,
            "created": now.isoformat(timespec="milliseconds"),  # orders runs saved within one second
            "kind": draft.kind,
            "model": draft.model,
            "method": draft.method,
            "args": draft.args,
            "timings": draft.timings,
            "versions": _versions(),
            "git_commit": _git_commit(),
            "summary": {k: v for k, v in draft.result.items() if isinstance(v, (int, float, str))},
        }
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # Host and pid in the name: a later list() can tell a killed writer's leftover from a live one.
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{_host()}-{os.getpid()}-", dir=self.root))
        except OSError as exc:
            raise RunStoreError(f"cannot write to run store {self.root}: {exc}") from None
        try:
            if draft.tensors:
                from safetensors.torch import save_file

                save_file({k: v.detach().contiguous().cpu() for k, v in draft.tensors.items()},
                          str(tmp / TENSORS))
            for name, frame in draft.tables.items():
                frame.to_csv(tmp / f"{name}.csv", index=False)
            for name, fig in draft.figures.items():
                (tmp / f"{name}.plotly.json").write_text(fig.to_json())
            for name, content in draft.files.items():
                mode = "wb" if isinstance(content, bytes) else "w"
                with open(tmp / name, mode) as fh:
                    fh.write(content)
            if draft.result:
                (tmp / "result.json").write_text(json.dumps(draft.result, default=str, allow_nan=False))
            (tmp / META).write_text(json.dumps(meta, indent=2, default=str))
            final = self.root / run_id
            if final.exists():  # never overwrite silently
                raise RunStoreError(f"run {run_id} already exists")
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # The run is stored: indexing it is best effort from here on.
        self._update_index(lambda con: self._index(con, run_id, meta))
        return Run(run_id, final, meta)

    # -- read ----------------------------------------------------------------------------
    def _sweep(self) -> None:
        """Delete leftovers: every ``.rm-*`` (a removal already committed) and abandoned ``.tmp-*``."""
        now = time.time()
        try:
            entries = [Path(e.path) for e in os.scandir(self.root)]
        except OSError:
            return
        for path in entries:
            if path.name.startswith(".rm-") or (path.name.startswith(".tmp-") and _abandoned(path, now)):
                _delete(path)

    def _scan(self) -> tuple[dict[str, tuple[Path, dict[str, Any]]], list[dict[str, str]]]:
        """(sound runs by id, damaged entries) from the directories; leftovers are swept first."""
        runs: dict[str, tuple[Path, dict[str, Any]]] = {}
        damaged: list[dict[str, str]] = []
        if not self.root.is_dir():
            return runs, damaged
        self._sweep()
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except OSError as exc:
            raise RunStoreError(f"cannot read run store {self.root}: {one_line(exc)}") from None
        for entry in entries:
            name, path = entry.name, Path(entry.path)
            if name.startswith(".") or name.startswith(INDEX):
                continue
            if not entry.is_symlink() and not entry.is_dir(follow_symlinks=False):
                continue  # a plain file is not a run
            meta, why = check_run_dir(path)
            if meta is not None:
                runs[name] = (path, meta)
            elif why != "no meta.json" or RUN_ID.match(name):
                # A directory without meta.json and not named like a run is someone else's: left alone.
                damaged.append({"id": name, "reason": why or "damaged", "path": str(path)})
        return runs, damaged

    def list(self, kind: str | None = None, model: str | None = None) -> list[dict[str, Any]]:
        """Sound runs, newest first (damaged ones are in ``damaged()``); the index is reconciled. ``kind``
        matches either spelling of a renamed kind (KIND_ALIASES: ``vit-eval`` finds ``vit_eval`` runs too)."""
        runs, _damaged = self._scan()
        if runs or (self.root / INDEX).exists():
            self._reconcile(runs)
        out = [
            {"id": run_id, "created": meta.get("created"), "kind": meta.get("kind"),
             "model": meta.get("model"), "method": meta.get("method"), "summary": meta.get("summary") or {}}
            for run_id, (_path, meta) in runs.items()
            if (not kind or same_kind(meta.get("kind"), kind)) and (not model or meta.get("model") == model)
        ]
        # As the index orders them: created descending (runs without a date last), then id descending.
        out.sort(key=lambda r: (r["created"] is not None, r["created"] or "", r["id"]), reverse=True)
        return out

    def damaged(self) -> list[dict[str, str]]:
        """Entries that look like runs but cannot be read safely: [{"id", "reason", "path"}], by id."""
        return self._scan()[1]

    def _entry(self, run_id: str) -> Path:
        """The store entry named ``run_id`` (a directory or a symlink); RunStoreError when there is none."""
        bad_name = (not run_id or run_id.startswith(".") or run_id.startswith(INDEX)
                    or "/" in run_id or "\\" in run_id or "\0" in run_id)
        path = self.root / run_id
        if bad_name or not (path.is_symlink() or path.is_dir()):
            raise RunStoreError(f"no run {run_id!r} in {self.root}")
        return path

    def get(self, run_id: str) -> Run:
        """A sound run; RunStoreError for a missing or damaged one (symlinks are never followed)."""
        path = self._entry(run_id)
        meta, why = check_run_dir(path)
        if meta is None:
            if why == "no meta.json" and not RUN_ID.match(run_id):
                raise RunStoreError(f"no run {run_id!r} in {self.root}")
            raise RunStoreError(f"run {run_id} is damaged: {why} (remove it with `workbench runs rm {run_id}`)")
        return Run(run_id, path, meta)

    def remove(self, run_id: str) -> None:
        """Remove a run, sound or damaged; a symlink is removed, never what it points to."""
        path = self._entry(run_id)
        if not path.is_symlink() and not (path / META).exists() and not RUN_ID.match(run_id):
            raise RunStoreError(f"no run {run_id!r} in {self.root}")
        trash = self.root / f".rm-{run_id[:100]}-{uuid.uuid4().hex[:6]}"
        try:
            os.rename(path, trash)  # disappears atomically, then is deleted
        except OSError as exc:
            raise RunStoreError(f"cannot remove run {run_id}: {one_line(exc)}") from None
        _delete(trash)
        if trash.exists() or trash.is_symlink():
            _delete(trash)  # a second pass; whatever still stays is hidden and swept by list()
        self._update_index(lambda con: con.execute("DELETE FROM runs WHERE id = ?", (run_id,)))
