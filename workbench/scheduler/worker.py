"""The worker's side of a job on Ray: how a local instance starts its workers (LEAN_RAY), and what a worker runs
for one shard (``shard_events``: the kind's engine call in a thread, its progress relayed as events). Used by the
runner's shard tasks and by the warm instance's model actors (workbench/scheduler/warm.py) alike."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from workbench.scheduler.kinds import get_kind

POLL_S = 0.2  # how often the driver looks for progress and cancel requests
# A local instance starts no idle workers ahead of need (Ray prestarts one a CPU, each a Python process of about
# 80 MB that a one-shard job never uses): workers start with the first task that needs one (about a second).
# Measured on 2 cores: 9 processes and 651 MB RSS idle with prestart, 7 and 490 MB without
# (results/app/ray_footprint.md).
# WORKBENCH_RAY_PRESTART=1 restores Ray's prestarting (a first task a second sooner, for ~80 MB a core).
LEAN_RAY = ({} if os.environ.get("WORKBENCH_RAY_PRESTART") == "1"
            else {"prestart_worker_first_driver": False, "enable_worker_prestart": False})


class Report:
    """The progress callback a shard's engine call gets: total(n) once known, step(n) as items finish,
    note(text) for a line in the job's log (a finished unit and its time: commands print it as it comes)."""

    def __init__(self, on_total: Callable[[int], None], on_step: Callable[[int], None],
                 on_note: Callable[[str], None] | None = None) -> None:
        self.total, self.step = on_total, on_step
        self._note = on_note

    def note(self, text: str) -> None:
        if self._note is not None:
            self._note(text)


def shard_events(spec: dict[str, Any], shard: Any):
    """Runs in a Ray worker: the shard's engine call in a thread, its progress yielded as events
    ("start", pid), ("total", n), ("step", n), then ("part", part). Steps are batched every 0.2 s."""
    events: queue.Queue = queue.Queue()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["part"] = get_kind(spec["kind"]).run_shard(
                spec, shard, Report(on_total=lambda n: events.put(("total", n)),
                                    on_step=lambda n: events.put(("step", n)),
                                    on_note=lambda text: events.put(("log", text))))
        except BaseException as exc:  # re-raised in the task below, so Ray carries it to the driver
            box["error"] = exc
        finally:
            events.put(None)

    yield ("start", os.getpid())
    threading.Thread(target=work, daemon=True).start()
    try:
        yield from _relay(events)
    except KeyboardInterrupt:  # ray.cancel: leave now; the process exit frees all the work thread holds
        os._exit(1)
    if "error" in box:
        raise box["error"]
    yield ("part", box["part"])


def _relay(events: queue.Queue):
    """The work thread's events until it ends (None); steps within POLL_S become one event. The wait is in
    short slices, so an interrupt (ray.cancel) reaches this thread at once."""
    finished = False
    while not finished:
        try:
            item = events.get(timeout=POLL_S)
        except queue.Empty:
            continue
        steps, batch_end = 0, time.monotonic() + POLL_S
        while True:  # many small steps within POLL_S become one event
            if item is None:
                finished = True
                break
            if item[0] == "step":
                steps += item[1]
            else:
                if steps:  # the steps before a note first: its line then counts them
                    yield ("step", steps)
                    steps = 0
                yield item
            try:
                item = events.get(timeout=max(0.0, batch_end - time.monotonic()))
            except queue.Empty:
                break
        if steps:
            yield ("step", steps)
