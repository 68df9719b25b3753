"""Toy tasks: deterministic (seeded) generators with disjoint train/test splits.

A toy model is defined by its task (vocabulary, context length, how its inputs are drawn), so the generators
live in the ground beside the toy models (core.models.toy) and their checkpoints (core.models.toy_checkpoint):
a loaded toy model carries its task (``model.info["task_source"]``). Training, findings and analysis on them are
circuits/toy/.

Every task returns a :class:`Batch`: ``tokens`` [batch, seq] (ids into ``task.vocab``; float
inputs [batch, seq, d_in] for regression), ``targets`` [batch, seq] and ``mask`` [batch, seq]
marking the positions that carry a loss (the model's prediction *at* that position is scored).
"""

from __future__ import annotations

from typing import Any

from core.errors import WorkbenchError
from core.models.toy_tasks import carry, histogram, icl_regression, ioi, markov, modadd
from core.models.toy_tasks.base import Batch, Task, UnknownTaskError

__all__ = ["TASKS", "Batch", "Task", "UnknownTaskError", "get_task"]

TASKS = ("ioi", "modadd", "carry", "histogram", "markov", "icl-regression")


def get_task(name: str, **params: Any) -> Task:
    """A task by name, with its parameters (the defaults reproduce the shipped checkpoints)."""
    table = {
        "ioi": ioi.IOITask,
        "modadd": modadd.ModAddTask,
        "carry": carry.CarryTask,
        "histogram": histogram.HistogramTask,
        "markov": markov.MarkovTask,
        "icl-regression": icl_regression.ICLRegressionTask,
    }
    if name not in table:
        raise UnknownTaskError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    try:
        return table[name](**params)
    except TypeError as exc:
        raise WorkbenchError(f"bad parameters for task {name}: {exc}") from None
