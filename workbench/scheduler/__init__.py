"""Jobs: long work (faithfulness, prompt sets, activation patching, ...) run outside the caller, with
progress, cancellation and a run in the store at the end. See workbench/scheduler/runner.py for how they run
(here, or on Ray) and workbench/scheduler/kinds.py for what each kind of job does."""

from workbench.scheduler.board import Job, JobBoard, jobs_root
from workbench.scheduler.errors import JobError
from workbench.scheduler.runner import JobCancelled, JobFailed, resolve_address, run, submit

__all__ = ["Job", "JobBoard", "JobError", "JobCancelled", "JobFailed", "jobs_root", "resolve_address", "run",
           "submit"]

