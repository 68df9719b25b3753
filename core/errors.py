"""Typed errors. The CLI turns any WorkbenchError into one line on stderr and exit code 2."""

from __future__ import annotations


class WorkbenchError(Exception):
    """Bad input or an unusable resource; the message is one line meant for a person."""


class UnknownModelError(WorkbenchError):
    pass


class ModelFileError(WorkbenchError):
    """A missing, unreadable, truncated or corrupt model file or directory."""


class PromptError(WorkbenchError):
    """Empty prompt, or a prompt longer than the model's context."""


class TokenError(WorkbenchError):
    """Target or foil that is not exactly one token, or foil equal to target."""


class RangeError(WorkbenchError):
    """Layer, head or neuron index outside the model."""


class MethodError(WorkbenchError):
    """Unknown method, or a level the method does not provide."""


class BackendError(MethodError):
    """An engine that does not run on a model's backend, or an unknown backend: one line naming both."""


class DeviceError(WorkbenchError):
    """A device that is unknown, or absent here (``cuda`` on a machine without CUDA)."""


class RunStoreError(WorkbenchError):
    """Missing run, or a run store that cannot be written."""


class DatasetError(WorkbenchError):
    """Unreadable or unusable dataset file."""


class NonFiniteError(WorkbenchError):
    """A NaN or Infinity in a parameter, an input or a result: refused, never printed or saved."""


class DiskFullError(WorkbenchError):
    """A write that ran out of space (ENOSPC, EDQUOT): "no space left on device at PATH", nothing partial kept."""


class ExportError(WorkbenchError):
    """An export or import refused: unknown format, a kind the format cannot hold, a bad output path, a
    damaged or foreign graph file."""


class OutputError(WorkbenchError):
    """An output path that cannot be written (missing or unwritable folder, a system folder, wrong kind)."""


class CostError(RangeError):
    """A size, count or time beyond what this machine can hold, or that would take hours unasked."""


class ArgumentError(WorkbenchError, ValueError):
    """A notebook-API argument whose value is out of range or not one of its choices (workbench/arguments.py)."""


class ArgumentTypeError(WorkbenchError, TypeError):
    """A notebook-API argument of the wrong type, missing, or an unknown keyword (workbench/arguments.py)."""


def check_range(what: str, value: int, upper: int) -> int:
    """Raise RangeError unless 0 <= value < upper."""
    if not 0 <= int(value) < upper:
        raise RangeError(f"{what} {value} out of range: the model has {upper} (valid 0..{upper - 1})")
    return int(value)
