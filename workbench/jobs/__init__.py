"""Jobs: long work (faithfulness, prompt sets, activation patching, ...) run outside the caller, with
progress, cancellation and a run in the store at the end. See workbench/jobs/runner.py for how they run
(here, or on Ray) and workbench/jobs/kinds.py for what each kind of job does."""

import sys
import types
from typing import Any

from workbench.jobs.board import Job, JobBoard, JobError, jobs_root
from workbench.jobs.runner import JobCancelled, JobFailed, resolve_address, run, submit

__all__ = ["Job", "JobBoard", "JobError", "JobCancelled", "JobFailed", "jobs_root", "resolve_address", "run",
           "submit"]


def _board(root: Any = None) -> JobBoard:
    return JobBoard(root)


def _facade() -> Any:
    """The notebook facade's ``jobs`` function (workbench/__init__.py keeps it as ``_jobs_facade``)."""
    return getattr(sys.modules["workbench"], "_jobs_facade", _board)


class _CallablePackage(types.ModuleType):
    """This package, callable as the facade's ``wb.jobs()``. Once a package is imported Python makes it an
    attribute of its parent, so ``workbench.jobs`` names this package from then on, where the facade function
    stood (a second ``wb.jobs()`` was "'module' object is not callable"). Calling the package calls that
    function, argument checks included; ``workbench.jobs.submit`` and friends still work as attributes."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _facade()(*args, **kwargs)

    @property
    def __wrapped__(self) -> Any:  # inspect.signature(wb.jobs) gives the function's
        return _facade()

    @property
    def __checks__(self) -> Any:  # the facade's argument rules (workbench/arguments.py), as on the function
        return getattr(_facade(), "__checks__", None)


sys.modules[__name__].__class__ = _CallablePackage
