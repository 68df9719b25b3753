"""A warm local Ray instance for the jobs the app (or a notebook) submits: started once, reused by later jobs,
shut down when idle.

Its host is a process of its own (``python -m workbench.scheduler.warm ROOT``) that starts a local Ray instance
(the instance lives as long as the host does), records its address in ``<jobs>/ray-warm.json`` and ends it
after IDLE_S without a job, or when the app it serves is gone. A job's driver (``python -m workbench.scheduler
ROOT ID --warm=OWNER``, started by the app's ``submit``) connects to it
instead of starting an instance of its own, and runs a one-shard job of a model on that model's actor
(``ModelHost``, named after the model, in the ``workbench`` namespace): the actor imported the engines and
loaded the model for an earlier job, so a later job starts in seconds, not in an import of everything and
a model load. Sharded jobs run as tasks on the same instance. Whatever goes wrong here, the caller falls back
to an instance of its own (or to running in its driver): a warm instance is a speed-up, never a dependency.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from core.checks import read_json
from core.errors import WorkbenchError
from core.store import pid_alive, write_atomic
from workbench.scheduler.board import ACTIVE, JobBoard, driver_alive, this_driver
from workbench.scheduler.errors import JobError
from workbench.scheduler.kinds import worker_model
from workbench.scheduler.worker import LEAN_RAY, shard_events

RECORD = "ray-warm.json"
USED = "ray-warm.used"  # touched by every driver that uses the instance: its mtime is the last use
IDLE_S = 600.0  # an instance with no job for this long is shut down (WORKBENCH_RAY_IDLE_S overrides)
START_S = 120.0  # how long a caller waits for a new instance to answer
NAMESPACE = "workbench"


def idle_seconds() -> float:
    try:
        return max(5.0, float(os.environ.get("WORKBENCH_RAY_IDLE_S", IDLE_S)))
    except ValueError:
        return IDLE_S


def _read(root: Path) -> dict[str, Any] | None:
    if not (root / RECORD).exists():
        return None
    try:
        data = read_json(root / RECORD, "the warm Ray instance's record", WorkbenchError, max_bytes=2**20)
    except WorkbenchError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("address"), str) else None


def live(root: str | Path) -> dict[str, Any] | None:
    """The warm instance's record when its host still runs (on this host), else None."""
    data = _read(Path(root))
    if data is None or not isinstance(data.get("host"), dict) or not driver_alive(data["host"]):
        return None
    return data


def touch(root: str | Path) -> None:
    try:
        (Path(root) / USED).touch()
    except OSError:
        pass


def ensure(root: str | Path, owner: int | None = None, timeout: float = START_S) -> str:
    """The warm instance's address, starting its host if none runs (it ends once idle, or once ``owner``,
    the app server's pid, has gone). JobError when it does not come up."""
    root = Path(root)
    data = live(root)
    if data is not None:
        touch(root)
        return data["address"]
    root.mkdir(parents=True, exist_ok=True)
    lock = root / "ray-warm.starting"
    try:  # one starter at a time; a starter that died leaves a lock older than START_S, taken over
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.close(fd)
        mine = True
    except FileExistsError:
        mine = time.time() - lock.stat().st_mtime > START_S
        if mine:
            lock.touch()
    try:
        if mine:
            with open(root / "ray-warm.log", "ab") as log:
                subprocess.Popen([sys.executable, "-m", "workbench.scheduler.warm", str(root), str(owner or 0)],
                                 stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            data = live(root)
            if data is not None:
                touch(root)
                return data["address"]
            time.sleep(0.2)
        raise JobError(f"the warm Ray instance did not start within {timeout:.0f} s (see {root / 'ray-warm.log'})")
    finally:
        if mine:
            lock.unlink(missing_ok=True)


# -- the actor that keeps a model loaded ----------------------------------------------------------------
class ModelHost:
    """One model, loaded once, running job shards one after another (see worker.shard_events)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        worker_model(spec)

    def pid(self) -> int:
        return os.getpid()

    def run(self, spec: dict[str, Any], shard: Any):
        yield from shard_events(spec, shard)


def actor_name(spec: dict[str, Any]) -> str:
    return f"model:{spec['model']}|{spec.get('device', 'cpu')}|{spec.get('dtype')}"


def model_actor(spec: dict[str, Any], resources: dict[str, float]) -> Any:
    """The running actor of the spec's model, created on first use (it lives as long as the instance)."""
    import ray

    # no CPU held for its lifetime (it would starve tasks on a small machine); GPUs are held
    cls = ray.remote(max_restarts=0, max_concurrency=1)(ModelHost)
    return cls.options(name=actor_name(spec), namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                       num_cpus=0, num_gpus=resources.get("num_gpus", 0)).remote(
        {k: spec[k] for k in ("model", "device", "dtype", "threads") if k in spec})


# -- the host process -----------------------------------------------------------------------------------
def _active_jobs(root: Path) -> bool:
    try:
        return any(j.state in ACTIVE for j in JobBoard(root).list())
    except Exception:  # noqa: BLE001 - an unreadable board is no reason to stay up
        return False


def host(root: str | Path, owner: int = 0) -> None:
    """Start the instance, record it, and end it after idle_seconds() without a job, or once ``owner`` (a
    pid; 0: none) has exited: a warm instance never outlives the app it was started for."""
    import signal

    import ray

    root = Path(root)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: end the instance on the way out
    # At normal priority, in a session (a scheduling group) of its own: on a busy machine Ray's agents must
    # start within its limits, and its GCS answer a driver's connection within five seconds (with the group's
    # priority lowered, as a driver's is, both failed under a load of 10 on two cores).

    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, namespace=NAMESPACE, logging_level="ERROR",
             log_to_driver=False, _system_config=LEAN_RAY)  # no prestarted idle workers
    address = ray.get_runtime_context().gcs_address

    write_atomic(root / RECORD, json.dumps({"address": address, "host": this_driver(), "started": time.time()}),
                 "the warm Ray instance's record", JobError)
    touch(root)
    try:
        while True:
            time.sleep(2.0)
            try:
                last = (root / USED).stat().st_mtime
            except OSError:
                last = 0.0
            if owner and not pid_alive(owner):
                break
            if _active_jobs(root):
                touch(root)
            elif time.time() - last > idle_seconds():
                break
            if _read(root) is None or _read(root)["address"] != address:
                break  # the record was removed or replaced: this instance is no longer the warm one
    finally:
        data = _read(root)
        if data is not None and data.get("address") == address:
            (root / RECORD).unlink(missing_ok=True)
        ray.shutdown()


if __name__ == "__main__":
    host(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    sys.stdout.flush()
    os._exit(0)
