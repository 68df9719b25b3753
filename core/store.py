"""The run store: one directory per run, written atomically, indexed in SQLite (WAL).

A run directory holds ``meta.json`` (model, method, arguments, versions, git commit, timings),
``tensors.safetensors`` and tables as CSV. Runs are built in ``<root>/.tmp-*`` and renamed
into place, so a killed writer never leaves a half run visible; the index is updated after the
rename and is rebuilt from the directories when it disagrees with them (or is corrupt).

One bad entry never breaks the store: a run directory whose ``meta.json`` is unreadable, malformed, too
large or nested too deeply, or that is (or holds) a symlink, is reported by ``damaged()``, skipped by
``list()``, refused by ``get()`` and can still be removed.

The store removes only what it can prove it wrote: a folder is a store once it holds the marker file
``.workbench-store`` (written when ``save()`` first writes into it; a store from before markers is
recognised by its SQLite index), and only there are leftovers swept on ``list()``: temporary directories
named exactly as ``save()`` names them (``.tmp-HOST-PID-xxxxxxxx``) whose writer is gone, and ``.rm-RUN-xxxxxx``
(interrupted removals). The root comes from ``WORKBENCH_RUNS``, which must be an absolute path (``~``
expanded); set but empty or relative, it is refused (RunStoreError), never taken as the current directory.
The index and the marker are never written through a symlink.
"""

from __future__ import annotations

import contextlib
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

from core.checks import Fields, disk_full, disk_full_error, read_json, read_jsonl, read_tensors
from core.errors import NonFiniteError, RunStoreError, WorkbenchError
from core.options import first_non_finite
from core.text import one_line

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
# The file that makes a folder a run store (or a job board): only in a folder holding it is anything swept.
MARKER = ".workbench-store"
# The names the store gives what it may later delete: save()'s temporary directories (and the temporary files of
# write_atomic: the same name + ".tmp"), and remove()'s trash.
TMP_NAME = re.compile(r"^\.tmp-([A-Za-z0-9._]+)-(\d+)-[a-z0-9_]{8}(\.tmp)?$")
TRASH_NAME = re.compile(r"^\.rm-[^./\\][^/\\]*-[0-9a-f]{6}$")
MAX_META_BYTES = 64 * 2**20  # meta.json holds a run's arguments and a flat summary: a few kB, rarely MBs
MAX_TABLE_BYTES = 2**30


def same_kind(a: str | None, b: str | None) -> bool:
    """Whether two run kinds are the same kind (one may be an old spelling of the other)."""
    return a is not None and b is not None and KIND_ALIASES.get(a, a) == KIND_ALIASES.get(b, b)


def default_root() -> Path:
    """``WORKBENCH_RUNS`` (an absolute path, ``~`` expanded), else ``~/.workbench/runs``. Set but empty or
    relative is RunStoreError: a store in whatever the current directory happens to be is never meant."""
    value = os.environ.get("WORKBENCH_RUNS")
    if value is None:
        return Path.home() / ".workbench" / "runs"
    return checked_root(value, "WORKBENCH_RUNS")


def check_settings() -> None:
    """RunStoreError (one line) when WORKBENCH_RUNS is set but empty or relative, or names a file, or
    WORKBENCH_JOBS is relative: a command says so before it works, not when it saves."""
    RunStore()._check_root()
    jobs = os.environ.get("WORKBENCH_JOBS", "")
    if jobs.strip():
        checked_root(jobs, "WORKBENCH_JOBS")


def checked_root(value: str | Path, what: str) -> Path:
    """The folder named by a setting ``what`` (WORKBENCH_RUNS, WORKBENCH_JOBS): absolute, ``~`` expanded;
    RunStoreError (one line) when it is empty or relative."""
    text = str(value)
    if not text.strip():
        raise RunStoreError(f"{what} is set but empty: unset it for the default (~/.workbench/runs), or give "
                            "an absolute path")
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise RunStoreError(f"{what}={text!r} is a relative path: give an absolute one (a relative one would "
                            "follow the current directory)")
    return path


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

        return read_tensors(file, f"run {self.id}'s {TENSORS}", RunStoreError, finite=True)

    def table(self, name: str):
        import pandas as pd

        file = self._file(f"{name}.csv")
        if file is None:
            raise RunStoreError(f"run {self.id} has no table {name!r}")
        size = file.stat().st_size
        if size > MAX_TABLE_BYTES:
            raise RunStoreError(f"run {self.id}'s table {name!r} is {size:,} bytes, more than the "
                                f"{MAX_TABLE_BYTES:,} a run's table can be")
        return pd.read_csv(file)

    def tables(self) -> list[str]:
        return sorted(p.stem for p in self.path.glob("*.csv"))

    def result(self) -> dict[str, Any]:
        """The run's result.json ({} when absent); RunStoreError unless it is a strict JSON object."""
        file = self._file("result.json")
        if file is None:
            return {}

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

        return read_jsonl(file, f"run {self.id}'s {name}", RunStoreError)

    def fields(self, key: str | None = None) -> Any:
        """meta.json (or its object field ``key``, {} when absent) as checks.Fields: typed, bounded reads."""
        if key is None:
            return Fields(self.meta, f"run {self.id}'s meta.json", RunStoreError)
        return Fields(self.meta, f"run {self.id}'s meta.json", RunStoreError).fields(key, {})


def unique_prefix(ref: str, ids: Any, what: str, where: str, error: type[Exception]) -> str:
    """The one id in ``ids`` that starts with ``ref`` (as git takes a commit's prefix); ``error`` in one line
    naming the candidates when several match, or saying none does."""
    found = sorted(i for i in ids if i.startswith(ref))
    if not found:
        raise error(f"no {what} {ref!r} in {where} (nor one whose id starts with it)")
    if len(found) > 1:
        raise error(f"{ref!r} is the start of {len(found)} {what} ids ({', '.join(found[:3])}"
                    f"{', ...' if len(found) > 3 else ''}); give more of it")
    return found[0]


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


def temp_prefix() -> str:
    """The name prefix of this process's temporary directories and files: ``.tmp-HOST-PID-`` (mkdtemp and
    mkstemp add 8 characters). A later sweep tells a killed writer's leftover by it (``_abandoned``)."""
    return f".tmp-{_host()}-{os.getpid()}-"


def _abandoned(path: Path, now: float) -> bool:
    """Whether ``path`` is a temporary left by a writer that is gone: named exactly as ``temp_prefix()`` names
    them, and, for a writer on this host, its pid gone; for one on another host (its pid cannot be checked
    from here), unchanged for STALE_TMP_SECONDS. A live pid older than a day is a reused pid, not a writer
    (a save takes seconds). Any other name is not ours: never abandoned."""
    found = TMP_NAME.match(path.name)
    if not found:
        return False
    try:
        age = now - path.lstat().st_mtime
    except OSError:
        return False
    host, pid = found.group(1), int(found.group(2))
    if host == _host() and pid > 0:
        return not pid_alive(pid) or age > 24 * 3600
    return age > STALE_TMP_SECONDS


def is_marked(folder: Path) -> bool:
    """Whether ``folder`` holds the store's marker file (a plain file: a symlink named so does not count)."""
    marker = folder / MARKER
    return not marker.is_symlink() and marker.is_file()


def mark(folder: Path, what: str = "run store") -> None:
    """Write the marker that makes ``folder`` a store (best effort: without it nothing is ever swept there).
    Created exclusively and without following a symlink."""
    try:
        fd = os.open(folder / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError:
        return  # already there, or cannot be written now
    # the close flushes, so it is inside the suppress too: out of space, the empty marker still marks the folder
    # and the caller's own write fails next, naming its path (issue 52: the close raised a bare ENOSPC)
    with contextlib.suppress(OSError), os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"workbench": what, "created": _dt.datetime.now(_dt.UTC).isoformat()}) + "\n")


def sweep(folder: Path, trash: bool = False) -> list[str]:
    """Delete the leftovers in ``folder`` that the workbench provably wrote and abandoned: temporaries named as
    ``temp_prefix()`` names them whose writer is gone, and (``trash``) ``.rm-RUN-xxxxxx`` removals already
    committed. Only in a folder holding the marker (``mark``); never anything else. Returns the names deleted."""
    if not is_marked(folder):
        return []
    now = time.time()
    try:
        entries = [Path(e.path) for e in os.scandir(folder)]
    except OSError:
        return []
    gone = []
    for path in entries:
        if _abandoned(path, now) or (trash and TRASH_NAME.match(path.name)):
            _delete(path)
            gone.append(path.name)
    return gone


def umask() -> int:
    """This process's umask, read from /proc where it says it: ``os.umask`` can only be read by setting it,
    which races with threads creating files meanwhile (the app has many)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: Path) -> None:
    """Give ``path`` (a file, or a directory and all it holds) the modes a plain create gives: mkdtemp and mkstemp
    make them private (0700, 0600), so a run store a group shares could not be read by the group. Symlinks are
    left alone (chmod would follow them)."""
    mask = umask()
    dirs, files = 0o777 & ~mask, 0o666 & ~mask
    if not path.is_dir():
        os.chmod(path, files)
        return
    os.chmod(path, dirs)
    for folder, subdirs, names in os.walk(path):
        for name, mode in [*((d, dirs) for d in subdirs), *((n, files) for n in names)]:
            entry = os.path.join(folder, name)
            if not os.path.islink(entry):
                os.chmod(entry, mode)


def write_atomic(path: Path, content: str | bytes, what: str, error: type[WorkbenchError]) -> None:
    """Write ``path`` whole: a temporary file beside it (named by ``temp_prefix()``), then renamed over it (a
    symlink at ``path`` is replaced, never written through). ``error`` (one line) when it cannot be written;
    out of space it says "no space left on device at FOLDER". No temporary is left behind either way."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(), suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp's 0600 would keep the file from the group the umask allows
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        if disk_full(exc):
            raise disk_full_error(path.parent, f"{what} not written") from None
        raise error(f"cannot write {what} at {path}: {one_line(exc)}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


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

    try:  # bounded: size (a 3 GB sparse meta.json is refused at once), depth, strict JSON
        meta = read_json(file, META, RunStoreError, max_bytes=MAX_META_BYTES)
    except RunStoreError as exc:
        return None, str(exc)
    if not isinstance(meta, dict):
        return None, f"meta.json holds a {type(meta).__name__}, not a JSON object"
    for key in TEXT_FIELDS:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return None, f"meta.json field {key!r} is a {type(meta[key]).__name__}, not a string"
    summary = meta.get("summary")
    if summary is not None and not isinstance(summary, dict):
        return None, "meta.json field 'summary' is not a JSON object"
    if summary and any(isinstance(v, dict | list) for v in summary.values()):
        return None, "meta.json field 'summary' is not flat (save() writes only numbers and strings there)"
    return meta, None


class RunStore:
    def __init__(self, root: str | Path | None = None) -> None:
        """The store at ``root`` (a relative path is taken from the current directory, as a path argument is;
        an empty one is refused), else at ``default_root()``."""
        if root is not None and not str(root).strip():
            raise RunStoreError("the run store's folder is empty: give a path")
        self.root = Path(root).expanduser().absolute() if root is not None else default_root()

    def _check_root(self) -> bool:
        """Whether the root exists (False: an empty store); RunStoreError when it is not a directory."""
        if self.root.is_dir():
            return True
        if (self.root.exists() or self.root.is_symlink()) and not self.root.is_dir():  # (not made meanwhile)
            raise RunStoreError(f"the run store {self.root} is not a directory (WORKBENCH_RUNS must name a "
                                "directory)")
        return False

    def _is_store(self) -> bool:
        """Whether the root is provably a run store: it holds the marker, or it is a store from before markers
        (it holds an SQLite index the store wrote), which is then marked."""
        if is_marked(self.root):
            return True
        index = self.root / INDEX
        legacy = False
        if not index.is_symlink() and index.is_file():
            try:
                with index.open("rb") as fh:
                    legacy = fh.read(16) == b"SQLite format 3\x00"
            except OSError:
                pass
        if legacy:
            mark(self.root)
        return legacy

    def _index_symlink(self) -> Path | None:
        """The index file (or its -wal, -shm, -journal) that is a symlink, if any: never written through."""
        for name in (INDEX, f"{INDEX}-wal", f"{INDEX}-shm", f"{INDEX}-journal"):
            if (self.root / name).is_symlink():
                return self.root / name
        return None

    # -- index ---------------------------------------------------------------------------
    # The index is derived data: the run directories are the truth. A corrupt index is deleted and
    # rebuilt; an index that cannot be written never fails a command whose work is done.
    def _open_index(self) -> sqlite3.Connection:
        self.root.mkdir(parents=True, exist_ok=True)
        link = self._index_symlink()
        if link is not None:
            raise RunStoreError(f"the run store's index {link} is a symlink; refusing to write through it")
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

        self._check_root()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            mark(self.root)  # a store from its first run on (a folder named for runs becomes one)
            # Host and pid in the name: a later list() can tell a killed writer's leftover from a live one.
            tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(), dir=self.root))
        except OSError as exc:
            if disk_full(exc):
                raise disk_full_error(self.root, f"{draft.kind} run not saved") from None
            raise RunStoreError(f"cannot write to run store {self.root}: {one_line(exc)}") from None
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
            follow_umask(tmp)  # group-readable where the umask allows, as the store's other files
            final = self.root / run_id
            if os.path.lexists(final):  # never overwrite silently (nor rename onto a symlink)
                raise RunStoreError(f"run {run_id} already exists")
            os.rename(tmp, final)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)  # nothing partial is kept
            if disk_full(exc):
                raise disk_full_error(self.root, f"{draft.kind} run not saved") from None
            if isinstance(exc, OSError):
                raise RunStoreError(f"cannot write run to {self.root}: {one_line(exc)}; nothing was saved") from None
            raise
        # The run is stored: indexing it is best effort from here on.
        self._update_index(lambda con: self._index(con, run_id, meta))
        return Run(run_id, final, meta)

    # -- read ----------------------------------------------------------------------------
    def _sweep(self) -> None:
        """Delete leftovers the store provably wrote (see ``sweep``), only when the root is a store."""
        if self._is_store():
            sweep(self.root, trash=True)

    def _scan(self) -> tuple[dict[str, tuple[Path, dict[str, Any]]], list[dict[str, str]]]:
        """(sound runs by id, damaged entries) from the directories; leftovers are swept first."""
        runs: dict[str, tuple[Path, dict[str, Any]]] = {}
        damaged: list[dict[str, str]] = []
        if not self._check_root():
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
        link = self._index_symlink()
        if link is not None:
            damaged.append({"id": link.name, "path": str(link),
                            "reason": "the index is a symlink, so it is neither read nor written (runs are listed "
                                      "from their folders); delete the link by hand and the index is rebuilt"})
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
        bad_name = (not isinstance(run_id, str) or not run_id or run_id.startswith(".")
                    or run_id.startswith(INDEX) or "/" in run_id or "\\" in run_id or "\0" in run_id)
        if bad_name:  # before the path is built: None or a number is no name (wb.runs().get(None))
            raise RunStoreError(f"no run {run_id!r} in {self.root}")
        path = self.root / run_id
        if not (path.is_symlink() or path.is_dir()):
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

    def resolve_id(self, ref: str) -> str:
        """The id of the entry named ``ref`` (sound or damaged), else of the one run whose id starts with
        ``ref``, as git takes a commit's prefix; RunStoreError naming the candidates when it is ambiguous."""
        ref = ref.strip() if isinstance(ref, str) else ref
        if not ref:
            raise RunStoreError("give a run id (or a unique prefix of one)")
        try:
            self._entry(ref)
            return ref
        except RunStoreError:
            if not isinstance(ref, str) or "/" in ref or "\\" in ref or ref.startswith("."):
                raise
        ids = {r["id"] for r in self.list()} | {r["id"] for r in self.damaged()}
        return unique_prefix(ref, ids, "run", str(self.root), RunStoreError)

    def resolve(self, ref: str) -> Run:
        """A sound run by id or by a unique prefix of its id (``resolve_id``)."""
        return self.get(self.resolve_id(ref))

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
