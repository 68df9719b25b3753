"""The scheduler's one error, below its board, specs and runner (each of them raises it)."""

from __future__ import annotations

from core.errors import WorkbenchError


class JobError(WorkbenchError):
    """An unknown job id, a job that cannot be cancelled, an unreachable Ray address."""
