"""The job board: one JSON record per job beside the run store (``<runs>/.jobs/ID.json``).

A record is written whole to a temporary file and renamed, so a reader never sees half of one. Only the
process that drives a job (its *driver*: the CLI command, or the app's server) writes its record; others
ask it to stop by creating ``ID.cancel``, which the driver polls. A queued or running job whose driver
(on this host) is gone is reported failed, so a killed driver never leaves a job "running" forever.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import socket
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.store import default_root, pid_alive

STATES = ("queued", "running", "done", "failed", "cancelled")
ACTIVE = ("queued", "running")
JOB_ID = re.compile(r"^\d{8}-\d{6}-[a-z0-9_]+-[0-9a-f]{6}$")
LOG_LINES = 200  # the last lines a record keeps


class JobError(WorkbenchError):
    """An unknown job id, a job that cannot be cancelled, an unreachable Ray address."""


def jobs_root() -> Path:
    """``WORKBENCH_JOBS``, else ``.jobs`` inside the run store (the store skips dot-entries)."""
    if os.environ.get("WORKBENCH_JOBS"):
        return Path(os.environ["WORKBENCH_JOBS"])
    return default_root() / ".jobs"


def now() -> str:
    """This moment in UTC, ISO 8601 to the millisecond: how jobs record when they were created, started, ended."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


@dataclass
class Job:
    """One job as recorded. ``spec`` is the job's config (a dict with a ``kind`` key)."""

    id: str
    kind: str
    label: str
    spec: dict[str, Any]
    state: str = "queued"
    created: str = field(default_factory=now)
    started: str | None = None
    finished: str | None = None
    done: int = 0  # items done (prompts, examples, patched items)
    total: int = 0  # items in all (0 while unknown)
    eta_s: float | None = None  # estimated seconds left
    estimate_s: float | None = None  # the whole job's estimate when it was created (workbench/jobs/costs.py)
    workers: int = 1
    ray_address: str | None = None  # None: this process; "local": a local Ray instance; else the cluster
    run_id: str | None = None
    error: str | None = None
    log: list[str] = field(default_factory=list)
    driver: dict[str, Any] = field(default_factory=dict)  # {"host", "pid", "started"?} of the process running it
    ray_optional: bool = False  # Ray was the runner's choice, not asked for: if it cannot start, run here
    key: str = ""  # spec_key(spec): the same work asked for again finds this job's run (latest_done)

    @property
    def fraction(self) -> float:
        if self.state == "done":
            return 1.0
        return min(1.0, self.done / self.total) if self.total else 0.0

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out["fraction"] = self.fraction
        return out

    def summary(self) -> dict[str, Any]:
        """The row ``jobs list`` shows."""
        return {k: v for k, v in self.public().items() if k not in ("spec", "log", "driver")}


MAX_RECORD_BYTES = 64 * 2**20  # a record holds its spec (a prompt set inline) and 200 log lines


def check_record(file: Path, job_id: str) -> Job:
    """A job record read back and checked field by field (workbench/checks.py): JobError ("job ID's record
    is damaged: ...") for a symlink, non-JSON, a list, a missing or unknown field, or a field of the wrong
    type (a string ETA, a list for the driver, a string spec)."""
    from workbench.checks import Fields, read_json

    what = f"job {job_id}'s record"
    f = Fields(read_json(file, what, JobError, max_bytes=MAX_RECORD_BYTES), what, JobError)
    f.only(Job.__dataclass_fields__)
    if f.text("id") != job_id:
        raise JobError(f"{what} is damaged: it holds job {f.data['id']!r}")
    kw: dict[str, Any] = {"id": job_id, "kind": f.text("kind"), "label": f.text("label"), "spec": f.mapping("spec"),
                          "state": f.text("state", "queued", STATES), "created": f.text("created"),
                          "done": f.integer("done", 0, lo=0), "total": f.integer("total", 0, lo=0),
                          "workers": f.integer("workers", 1, lo=1), "log": f.items("log", str, []),
                          "driver": f.mapping("driver", {}), "key": f.text("key", ""),
                          "ray_optional": f.flag("ray_optional", False)}
    for name in ("started", "finished", "ray_address", "run_id", "error"):
        kw[name] = f.text(name, None)
    for name in ("eta_s", "estimate_s"):
        kw[name] = f.number(name, None, lo=0)
    driver = Fields(kw["driver"], f"{what} 'driver'", JobError)
    driver.text("host", None)
    driver.integer("pid", None, lo=0)
    driver.number("started", None, lo=0)
    return Job(**kw)


def spec_key(spec: Any) -> str:
    """The normalised key of what a job computes (workbench/jobs/specs.py): the same work, the same key."""
    from workbench.jobs.specs import key_of

    return key_of(spec)


def _host() -> str:
    return socket.gethostname()


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None when unknown: with the pid it names one
    process for good, where a pid alone may be reused (after a reboot, by any later process)."""
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone, or no psutil: unknown
        return None


def this_driver() -> dict[str, Any]:
    """The ``driver`` entry of a job this process runs."""
    return {"host": _host(), "pid": os.getpid(), "started": process_started(os.getpid())}


def driver_alive(driver: dict[str, Any]) -> bool:
    """Whether the recorded driver process (on this host) still runs: its pid exists, is no zombie, and, when
    its start time was recorded, is that same process (not a later one given the same pid)."""
    pid = driver.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    try:
        import psutil

        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = driver.get("started")
        return not isinstance(started, (int, float)) or abs(proc.create_time() - float(started)) < 0.5
    except ImportError:
        return True
    except Exception:  # noqa: BLE001 - gone meanwhile
        return False


def _old_key_matches(job: Job, key: str) -> bool:
    """Whether a record written before specs were typed (its key a digest of the raw dict) holds ``key``'s
    work: its spec read through its kind's class now."""
    try:
        return spec_key(job.spec) == key
    except Exception:  # noqa: BLE001 - a spec that no longer reads is not the same work
        return False


class JobBoard:
    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else jobs_root()

    def _file(self, job_id: str) -> Path:
        if not isinstance(job_id, str) or not JOB_ID.match(job_id):
            raise JobError(f"unknown job {job_id!r}: job ids look like 20260101-120000-faithfulness-abc123 "
                           "(see `workbench jobs list`)")
        return self.root / f"{job_id}.json"

    # -- write (the driver) -------------------------------------------------------------------------
    def create(self, spec: Any, label: str, workers: int = 1, ray_address: str | None = None) -> Job:
        """A new queued job for ``spec`` (a JobSpec, or a dict read through its kind's spec class)."""
        from workbench.jobs.specs import as_dict

        key = spec_key(spec)
        spec = as_dict(spec)
        kind = str(spec.get("kind", ""))
        if not re.fullmatch(r"[a-z0-9_]+", kind):
            raise JobError(f"a job spec needs a kind (letters, digits, _): got {kind!r}")
        stamp = _dt.datetime.now(_dt.UTC)
        job = Job(id=f"{stamp:%Y%m%d-%H%M%S}-{kind}-{uuid.uuid4().hex[:6]}", kind=kind, label=label, spec=spec,
                  workers=workers, ray_address=ray_address, driver=this_driver(),
                  key=key)
        self.write(job)
        return job

    def write(self, job: Job) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{job.id}-", suffix=".tmp", dir=self.root)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(asdict(job), fh, default=str)
            os.replace(tmp, self._file(job.id))
        except OSError as exc:
            raise JobError(f"cannot write job {job.id} under {self.root}: {exc}") from None

    def note(self, job: Job, line: str) -> None:
        """Append a timestamped line to the job's log (kept to the last LOG_LINES)."""
        job.log.append(f"{time.strftime('%H:%M:%S')} {line}")
        del job.log[:-LOG_LINES]

    # -- read (anyone) -------------------------------------------------------------------------------
    def get(self, job_id: str) -> Job:
        """The job's record; JobError for an unknown id or a damaged record (check_record)."""
        file = self._file(job_id)
        if not file.exists() and not file.is_symlink():
            raise JobError(f"unknown job {job_id!r} (see `workbench jobs list`)")
        return self._check_driver(check_record(file, job_id))

    def scan(self) -> tuple[list[Job], list[dict[str, str]]]:
        """(sound jobs newest first, damaged records by id), in one pass over the board."""
        jobs, damaged = [], []
        if not self.root.is_dir():
            return jobs, damaged
        try:
            files = sorted(self.root.glob("*.json"))
        except OSError as exc:
            raise JobError(f"cannot read the job board {self.root}: {exc}") from None
        for file in files:
            if not JOB_ID.match(file.stem):
                continue  # not a record of ours
            try:
                jobs.append(self.get(file.stem))
            except JobError as exc:
                damaged.append({"id": file.stem, "reason": str(exc), "path": str(file)})
        return sorted(jobs, key=lambda j: (j.created, j.id), reverse=True), damaged  # created: to the ms

    def list(self) -> list[Job]:
        """Every sound job, newest first; damaged records are skipped (they are in ``damaged()``)."""
        return self.scan()[0]

    def damaged(self) -> list[dict[str, str]]:
        """Records that cannot be read as jobs: [{"id", "reason", "path"}], by id."""
        return self.scan()[1]

    def latest_done(self, spec: Any, store: Any = None) -> Job | None:
        """The newest finished job that computed exactly ``spec`` and whose run is still in the store (the
        app opens it at once instead of computing again: results shared across sessions and restarts)."""
        from workbench.store import RunStore

        store = store or RunStore()
        key = spec_key(spec)
        kind = getattr(spec, "KIND", None) or (spec.get("kind") if isinstance(spec, dict) else None)
        for job in self.list():
            if job.state == "done" and job.run_id and (job.key == key or job.kind == kind
                                                       and _old_key_matches(job, key)):
                try:
                    store.get(job.run_id)
                except Exception:  # deleted or damaged: look further back
                    continue
                return job
        return None

    def _check_driver(self, job: Job) -> Job:
        """A queued/running job whose driver on this host has exited (or is a zombie, or whose pid now names
        another process) is failed, and recorded so: no job shows "running" after its process died."""
        pid, host = job.driver.get("pid"), job.driver.get("host")
        if job.state in ACTIVE and host == _host() and isinstance(pid, int) and not driver_alive(job.driver):
            job.state, job.finished = "failed", now()
            job.error = (f"the process that ran this job (pid {pid}) exited before it finished; "
                         "nothing was saved")
            self.note(job, job.error)
            try:
                self.write(job)
            except JobError:
                pass
        return job

    # -- cancel (anyone) -----------------------------------------------------------------------------
    def request_cancel(self, job_id: str) -> Job:
        """Ask the job's driver to stop it (it does within a second); a finished job is a JobError."""
        job = self.get(job_id)
        if job.state not in ACTIVE:
            raise JobError(f"job {job_id} is {job.state}: only a queued or running job can be cancelled")
        try:
            (self.root / f"{job_id}.cancel").touch()
        except OSError as exc:
            raise JobError(f"cannot cancel job {job_id}: {exc}") from None
        return job

    def cancel_requested(self, job_id: str) -> bool:
        return (self.root / f"{job_id}.cancel").exists()

    def clear_cancel(self, job_id: str) -> None:
        (self.root / f"{job_id}.cancel").unlink(missing_ok=True)
