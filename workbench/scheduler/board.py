"""The job board: one JSON record per job beside the run store (``<runs>/.jobs/ID.json``).

A record is written whole to a temporary file and renamed, so a reader never sees half of one. Only the
process that drives a job (its *driver*: the CLI command, or the app's server) writes its record; others
ask it to stop by creating ``ID.cancel``, which the driver polls. A queued or running job reads so only while
its driver on this host is provably alive (its pid runs and started when the record says: a pid alone may be
reused); otherwise it is reported failed with the reason, so a killed driver never leaves a job "running"
forever. Temporaries the board wrote and abandoned (a full disk, a killed writer) are swept when it is read.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core import store as run_store
from core.checks import Fields, disk_full, disk_full_error, read_json
from core.errors import WorkbenchError
from core.store import RunStore, checked_root, default_root, pid_alive
from core.text import one_line
from workbench.scheduler.errors import JobError
from workbench.scheduler.specs import as_dict, key_of

STATES = ("queued", "running", "done", "failed", "cancelled")
ACTIVE = ("queued", "running")
JOB_ID = re.compile(r"^\d{8}-\d{6}-[a-z0-9_]+-[0-9a-f]{6}$")
LOG_LINES = 200  # the last lines a record keeps


# Temporaries of records and costs written before they were named as the store names them (temp_prefix): swept
# once older than STALE_TMP_SECONDS (a write takes milliseconds).
_OLD_TMP = re.compile(r"^\.(\d{8}-\d{6}-[a-z0-9_]+-[0-9a-f]{6}|costs)-[a-z0-9_]{8}\.tmp$")


def jobs_root() -> Path:
    """``WORKBENCH_JOBS`` (absolute; set but empty means unset), else ``.jobs`` inside the run store (the store
    skips dot-entries). A relative WORKBENCH_JOBS is refused (RunStoreError)."""
    if os.environ.get("WORKBENCH_JOBS", "").strip():
        return checked_root(os.environ["WORKBENCH_JOBS"], "WORKBENCH_JOBS")
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
    estimate_s: float | None = None  # the whole job's estimate when it was created (workbench/scheduler/costs.py)
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
    """A job record read back and checked field by field (core/checks.py): JobError ("job ID's record
    is damaged: ...") for a symlink, non-JSON, a list, a missing or unknown field, or a field of the wrong
    type (a string ETA, a list for the driver, a string spec)."""
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
    """The normalised key of what a job computes (workbench/scheduler/specs.py): the same work, the same key."""
    return key_of(spec)


def _host() -> str:
    return socket.gethostname()


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None when unknown: with the pid it names one
    process for good, where a pid alone may be reused (after a reboot, by any later process)."""
    try:
        import psutil
    except ImportError:
        return _proc_started(pid)
    try:
        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone, or not ours to see: unknown
        return None


def _proc_started(pid: int) -> float | None:
    """process_started without psutil, from /proc as psutil computes it (boot time + start ticks / CLK_TCK)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def this_driver() -> dict[str, Any]:
    """The ``driver`` entry of a job this process runs."""
    return {"host": _host(), "pid": os.getpid(), "started": process_started(os.getpid())}


def driver_alive(driver: dict[str, Any]) -> bool:
    """Whether the recorded driver process (on this host) provably still runs: its pid exists, is no zombie, and
    started when the record says (a pid alone may name a later process: pid 1, after a reboot). A record
    without a start time proves nothing: not alive."""
    return driver_dead(driver) is None


def driver_dead(driver: dict[str, Any]) -> str | None:
    """None when the recorded driver provably runs (see driver_alive), else why it cannot be taken as running."""
    pid, started = driver.get("pid"), driver.get("started")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return "its record names no driver process"
    if not pid_alive(pid):
        return f"the process that ran this job (pid {pid}) exited before it finished"
    if isinstance(started, bool) or not isinstance(started, int | float):
        return (f"its record gives no start time for its driver (pid {pid}, which runs), so it cannot be proven "
                "to be that driver")
    actual = process_started(pid)
    if actual is None or abs(actual - float(started)) >= 0.5:
        return (f"the process that ran this job (pid {pid}) exited before it finished (pid {pid} now names "
                "another process)")
    try:
        import psutil

        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return f"the process that ran this job (pid {pid}) exited before it finished"
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - gone meanwhile
        return f"the process that ran this job (pid {pid}) exited before it finished"
    return None


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

    def ensure(self) -> None:
        """Make the board's folder (a board from then on: see run_store.mark); a ``.jobs`` that is a symlink is
        refused, so no record is ever written out of the run store through one."""
        if self.root.name == ".jobs" and self.root.is_symlink():
            raise JobError(f"the job board {self.root} is a symlink; refusing to write through it")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if disk_full(exc):
                raise disk_full_error(self.root, "the job board not written") from None
            raise JobError(f"cannot write the job board {self.root}: {exc}") from None
        run_store.mark(self.root, "job board")

    def write(self, job: Job) -> None:
        """The job's record, written whole (temporary file, rename); out of space: DiskFullError, no temporary
        left behind."""
        self.ensure()
        run_store.write_atomic(self._file(job.id), json.dumps(asdict(job), default=str), f"job {job.id}'s record",
                               JobError)

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

    def resolve_id(self, ref: str) -> str:
        """The id of the job named ``ref``, else of the one job whose id starts with it (store.unique_prefix)."""
        ref = ref.strip() if isinstance(ref, str) else ref
        if not isinstance(ref, str) or not ref or "/" in ref or ref.startswith("."):
            return ref  # get() says what is wrong with it
        if JOB_ID.match(ref) and (self._file(ref).exists() or self._file(ref).is_symlink()):
            return ref
        jobs, damaged = self.scan()
        ids = {j.id for j in jobs} | {d["id"] for d in damaged}
        return run_store.unique_prefix(ref, ids, "job", f"{self.root} (see `workbench jobs list`)", JobError)

    def scan(self) -> tuple[list[Job], list[dict[str, str]]]:
        """(sound jobs newest first, damaged records by id), in one pass over the board."""
        jobs, damaged = [], []
        if not self.root.is_dir():
            if self.root.exists() and not self.root.is_dir():  # (not made meanwhile by a writer)
                raise JobError(f"the job board {self.root} is not a directory")
            return jobs, damaged
        try:
            files = sorted(self.root.glob("*.json"))
        except OSError as exc:
            raise JobError(f"cannot read the job board {self.root}: {exc}") from None
        self.sweep_leftovers(files)
        for file in files:
            if not JOB_ID.match(file.stem):
                continue  # not a record of ours
            try:
                jobs.append(self.get(file.stem))
            except JobError as exc:
                damaged.append({"id": file.stem, "reason": str(exc), "path": str(file)})
        return sorted(jobs, key=lambda j: (j.created, j.id), reverse=True), damaged  # created: to the ms

    def sweep_leftovers(self, records: list[Path]) -> list[str]:
        """Delete the temporaries this board's writers left and provably abandoned (a full disk, a killed
        writer): only in a board (its marker; a board from before markers, holding records, is marked now)."""
        if not run_store.is_marked(self.root) and any(JOB_ID.match(f.stem) for f in records):
            run_store.mark(self.root, "job board")
        gone = run_store.sweep(self.root)
        if run_store.is_marked(self.root):
            now_s = time.time()
            for entry in os.scandir(self.root):
                try:
                    age = now_s - entry.stat(follow_symlinks=False).st_mtime
                    if _OLD_TMP.match(entry.name) and age > run_store.STALE_TMP_SECONDS:
                        os.unlink(entry.path)
                        gone.append(entry.name)
                except OSError:
                    pass
        return gone

    def list(self) -> list[Job]:
        """Every sound job, newest first; damaged records are skipped (they are in ``damaged()``)."""
        return self.scan()[0]

    def damaged(self) -> list[dict[str, str]]:
        """Records that cannot be read as jobs: [{"id", "reason", "path"}], by id."""
        return self.scan()[1]

    def latest_done(self, spec: Any, store: Any = None) -> Job | None:
        """The newest finished job that computed exactly ``spec`` and whose run is still in the store (the
        app opens it at once instead of computing again: results shared across sessions and restarts)."""
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
        """A queued/running job whose driver on this host is not provably alive (it exited, is a zombie, its pid
        now names another process, or the record gives no pid or start time to check), or whose record names
        no host at all, is failed, and recorded so: no job shows "running" after its process died. (A driver
        on another host cannot be checked from here.)"""
        if job.state not in ACTIVE:
            return job
        host = job.driver.get("host")
        if not isinstance(host, str) or not host:
            why: str | None = "its record names no driver process"
        elif host == _host():
            why = driver_dead(job.driver)
        else:
            return job
        if why is not None:
            job.state, job.finished, job.eta_s = "failed", now(), None
            job.error = f"{why}; nothing was saved"
            self.note(job, job.error)
            try:
                self.write(job)
            except WorkbenchError:  # a read never fails for want of space: the record reads failed anyway
                pass
        return job

    # -- cancel (anyone) -----------------------------------------------------------------------------
    def request_cancel(self, job_id: str) -> Job:
        """Ask the job's driver to stop it (it does within a second); a finished job is a JobError."""
        job = self.get(job_id)
        if job.state not in ACTIVE:
            raise JobError(f"job {job_id} is {job.state}: only a queued or running job can be cancelled")
        try:  # created, never written through a symlink
            os.close(os.open(self.root / f"{job_id}.cancel", os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                             0o666))
        except OSError as exc:
            raise JobError(f"cannot cancel job {job_id}: {one_line(exc)}") from None
        return job

    def cancel_requested(self, job_id: str) -> bool:
        return (self.root / f"{job_id}.cancel").exists()

    def clear_cancel(self, job_id: str) -> None:
        (self.root / f"{job_id}.cancel").unlink(missing_ok=True)
