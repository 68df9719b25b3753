"""``workbench jobs list|show|cancel``: long work run as jobs (see workbench/scheduler), and the options and
progress display that long commands share (``--ray-address``, ``--workers``)."""

from __future__ import annotations

from typing import Any

import typer

from core.options import positive_int
from workbench.commands.common import JSON_OPTION, console, emit, emit_damaged, finish_listing

RAY_ADDRESS_OPTION = typer.Option(
    None, "--ray-address", help="Run on the Ray cluster at HOST:PORT (its GCS, e.g. HEAD:6379; or auto); 'local' "
    "starts a local Ray instance. Default: WORKBENCH_RAY_ADDRESS, else this process (or a local Ray instance when "
    "--workers > 1).")
def workers_option(what: str = "the prompts") -> Any:
    """``--workers N`` of a command whose work splits into ``what``."""
    return typer.Option(1, "--workers", callback=positive_int,
                        help=f"Ray workers to split {what} among, each holding the model once "
                        "(1: run in this process unless --ray-address is given).")


WORKERS_OPTION = workers_option()


def register(app: typer.Typer) -> None:
    jobs = typer.Typer(help="List, show and cancel jobs (long work run by the app, the CLI or a notebook).",
                       no_args_is_help=True)
    jobs.command("list")(jobs_list)
    jobs.command("show")(jobs_show)
    jobs.command("cancel")(jobs_cancel)
    app.add_typer(jobs, name="jobs")


def jobs_list(
    damaged: bool = typer.Option(False, "--damaged", help="List the damaged job records instead (unreadable, "
                                 "or fields of the wrong type): id, reason, path."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Every job, newest first: id, state, progress, time left, run (damaged records: --damaged)."""
    from workbench.scheduler import JobBoard

    board = JobBoard()
    jobs, bad = board.scan()
    if damaged:
        emit_damaged(bad, as_json, "no damaged job records")
        return
    rows = [j.summary() for j in jobs]

    def human(rows: list[dict[str, Any]]) -> None:
        from workbench.commands.common import print_table

        if not rows:
            print("no jobs")
        else:
            # 80 columns: the job id whole with its label under it, the run by its shortest unique prefix
            # (every command takes one), not the 35-character id beside a 35-character job id
            prefix = _run_prefixes([r["run_id"] for r in rows if r["run_id"]])
            import textwrap

            id_width = max(len(r["id"]) for r in rows)
            table = []
            for r in rows:
                label = "\n".join(textwrap.wrap(r["label"], id_width, initial_indent="  ", subsequent_indent="  "))
                left = f" {r['eta_s']:.0f}s left" if r["eta_s"] is not None and r["state"] == "running" else ""
                done = f" {r['done']}/{r['total']}" if r["total"] else ""
                table.append([f"{r['id']}\n{label}", r["state"], f"{100 * r['fraction']:.0f}%{done}{left}",
                              prefix.get(r["run_id"], "") if r["run_id"] else ""])
            print_table(["id", "state", "progress", "run"], table, whole=("id", "run"))

    finish_listing(rows, bad, as_json, human, "skipped",
                   "damaged job record(s) skipped; see `workbench jobs list --damaged`")


def _run_prefixes(run_ids: list[str], shortest: int = 15) -> dict[str, str]:
    """Each run id's shortest prefix (at least its date and time) that no other stored run id starts with."""
    from core.store import RunStore

    try:
        store = RunStore()
        ids = {r["id"] for r in store.list()} | {r["id"] for r in store.damaged()}
    except Exception:  # the board must list even when the store cannot be read; ids are then whole
        return {r: r for r in run_ids}
    out = {}
    for run_id in run_ids:
        n = min(shortest, len(run_id))
        while n < len(run_id) and any(i != run_id and i.startswith(run_id[:n]) for i in ids):
            n += 1
        out[run_id] = run_id[:n]
    return out


JOB_ID_ARGUMENT = typer.Argument(..., help="Job id, or a unique prefix of one.")


def jobs_show(job_id: str = JOB_ID_ARGUMENT,
              as_json: bool = JSON_OPTION) -> None:
    """One job: its spec, state, progress, error and log."""
    from workbench.scheduler import JobBoard

    board = JobBoard()
    job = board.get(board.resolve_id(job_id)).public()
    if isinstance(job["spec"].get("rows"), list):  # a prompt set inline: its size is enough here
        job["spec"] = {**job["spec"], "rows": f"{len(job['spec']['rows'])} rows"}

    def human(j: dict[str, Any]) -> None:
        for key in ("id", "label", "state", "created", "started", "finished", "workers", "ray_address",
                    "run_id", "error"):
            if j.get(key) is not None:
                print(f"{key}: {j[key]}")
        print(f"progress: {100 * j['fraction']:.1f}% ({j['done']}/{j['total']})"
              + (f", {j['eta_s']:.0f} s left" if j["eta_s"] is not None and j["state"] == "running" else ""))
        print("log:")
        for line in j["log"]:
            print(f"  {line}")

    emit(job, as_json, human)


def jobs_cancel(job_id: str = JOB_ID_ARGUMENT,
                as_json: bool = JSON_OPTION) -> None:
    """Cancel a queued or running job: its workers stop within a couple of seconds; nothing is saved."""
    from workbench.scheduler import JobBoard

    board = JobBoard()
    job = board.request_cancel(board.resolve_id(job_id))
    emit({"cancelling": job.id}, as_json, lambda r: print(f"cancelling {r['cancelling']}"))


class ProgressLines:
    """Plain progress lines on stderr, on a terminal or not (a run scripted to a log file reports as it goes):
    every new line of the job's log (a finished unit and its time, e.g. a bench cell's level) with the count
    done and the estimate of what is left; for a kind that logs no units, a count line at most every
    ``EVERY_S`` while items finish."""

    EVERY_S = 30.0
    # with no line for QUIET_S (one unit running for minutes), ``beat`` says the job is still working, so a log
    # file shows a line at least every minute
    QUIET_S = 50.0
    # the runner's own notes that say nothing of the work; the estimate, which run_job prints itself once the
    # job's inputs are checked (never before an error)
    SKIP = ("started (pid", "estimate:")

    def __init__(self, err: Any) -> None:
        import threading
        import time

        # the first count line comes after EVERY_S of work: a short job (or one refused at once) prints none
        self.err, self.seen, self.t0, self.done = err, "", time.monotonic(), 0
        self.last = self.t0
        self.job: Any = None  # the job as last shown (the heartbeat reports it)
        self.lock = threading.Lock()  # show (the job's thread) and beat (the heartbeat's) both print

    def beat(self, now: float | None = None) -> None:
        """A "working" line with the count and the estimate, when the job has shown itself and no line came for
        QUIET_S seconds."""
        import time

        from core.progress import unit_line

        now = time.monotonic() if now is None else now
        with self.lock:
            job = self.job
            if job is None or now - self.last < self.QUIET_S:
                return
            self._print(unit_line(f"{job.kind.replace('_', '-')}: working", None, job.done, job.total,
                                  now - self.t0, job.eta_s))
            self.last = now

    def show(self, job: Any) -> None:
        with self.lock:
            self._show(job)

    def _show(self, job: Any) -> None:
        import time

        from core.progress import unit_line

        self.job = job
        now = time.monotonic()
        log = list(job.log)
        new = log[log.index(self.seen) + 1:] if self.seen in log else log
        if log:
            self.seen = log[-1]
        units = [line.split(" ", 1)[-1] for line in new if not any(s in line for s in self.SKIP)]
        if not units and job.done > self.done and now - self.last >= self.EVERY_S:
            units = [job.kind.replace('_', '-')]
        for unit in units:
            self._print(unit_line(unit, None, job.done, job.total, now - self.t0, job.eta_s))
            self.last = now
        self.done = job.done

    def _print(self, line: str) -> None:
        import sys

        try:
            if self.err.is_terminal:
                self.err.print(line, highlight=False, markup=False)  # above the bar
            else:
                print(line, file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed or full: progress is never worth a failure
            pass


def run_job(spec: Any, workers: int, ray_address: str | None, save: bool = True) -> tuple[Any, Any]:
    """Run a job (a JobSpec of workbench/scheduler/specs.py) from a command with a progress bar on stderr: (job,
    result). Ctrl-C cancels it. Its estimate (when one can be made: see workbench/scheduler/kinds.py) is printed once
    the job has read and checked its inputs (its first shard knows how many items it has), so bad input is only
    ever its one error line."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from core.progress import Heartbeat
    from workbench.scheduler import resolve_address, run
    from workbench.scheduler.kinds import estimate
    from workbench.scheduler.runner import check_ray_env, check_reachable
    from workbench.scheduler.specs import as_dict

    spec = as_dict(spec)

    address = resolve_address(ray_address)
    if address is not None:
        check_reachable(address)  # an address that does not answer fails before anything is loaded
    check_ray_env(address, workers)  # so does a RAY_ADDRESS that would take local workers elsewhere
    here = workers == 1 and address is None
    # A first job of its shape may be measured now (activation patching times one batch): that loads the model
    # here, kept when the job then runs here and let go when workers will hold their own copies.
    cost = estimate(spec, workers, measure=True)
    if not here:
        from workbench.scheduler import kinds

        kinds.release_models()
    said = [cost is None]

    def say_estimate() -> None:
        if not said[0]:
            said[0] = True
            console().print(f"estimate: {cost.text()}")

    err = console()
    # not on a terminal (a pipe, a log): no bar, so nothing (not even its closing newline) lands before an error
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(spec["kind"].replace("_", "-"), total=None)

        lines = ProgressLines(err)

        def show(job: Any) -> None:
            if job.total:
                say_estimate()
            bar.update(task, total=job.total or None, completed=job.done,
                       description=f"{spec['kind'].replace('_', '-')} [{job.id}]")
            lines.show(job)

        with Heartbeat(lines.beat):
            out = run(spec, workers=workers, address=ray_address, save=save, on_progress=show)
    say_estimate()  # a kind that never reported its items: said at the end, never before an error
    return out
