"""The run store: one directory per run, written atomically, indexed in SQLite (WAL).

A run directory holds ``meta.json`` (model, method, arguments, versions, git commit, timings),
``tensors.safetensors`` and tables as CSV. Runs are built in ``<root>/.tmp-*`` and renamed
into place, so a killed writer never leaves a half run visible; the index is updated after the
rename and is rebuilt from the directories when it disagrees with them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import RunStoreError

META = "meta.json"
TENSORS = "tensors.safetensors"


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

    def tensors(self) -> dict[str, Any]:
        file = self.path / TENSORS
        if not file.exists():
            return {}
        from safetensors.torch import load_file

        return load_file(str(file))

    def table(self, name: str):
        import pandas as pd

        file = self.path / f"{name}.csv"
        if not file.exists():
            raise RunStoreError(f"run {self.id} has no table {name!r}")
        return pd.read_csv(file)

    def tables(self) -> list[str]:
        return sorted(p.stem for p in self.path.glob("*.csv"))

    def result(self) -> dict[str, Any]:
        file = self.path / "result.json"
        return json.loads(file.read_text()) if file.exists() else {}


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


class RunStore:
    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # -- index ---------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.root / "index.sqlite", timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise RunStoreError(f"cannot open run store at {self.root}: {exc}") from None
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(
            "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created TEXT, kind TEXT,"
            " model TEXT, method TEXT, summary TEXT)"
        )
        return con

    def _index(self, con: sqlite3.Connection, run_id: str, meta: dict[str, Any]) -> None:
        con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, meta.get("created"), meta.get("kind"), meta.get("model"),
             meta.get("method"), json.dumps(meta.get("summary", {}))),
        )

    # -- write ---------------------------------------------------------------------------
    def save(self, draft: RunDraft) -> Run:
        """Write a run atomically and index it; returns the stored run."""
        now = _dt.datetime.now(_dt.UTC)
        run_id = f"{now:%Y%m%d-%H%M%S}-{draft.kind}-{uuid.uuid4().hex[:6]}"
        meta = {
            "id": run_id,
            "created": now.isoformat(timespec="seconds"),
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
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
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
                (tmp / "result.json").write_text(json.dumps(draft.result, default=str))
            (tmp / META).write_text(json.dumps(meta, indent=2, default=str))
            final = self.root / run_id
            if final.exists():  # never overwrite silently
                raise RunStoreError(f"run {run_id} already exists")
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        with self._connect() as con:
            self._index(con, run_id, meta)
        return Run(run_id, final, meta)

    # -- read ----------------------------------------------------------------------------
    def _complete_dirs(self) -> dict[str, Path]:
        if not self.root.exists():
            return {}
        return {p.name: p for p in self.root.iterdir()
                if p.is_dir() and not p.name.startswith(".") and (p / META).exists()}

    def list(self, kind: str | None = None, model: str | None = None) -> list[dict[str, Any]]:
        """Index rows, newest first. Directories and index are reconciled on the way."""
        dirs = self._complete_dirs()
        if not dirs and not (self.root / "index.sqlite").exists():
            return []
        with self._connect() as con:
            ids = {r[0] for r in con.execute("SELECT id FROM runs")}
            for stale in ids - dirs.keys():
                con.execute("DELETE FROM runs WHERE id = ?", (stale,))
            for missing in dirs.keys() - ids:
                try:
                    self._index(con, missing, json.loads((dirs[missing] / META).read_text()))
                except (OSError, ValueError):
                    continue
            query, params = "SELECT * FROM runs WHERE 1=1", []
            if kind:
                query, params = query + " AND kind = ?", params + [kind]
            if model:
                query, params = query + " AND model = ?", params + [model]
            rows = con.execute(query + " ORDER BY created DESC, id DESC", params).fetchall()
        cols = ["id", "created", "kind", "model", "method", "summary"]
        out = []
        for row in rows:
            item = dict(zip(cols, row, strict=False))
            item["summary"] = json.loads(item["summary"] or "{}")
            out.append(item)
        return out

    def get(self, run_id: str) -> Run:
        path = self.root / run_id
        if not run_id or run_id.startswith(".") or "/" in run_id or not (path / META).exists():
            raise RunStoreError(f"no run {run_id!r} in {self.root}")
        return Run(run_id, path, json.loads((path / META).read_text()))

    def remove(self, run_id: str) -> None:
        run = self.get(run_id)
        trash = self.root / f".rm-{run_id}"
        os.rename(run.path, trash)  # disappears atomically, then is deleted
        with self._connect() as con:
            con.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        shutil.rmtree(trash, ignore_errors=True)
