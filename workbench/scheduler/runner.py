"""Running a job: in this process, or as Ray tasks (a local instance started on demand, or a cluster).

Where: work whose estimate (workbench/scheduler/kinds.py ``estimate``) is under LOCAL_S runs in the caller's own
process (``submit`` from the app runs it in a thread, on the model the server already holds), with the same
records, progress, cancel and atomic save as on Ray, and the same result. Longer work, more than one worker,
or a Ray address, runs on Ray; when Ray was only the runner's choice (no address given) and a local instance
cannot start, the job runs in its driver process instead, with a note in its log. An explicit address that
does not work fails the job at once with one line.

A job is a spec (a dict with a ``kind``, see workbench/scheduler/kinds.py) split into shards; each shard is one
engine call with a progress callback. On Ray each shard is a task (a streaming generator: it yields
progress events, then its part), run in a worker process that loads the model once and keeps it for later
shards; the driver (this process) merges the parts, saves the run atomically, and keeps the job's record.

Cancelling kills the shard tasks' worker processes (see _stop), which frees the model and every lock they
held at once; a worker that dies mid-job fails the job with a clear message.
Nothing is saved unless every shard finished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from core.checks import read_json
from core.errors import WorkbenchError
from core.store import RunStore, pid_alive, write_atomic
from core.text import one_line
from workbench.scheduler import costs
from workbench.scheduler.board import Job, JobBoard, now, process_started, this_driver
from workbench.scheduler.errors import JobError
from workbench.scheduler.kinds import estimate, get_kind, lend, model_lock, shard_resources
from workbench.scheduler.specs import as_dict
from workbench.scheduler.warm import NAMESPACE, model_actor, touch
from workbench.scheduler.warm import ensure as ensure_warm
from workbench.scheduler.worker import LEAN_RAY, POLL_S, Report, shard_events

WRITE_S = 0.5  # how often it rewrites the job's record
START_ATTEMPTS = 3  # tries at starting a local Ray instance (one when the job can run here instead)
# Work estimated under this many seconds runs in the caller's process: a Ray start and a worker's imports
# and model load cost more than that on a busy machine. WORKBENCH_LOCAL_S overrides (0: always Ray).
LOCAL_S = 10.0
_RAY_LOCK = threading.Lock()
_RAY_ADDRESS: list[str] = []  # the address this process's Ray connection was made with


class JobCancelled(WorkbenchError):
    """The job was cancelled (a user's request, or Ctrl-C)."""


class JobFailed(WorkbenchError):
    """The job failed for a reason other than bad input (a worker died, the cluster went away)."""


# -- Ray --------------------------------------------------------------------------------------------
def resolve_address(address: str | None) -> str | None:
    """The Ray address to use: the argument, else WORKBENCH_RAY_ADDRESS; "" means none."""
    if address is None:
        address = os.environ.get("WORKBENCH_RAY_ADDRESS", "")
    return address.strip() or None


REACH_S = 3.0  # how long an address gets to answer, and to answer as a Ray head does
# The HTTP/2 client preface and an empty SETTINGS frame: a Ray head's GCS (a gRPC server) answers with a
# SETTINGS frame of its own (frame type 4 in byte 3); an HTTP/1 server, or anything else, does not.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_ray_env(address: str | None, workers: int) -> None:
    """JobError when a local Ray instance is wanted (address "local", or none with more than one worker) while
    RAY_ADDRESS is set: ray.init would connect there instead. A wrong setting is said in one line, never worked
    around by quietly running in this process."""
    if address in (None, "local") and (workers > 1 or address == "local") and os.environ.get("RAY_ADDRESS", "").strip():
        raise JobError(f"RAY_ADDRESS={os.environ['RAY_ADDRESS']} is set, so Ray would not start a local "
                       "instance: unset it for local workers, or pass it as --ray-address (or "
                       "WORKBENCH_RAY_ADDRESS) to run on that cluster")


def check_reachable(address: str) -> None:
    """Fail within a few seconds with one line when host:port does not answer, or answers but not as a Ray
    head (gRPC): ray.init would retry for a minute, or wait for ever on a server that is not Ray's."""
    if address in ("auto", "local"):
        return
    if address.startswith("ray://"):
        raise JobError(f"Ray Client addresses ({address}) are not supported: give the head's GCS address "
                       "HOST:6379 from a machine that can reach the cluster (`ray start --address HEAD:6379`)")
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host or not 0 < int(port) < 65536:
        raise JobError(f"bad Ray address {address!r}: write HOST:PORT (e.g. 10.0.0.5:6379), 'local' or auto")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_S)
    except OSError as exc:
        raise JobError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None
    with conn:
        if not _speaks_grpc(conn):
            raise JobError(f"{address} answers, but not as a Ray head (no gRPC there: is it another server, "
                           "or the dashboard's port? The GCS port is 6379 by default)")


def _speaks_grpc(conn: socket.socket) -> bool:
    """Whether the server on ``conn`` answers an HTTP/2 preface with a SETTINGS frame within REACH_S."""
    conn.settimeout(REACH_S)
    deadline = time.monotonic() + REACH_S
    got = b""
    try:
        conn.sendall(_H2_PREFACE)
        while len(got) < 9 and time.monotonic() < deadline:
            chunk = conn.recv(9 - len(got))
            if not chunk:
                break
            got += chunk
    except OSError:
        return False
    return len(got) == 9 and got[3] == 0x04


_RAY_MESSAGES: list[str] = []  # what Ray's error listener would have printed on stdout (kept, not shown)


def _quiet_ray() -> None:
    """Keep Ray's own text out of the command's output: its driver prints raylet messages ("A worker died or
    was killed ...") on stdout, and "Unhandled error" lines for shard results nobody fetched (a cancelled or
    failed job) at exit. The command reports what happened in its one line; stdout holds only its result."""
    import ray._private.worker as ray_worker

    os.environ["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"

    def keep(data: dict[str, Any], ignore_prefix: bool = False) -> None:  # noqa: ARG001 - Ray's signature
        _RAY_MESSAGES.extend(str(line) for line in data.get("lines", []))
        del _RAY_MESSAGES[:-50]

    ray_worker.print_to_stdstream = keep


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 goes to a scratch file for the block (native code writes there, not to sys.stderr):
    a failed connection then ends in our one-line error, not in twenty lines of retries."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as scratch:
            os.dup2(scratch.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def local_seconds() -> float:
    """The threshold under which work runs in the caller's process: LOCAL_S (or WORKBENCH_LOCAL_S) seconds
    of a quiet machine. On a machine busier than its cores, an estimate measured now grows with the load
    (and a Ray start and a worker's imports grow more), so the threshold is scaled by load / cores."""
    try:
        limit = max(0.0, float(os.environ.get("WORKBENCH_LOCAL_S", LOCAL_S)))
    except ValueError:
        limit = LOCAL_S
    try:
        busy = os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):
        busy = 1.0
    return limit * min(10.0, max(1.0, busy))


def connect(address: str | None, attempts: int = START_ATTEMPTS, namespace: str | None = None) -> str:
    """Connect this process to Ray once: a local instance (address None or "local", started on demand with
    this machine's cores) or the cluster at ``address``. Returns what it is connected to."""
    import ray

    want = address or "local"
    with _RAY_LOCK:
        if ray.is_initialized():
            if _RAY_ADDRESS and _RAY_ADDRESS[0] != want:
                raise JobError(f"this process is already connected to Ray at {_RAY_ADDRESS[0]}; "
                               f"start another process for {want}")
            return want
        check_reachable(want)
        if want == "local" and os.environ.get("RAY_ADDRESS", "").strip():
            # ray.init() would connect to RAY_ADDRESS instead of starting an instance (and then refuse num_cpus)
            raise JobError(f"RAY_ADDRESS={os.environ['RAY_ADDRESS']} is set, so Ray would not start a local "
                           "instance: unset it for local workers, or pass it as --ray-address (or "
                           "WORKBENCH_RAY_ADDRESS) to run on that cluster")
        _quiet_ray()
        kwargs: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False, "namespace": namespace}
        for attempt in range(attempts):
            try:
                if want == "local":
                    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, _system_config=LEAN_RAY,
                             **kwargs)
                else:
                    with _quiet_stderr():  # Ray's C++ client logs each failed try there
                        ray.init(address=want, **kwargs)
                break
            except Exception as exc:  # ConnectionError, RuntimeError, version mismatch, ...
                # A local instance gives its agents about 30 s to start: on a machine busy enough that
                # Python starts slowly, a second try (its files now cached) usually makes it.
                retry = want == "local" and "timed out during startup" in str(exc) and attempt + 1 < attempts
                try:
                    ray.shutdown()
                except Exception:
                    pass
                if not retry:
                    cause = f" ({one_line(exc.__cause__)})" if exc.__cause__ is not None else ""
                    raise JobError(f"cannot connect to Ray at {want}: {one_line(exc)}{cause}") from None
        _RAY_ADDRESS[:] = [want]
        return want


AGENTS = ".ray-agents-{pid}.json"  # beside the job records: the local instance's agents, per driver


def note_agents(root: Any) -> None:
    """Record the processes of the local Ray instance this driver started (its raylet's children: the
    dashboard and runtime-env agents) with their start times. When a driver is killed with SIGKILL its raylet
    and GCS go with it, but the agents poll for their parent and linger for a minute or more; the next job
    started here ends them (sweep_agents). Best effort: nothing here ever fails a job."""
    import json
    from pathlib import Path

    try:
        import psutil
        import ray._private.worker as ray_worker

        node = ray_worker._global_node
        raylet = node.all_processes["raylet"][0].process.pid
        kids = [[c.pid, c.create_time()] for c in psutil.Process(raylet).children()]

        write_atomic(Path(root) / AGENTS.format(pid=os.getpid()),
                     json.dumps({"host": socket.gethostname(), "driver": os.getpid(), "agents": kids}),
                     "the Ray agents' record", JobError)
    except Exception:  # noqa: BLE001 - another Ray layout, a process already gone, a full disk: nothing recorded
        pass


def sweep_agents(root: Any) -> list[int]:
    """End the recorded agents of local Ray instances whose driver (on this host) is gone: a process is ended
    only if its pid and start time are both the recorded ones (never a reused pid). Returns the pids ended."""
    import re
    from pathlib import Path

    ended: list[int] = []
    try:
        import psutil

        files = [f for f in Path(root).glob(AGENTS.format(pid="*"))
                 if re.fullmatch(re.escape(AGENTS).replace(r"\{pid\}", r"\d+"), f.name)]  # exactly our names
    except Exception:  # noqa: BLE001
        return ended
    for file in files:
        try:
            try:
                data = read_json(file, "a Ray agents' record", JobError, max_bytes=2**20)
            except JobError as exc:
                raise ValueError(str(exc)) from None
            driver, agents = int(data["driver"]), list(data["agents"])
            if data.get("host") != socket.gethostname() or pid_alive(driver):
                continue
            for pid, started in agents:
                try:
                    proc = psutil.Process(int(pid))
                    if abs(proc.create_time() - float(started)) < 0.01:
                        proc.kill()
                        ended.append(int(pid))
                except (psutil.Error, ValueError, TypeError):
                    continue
            file.unlink(missing_ok=True)
        except (OSError, ValueError, TypeError, KeyError):
            try:  # a damaged record of ours: dropped
                file.unlink(missing_ok=True)
            except OSError:
                pass
    return ended


_REMOTE: list[Any] = []


def _remote_shard(resources: dict[str, float]):
    """The shard task with the resources it declares (shard_resources: CPUs, GPUs where the spec's device is
    one), so Ray places each shard on a node that has them."""
    import ray

    if not _REMOTE:
        # max_retries=0: a shard whose worker died is a failed job, not a silent rerun.
        _REMOTE.append(ray.remote(num_cpus=1, max_retries=0)(shard_events))
    return _REMOTE[0].options(**resources)


# -- progress ---------------------------------------------------------------------------------------
class _Tracker:
    """The driver's view of a job's progress; rewrites the record every WRITE_S and on demand."""

    def __init__(self, board: JobBoard, job: Job, n_shards: int,
                 on_progress: Callable[[Job], None] | None) -> None:
        self.board, self.job, self.on_progress = board, job, on_progress
        self.totals = [0] * n_shards
        self.dones = [0] * n_shards
        self.t0 = time.monotonic()
        self.t_work: float | None = None  # when the first shard knew its items (its model loaded)
        self.last_write = 0.0

    def work_seconds(self) -> float:
        return time.monotonic() - (self.t_work if self.t_work is not None else self.t0)

    def event(self, i: int, tag: str, value: Any) -> None:
        if tag == "start":
            if self.job.state == "queued":
                self.job.state, self.job.started = "running", now()
                self.t0 = time.monotonic()
            self.board.note(self.job, f"shard {i + 1}/{len(self.totals)} started (pid {value})")
            self.flush(force=True)
        elif tag == "total":
            self.totals[i] = int(value)
            if self.t_work is None:
                self.t_work = time.monotonic()
                self.flush(force=True)  # the shard knows its items: its inputs are read and checked
        elif tag == "step":
            self.dones[i] += int(value)
        elif tag == "log":
            self.board.note(self.job, str(value))

    def flush(self, force: bool = False) -> None:
        t = time.monotonic()
        if not force and t - self.last_write < WRITE_S:
            return
        job = self.job
        job.total, job.done = sum(self.totals), min(sum(self.dones), sum(self.totals))
        elapsed = t - self.t0
        job.eta_s = round(elapsed * (job.total - job.done) / job.done, 1) if job.done and job.total else None
        self.board.write(job)
        self.last_write = t
        if self.on_progress:
            self.on_progress(job)


def _finish(board: JobBoard, job: Job, state: str, error: str | None = None, strict: bool = True) -> None:
    """Record how the job ended. Not ``strict`` (on the way out of a failure), a record that cannot be written
    (a full disk) does not hide the failure: the record then reads failed once this driver has gone."""
    job.state, job.finished, job.error = state, now(), error
    if state != "done":
        job.eta_s = None
    board.note(job, error or state)
    try:
        board.write(job)
    except WorkbenchError:
        if strict:
            raise
    try:
        board.clear_cancel(job.id)
    except OSError:
        pass


# -- drivers ----------------------------------------------------------------------------------------
def drive(job: Job, board: JobBoard, save: bool = True,
          on_progress: Callable[[Job], None] | None = None) -> tuple[Job, Any]:
    """Run ``job`` to its end, keeping its record: (job, result). Its shards run on Ray when the job has a
    ray_address (or more than one worker), else here. Cancelled, failed: JobCancelled / the error."""
    kind = get_kind(job.kind)
    try:
        shards = kind.shards(job.spec, job.workers)
        if job.ray_address is None and job.workers == 1:
            parts, tracker = _run_here(job, board, kind, shards, on_progress)
        else:
            parts, tracker = _run_on_ray(job, board, kind, shards, on_progress)
        costs.record(board.root, kind, job.spec, tracker.work_seconds(), sum(tracker.totals),
                     len(shards) if job.ray_address is not None else 1)  # None: ran here, one at a time
        result = kind.finish(job.spec, parts)
        if save:
            job.run_id = result.save(RunStore()).id
            board.note(job, f"saved run {job.run_id}")
        job.done = job.total
        _finish(board, job, "done")
        return job, result
    except JobCancelled:
        _finish(board, job, "cancelled", "cancelled; nothing was saved", strict=False)
        raise
    except KeyboardInterrupt:
        _finish(board, job, "cancelled", "interrupted (Ctrl-C); nothing was saved", strict=False)
        raise
    except BaseException as exc:
        _finish(board, job, "failed", f"{one_line(exc)}; nothing was saved", strict=False)
        raise


def _run_here(job: Job, board: JobBoard, kind: Any, shards: list[Any],
              on_progress: Callable[[Job], None] | None) -> list[Any]:
    """The shards one after another in this process; a cancel request stops at the next progress step."""
    tracker = _Tracker(board, job, len(shards), on_progress)
    parts = []
    for i, shard in enumerate(shards):
        if board.cancel_requested(job.id):
            raise JobCancelled(f"job {job.id} cancelled")
        tracker.event(i, "start", os.getpid())

        def step(n: int, i: int = i) -> None:
            tracker.event(i, "step", n)
            tracker.flush()
            if board.cancel_requested(job.id):
                raise JobCancelled(f"job {job.id} cancelled")

        def note(text: str, i: int = i) -> None:
            tracker.event(i, "log", text)
            tracker.flush(force=True)  # a finished unit is shown (and recorded) as it comes

        with model_lock(job.spec):  # a model lent by the app: one hooked forward at a time
            parts.append(kind.run_shard(job.spec, shard,
                                        Report(lambda n, i=i: tracker.event(i, "total", n), step, note)))
    tracker.flush(force=True)
    return parts, tracker


def _run_on_ray(job: Job, board: JobBoard, kind: Any, shards: list[Any],
                on_progress: Callable[[Job], None] | None) -> list[Any]:
    import ray

    warm_address = _warm_address(job, board) if not ray.is_initialized() else None
    local = job.ray_address in (None, "local") and not ray.is_initialized() and warm_address is None
    if local:
        sweep_agents(board.root)  # what a killed driver's local instance left behind
    try:
        if warm_address is not None:
            connect(warm_address, attempts=1, namespace=NAMESPACE)
            job.ray_address = "local"  # this machine's (warm) instance: workers are killed by pid on cancel
        else:
            job.ray_address = connect(job.ray_address, attempts=1 if job.ray_optional else START_ATTEMPTS)
    except JobError as exc:
        if not job.ray_optional:
            raise
        # Ray was our choice, not the user's: the job still fits this machine, so it runs here (slower with
        # more than one shard, since they run one after another, but it runs; every number is the same).
        board.note(job, f"Ray is unavailable ({exc}); running in this process instead")
        job.ray_address = None
        board.write(job)
        return _run_here(job, board, kind, shards, on_progress)
    if local:
        note_agents(board.root)
    resources = shard_resources(kind, job.spec)
    board.note(job, f"{len(shards)} shard(s) on Ray ({job.ray_address}), each asking for "
               + ", ".join(f"{v:g} {k[4:]}" for k, v in resources.items() if v))
    board.write(job)
    if warm_address is not None and len(shards) == 1 and "model" in job.spec:
        # the model's actor on the warm instance: imports done and the model loaded by an earlier job
        board.note(job, f"on the warm instance at {warm_address}, on the actor of {job.spec['model']}")
        gens = [model_actor(job.spec, resources).run.options(num_returns="streaming").remote(job.spec, shards[0])]
    else:
        task = _remote_shard(resources)
        gens = [task.remote(job.spec, shard) for shard in shards]
    live = {gen: i for i, gen in enumerate(gens)}
    parts: list[Any] = [None] * len(shards)
    tracker = _Tracker(board, job, len(shards), on_progress)
    pids: dict[int, int] = {}  # shard -> its worker's pid
    try:
        while live:
            if board.cancel_requested(job.id):
                raise JobCancelled(f"job {job.id} cancelled")
            ready, _ = ray.wait(list(live), num_returns=1, timeout=POLL_S)
            for gen in ready:
                i = live[gen]
                try:
                    tag, value = ray.get(next(gen))
                except StopIteration:
                    del live[gen]
                    continue
                except Exception as exc:
                    raise _explain(exc, i, len(shards)) from None
                if tag == "part":
                    parts[i] = value
                else:
                    pids.update({i: value} if tag == "start" else {})
                    tracker.event(i, tag, value)
            tracker.flush()
    except BaseException:
        _stop(live, pids, job.ray_address == "local")
        raise
    tracker.flush(force=True)
    return parts, tracker


_WARM: list[int | None] = [None]  # the warm instance's owner pid when this driver may use it (drive_recorded)


def _warm_address(job: Job, board: JobBoard) -> str | None:
    """The warm instance's address for a job that may use it (submitted, Ray not asked for), else None;
    a warm instance that cannot start is a note, and the job starts an instance of its own."""
    if _WARM[0] is None or not job.ray_optional or job.ray_address not in (None, "local"):
        return None
    try:
        return ensure_warm(board.root, owner=_WARM[0])
    except Exception as exc:  # noqa: BLE001 - a speed-up, never a dependency
        board.note(job, f"no warm Ray instance ({one_line(exc)}); starting one for this job")
        return None


def _stop(live: dict[Any, int], pids: dict[int, int], local: bool) -> None:
    """End the shards still running, freeing their workers' models at once. On the local instance each
    worker is killed by its pid; elsewhere Ray interrupts the task and the worker exits (shard_events).
    (Ray 2.60's ``cancel(force=True)`` of a streaming task took the local raylet down with it here.)"""
    import ray

    for gen, i in live.items():
        try:
            if local and i in pids:
                os.kill(pids[i], signal.SIGKILL)
            else:
                ray.cancel(gen)
        except Exception:  # already gone
            pass


def _explain(exc: Exception, i: int, n: int) -> BaseException:
    """A shard's failure as one clear error: the engine's own error (bad input keeps its type), or why the
    worker is gone."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, WorkbenchError):
        return cause
    name = type(exc).__name__
    if "WorkerCrashed" in name or "ActorDied" in name or "NodeDied" in name or "ObjectLost" in name:
        return JobFailed(f"the Ray worker running shard {i + 1}/{n} died (killed, or out of memory): "
                         f"{one_line(exc)}")
    if "TaskCancelled" in name:
        return JobCancelled(f"shard {i + 1}/{n} was cancelled")
    if cause is not None:
        return JobFailed(f"shard {i + 1}/{n} failed: {type(cause).__name__}: {one_line(cause)}")
    return JobFailed(f"shard {i + 1}/{n} failed: {name}: {one_line(exc)}")


# -- entry points -----------------------------------------------------------------------------------
def run(spec: Any, workers: int = 1, address: str | None = None, save: bool = True,
        on_progress: Callable[[Job], None] | None = None, board: JobBoard | None = None) -> tuple[Job, Any]:
    """Run a job to its end from this process (the CLI, a notebook): (job, result).

    workers 1 without an address runs here; more workers, or an address (``--ray-address`` /
    WORKBENCH_RAY_ADDRESS; "local" for a local Ray instance), run on Ray."""
    board = board or JobBoard()
    check_ray_env(resolve_address(address), workers)
    job = create(spec, workers, address, board)
    if job.ray_address is None and workers > 1:  # Ray for the workers asked for, but not a must
        job.ray_optional = True
    return drive(job, board, save=save, on_progress=on_progress)


def create(spec: Any, workers: int, address: str | None, board: JobBoard) -> Job:
    """A job record for ``spec`` (a JobSpec, or a dict read through its kind's spec class: SpecError when bad)."""
    spec = as_dict(spec)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise JobError(f"workers must be a whole number >= 1 (got {workers!r})")
    kind = get_kind(spec.get("kind", ""))
    address = resolve_address(address)
    if address is not None:
        check_reachable(address)
    job = board.create(spec, kind.label(spec), workers=workers, ray_address=address)
    try:  # what an earlier job of this shape measured: shown on the job before it has progress of its own
        cost = estimate(spec, workers, root=board.root, measure=False)
    except Exception:
        cost = None
    if cost is not None:
        job.estimate_s = round(cost.seconds, 1)
        board.note(job, f"estimate: {cost.text()}")
        board.write(job)
    return job


def placement(spec: Any, workers: int, address: str | None, root: Any,
              seconds: float | None = None) -> tuple[str, str]:
    """Where ``submit`` runs a job, and why: ("here", reason) for one worker, no Ray address and an estimate
    (``seconds`` measured by the caller, else the kind's) under local_seconds(); else ("ray", reason)."""
    limit = local_seconds()
    if resolve_address(address) is not None:
        return "ray", f"Ray address {resolve_address(address)}"
    if workers > 1:
        return "ray", f"{workers} workers"
    if seconds is None:
        try:
            cost = estimate(spec, workers, root=root, measure=False)
        except Exception:  # noqa: BLE001 - no estimate is no reason not to run
            cost = None
        seconds = None if cost is None else cost.seconds
    if seconds is None:
        return "ray", "no estimate yet"
    if seconds <= limit:
        return "here", f"estimated {seconds:.1f} s <= {limit:.0f} s"
    return "ray", f"estimated {seconds:.0f} s > {limit:.0f} s"


_THREADS: dict[str, threading.Thread] = {}  # jobs running in this process's threads, by id


def submit(spec: Any, workers: int = 1, address: str | None = None, board: JobBoard | None = None,
           models: dict[str, tuple[Any, Any]] | None = None, seconds: float | None = None,
           warm_owner: int | None = None) -> Job:
    """Start a job and return at once (the app, a notebook); ``JobBoard().request_cancel(id)`` stops it.

    Work estimated under local_seconds() (``seconds`` when the caller measured it) runs in a thread of this
    process (see ``placement``), on ``models`` ({name: (model, lock)}) when the caller lends its loaded
    ones: no Ray, no second copy of the model. Other work runs on Ray from a driver process of its own
    (``python -m workbench.scheduler``): the caller never connects to Ray, so nothing that happens to Ray (Ray
    ends a driver whose local instance dies) can take the caller down. The driver's own output goes to
    ``<jobs>/ID.log``. With ``warm_owner`` (the app server's pid), a job that goes to Ray without an address
    runs on the warm local instance (workbench/scheduler/warm.py), which ends once idle or once that process
    has gone; without it, each such job's driver starts an instance of its own."""
    import subprocess
    import sys

    board = board or JobBoard()
    check_ray_env(resolve_address(address), workers)  # (Ray only chosen for the estimate: it may fall back here)
    where, why = placement(spec, workers, address, board.root, seconds)
    if where == "here":
        return _start_here(spec, board, models, why)
    job = create(spec, workers, resolve_address(address) or "local", board)
    job.ray_optional = resolve_address(address) is None
    board.note(job, f"runs on Ray ({why})")
    with open(board.root / f"{job.id}.log", "ab") as log:
        on = warm_owner is not None and job.ray_optional and os.environ.get("WORKBENCH_RAY_WARM", "1") != "0"
        warm = [f"--warm={warm_owner}"] if on else []
        child = subprocess.Popen([sys.executable, "-m", "workbench.scheduler", str(board.root), job.id, *warm],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    # a driver that dies at once fails the job
    job.driver = {"host": socket.gethostname(), "pid": child.pid, "started": process_started(child.pid)}
    board.write(job)
    threading.Thread(target=child.wait, daemon=True).start()  # reaped when it ends: no zombie looks alive
    return job


def _start_here(spec: dict[str, Any], board: JobBoard, models: dict[str, tuple[Any, Any]] | None,
                why: str) -> Job:
    """The job in a thread of this process (its driver is this process: if it dies, the job reads failed)."""
    job = create(spec, 1, None, board)
    board.note(job, f"runs in this process ({why})")
    board.write(job)

    def work() -> None:
        with lend(models):
            try:
                drive(job, board)
            except BaseException:  # noqa: BLE001 - drive recorded how it ended
                pass
            finally:
                _THREADS.pop(job.id, None)

    thread = threading.Thread(target=work, name=f"job-{job.id}", daemon=True)
    _THREADS[job.id] = thread
    thread.start()
    return job


def running_here() -> list[str]:
    """Ids of the jobs running in threads of this process (work a page or a command started here)."""
    return list(_THREADS)


def wait_here(job_id: str, timeout: float | None = None) -> bool:
    """Wait for a job running in a thread of this process; True when it has ended (or never ran here)."""
    thread = _THREADS.get(job_id)
    if thread is not None:
        thread.join(timeout)
        return not thread.is_alive()
    return True


BACKGROUND_NICE = 10  # a submitted job yields the CPU to interactive work (the app's own requests)


def _lower_priority() -> None:
    """Run this driver, and the local Ray instance and workers it starts (they inherit it), at a lower CPU
    priority than the app that submitted it: on a machine with few cores, a session's DPA then waits less
    for a long job. With autogroup scheduling (Linux desktops and servers) priority is per session group,
    and the driver has a session of its own, so the group's nice value is set as well."""
    try:
        os.nice(BACKGROUND_NICE)
    except OSError:
        pass
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(BACKGROUND_NICE))
    except OSError:  # no autogroup here, or not allowed: the process nice value is what counts then
        pass


def drive_recorded(root: str, job_id: str, warm: int | None = None) -> None:
    """``python -m workbench.scheduler ROOT ID [--warm=OWNER]``: become the driver of a recorded job and run it to
    its end; with ``warm`` (the owner's pid), on the warm local instance (workbench/scheduler/warm.py) when Ray was
    not asked for."""
    if warm is None:  # a warm instance's driver only waits on the actor: lowered, it missed Ray's 5 s limits
        _lower_priority()
    else:
        # Ray 2.60 starts a local instance with token authentication (the token in ~/.ray/auth_token): this
        # driver, and the host it may start (which inherits this), must use it; Ray reads it when imported
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    _WARM[0] = warm
    board = JobBoard(root)
    job = board.get(job_id)
    job.driver = this_driver()
    board.write(job)
    try:
        drive(job, board)
    except BaseException:
        pass  # drive recorded how it ended
    finally:
        if warm is not None:
            touch(board.root)  # the instance's idle time starts now
