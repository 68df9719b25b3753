"""Jobs: long work (faithfulness, prompt sets, activation patching, ...) run outside the caller, with
progress, cancellation and a run in the store at the end. See workbench/jobs/runner.py for how they run
(here, or on Ray) and workbench/jobs/kinds.py for what each kind of job does."""

from typing import Any

from workbench.callable_package import make_callable
from workbench.jobs.board import Job, JobBoard, JobError, jobs_root
from workbench.jobs.runner import JobCancelled, JobFailed, resolve_address, run, submit

__all__ = ["Job", "JobBoard", "JobError", "JobCancelled", "JobFailed", "jobs_root", "resolve_address", "run",
           "submit"]


def _board(root: Any = None) -> JobBoard:
    return JobBoard(root)


# ``wb.jobs()`` and the package workbench.jobs are one name (workbench/callable_package.py)
make_callable(__name__, "_jobs_facade", _board)
