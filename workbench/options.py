"""Range checks of numeric command-line options, in one place, run at parse time.

Every numeric option of every command takes one of these as its typer ``callback=``, so a bad
value (negative count, zero batch, NaN or Infinity, a port past 65535) is refused with one line
and exit code 2 before any model is loaded or any work is done::

    top: int = typer.Option(10, "--top", callback=positive_int)
    lr: float = typer.Option(1e-3, "--lr", callback=positive_float)

The same checks are available to code (``check_number``) and to ``--param key=value`` parsers
(``finite_param``), so a value is judged the same way wherever it comes from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from workbench.errors import NonFiniteError, WorkbenchError


def number_problem(value: Any, *, integer: bool = False, lo: float | None = None, hi: float | None = None,
                   lo_open: bool = False) -> str | None:
    """Why ``value`` is not an acceptable number (None when it is)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number (got {value!r})"
    if not math.isfinite(value):
        return f"must be a finite number (got {value})"
    if integer and int(value) != value:
        return f"must be a whole number (got {value})"
    if lo is not None and (value <= lo if lo_open else value < lo):
        return f"must be {'>' if lo_open else '>='} {_fmt(lo)} (got {_fmt(value)})"
    if hi is not None and value > hi:
        return f"must be <= {_fmt(hi)} (got {_fmt(value)})"
    return None


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def check_number(what: str, value: Any, **limits: Any) -> Any:
    """``value`` if acceptable, else a WorkbenchError naming ``what`` (NonFiniteError for NaN/Inf)."""
    why = number_problem(value, **limits)
    if why is None:
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise NonFiniteError(f"{what} {why}")
    raise WorkbenchError(f"{what} {why}")


def _callback(**limits: Any) -> Callable[..., Any]:
    def callback(ctx, param, value):
        import typer

        if getattr(ctx, "resilient_parsing", False) or value is None:
            return value
        for v in value if isinstance(value, (list, tuple)) else [value]:
            why = number_problem(v, **limits)
            if why is not None:
                raise typer.BadParameter(why)
        return value

    return callback


def int_range(lo: int | None = None, hi: int | None = None) -> Callable[..., Any]:
    """A whole number in [lo, hi] (either end open when None)."""
    return _callback(integer=True, lo=lo, hi=hi)


def float_range(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[..., Any]:
    """A finite number in [lo, hi] ((lo, hi] with lo_open)."""
    return _callback(lo=lo, hi=hi, lo_open=lo_open)


positive_int = int_range(1)  # counts, sizes, steps, batch sizes
nonneg_int = int_range(0)  # seeds, indices, "0 = default / none"
finite_float = float_range()  # any finite number (a steering scale may be negative)
positive_float = float_range(0.0, lo_open=True)  # learning rates, epochs
nonneg_float = float_range(0.0)  # noise scales, regularisers, weight decay
fraction = float_range(0.0, 1.0)  # a proportion in [0, 1]
port = int_range(1, 65535)


def parse_layer_spec(spec: str) -> list[int] | None:
    """'all' -> None; '3', '0,5,10', '4-8' -> indices (ascending ranges, no negatives, no repeats);
    RangeError otherwise. The model's layer count is checked by the caller."""
    from workbench.errors import RangeError

    text = spec.strip()
    if text == "all":
        return None
    out: list[int] = []
    for part in text.split(","):
        a, dash, b = part.strip().partition("-")
        if not a.strip().isdigit() or (dash and not b.strip().isdigit()):
            raise RangeError(f"bad layers {spec!r}: write all, 5, 0,5,10 or 4-8 (layers count from 0)")
        lo, hi = int(a), int(b) if dash else int(a)
        if hi < lo:
            raise RangeError(f"bad layers {spec!r}: the range {lo}-{hi} runs backwards (write {hi}-{lo})")
        out.extend(i for i in range(lo, hi + 1) if i not in out)
    return out


def layers_option(ctx, param, value):
    """typer callback for --layers / --steer-layers specs."""
    import typer

    if value is None or getattr(ctx, "resilient_parsing", False):
        return value
    try:
        parse_layer_spec(value)
    except WorkbenchError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


# Method parameters that count something (integration steps, batch sizes, samples): whole numbers >= 1.
COUNT_PARAMS = frozenset({"steps", "internal_batch_size", "batch_size", "sample", "samples", "n_samples"})


def finite_param(option: str, key: str, value: Any) -> Any:
    """A ``--param`` value: numbers must be finite (``w_q=nan``, ``steps=inf`` are refused), and a count
    (COUNT_PARAMS: ``steps=1.5``, ``steps=0``) a whole number >= 1."""
    if isinstance(value, float) and not math.isfinite(value):
        raise NonFiniteError(f"{option} {key}={value}: not a finite number")
    if key.rpartition(".")[2] in COUNT_PARAMS and not isinstance(value, bool) and isinstance(value, (int, float)) \
            and (value != int(value) or value < 1):
        raise WorkbenchError(f"{option} {key}={value}: must be a whole number >= 1")
    if isinstance(value, (list, tuple)):
        for v in value:
            finite_param(option, key, v)
    if isinstance(value, dict):
        for k, v in value.items():
            finite_param(option, f"{key}.{k}", v)
    return value


def check_argv(argv: list[str]) -> None:
    """Every command-line argument must be UTF-8 text (Python keeps undecodable bytes as lone
    surrogates, which fail later, deep inside a tokenizer)."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")[:60]
            raise WorkbenchError(f"argument {i} is not valid UTF-8 text: {shown!r}") from None


def first_non_finite(obj: Any, path: str = "") -> str | None:
    """The path of the first NaN or Infinity inside a JSON-like value or tensor (None if all finite)."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, bytes, int)):
        return None
    if isinstance(obj, float):
        return None if math.isfinite(obj) else f"{path or 'value'} = {obj}"
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = first_non_finite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
        return None
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = first_non_finite(v, f"{path}[{i}]")
            if found:
                return found
        return None
    if hasattr(obj, "is_floating_point") and hasattr(obj, "isfinite"):  # a torch tensor
        if obj.is_floating_point() or obj.is_complex():
            bad = ~obj.detach().isfinite()
            if bool(bad.any()):
                idx = [int(i) for i in bad.nonzero()[0].tolist()]
                return f"{path or 'tensor'}{idx} = {obj.detach()[tuple(idx)].item()} ({int(bad.sum())} non-finite)"
        return None
    if hasattr(obj, "dtype") and hasattr(obj, "shape") and hasattr(obj, "tolist"):  # numpy
        import numpy as np

        arr = np.asarray(obj)
        if arr.dtype.kind in "fc":
            bad = ~np.isfinite(arr)
            if bad.any():
                idx = [int(i) for i in np.argwhere(bad)[0]] if arr.ndim else []
                return f"{path or 'array'}{idx} = {arr[tuple(idx)]} ({int(bad.sum())} non-finite)"
        return None
    if hasattr(obj, "item") and hasattr(obj, "dtype"):  # numpy scalar
        return first_non_finite(obj.item(), path)
    return None


def check_finite(what: str, obj: Any) -> Any:
    """``obj`` unchanged, or NonFiniteError naming where the first NaN/Infinity sits."""
    found = first_non_finite(obj)
    if found:
        raise NonFiniteError(f"{what} is not finite: {found}")
    return obj
