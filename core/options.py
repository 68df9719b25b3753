"""Range checks of numeric command-line options, in one place, run at parse time.

Every numeric option of every command takes one of these as its typer ``callback=``, so a bad
value (negative count, zero batch, NaN or Infinity, a port past 65535) is refused with one line
and exit code 2 before any model is loaded or any work is done::

    top: int = typer.Option(10, "--top", callback=positive_int)
    lr: float = typer.Option(1e-3, "--lr", callback=positive_float)

The same checks are available to code (``check_number``) and to ``--param key=value`` parsers
(``finite_param``), so a value is judged the same way wherever it comes from.

Sizes have upper bounds too, in one table (``BOUNDS``): every whole-number option is at most ``INT_CAP``
unless the table names it, a thread count at most this machine's cores, a seed 32 bits; an entry's ``long``
is where the work would take hours, refused (with the estimate) unless the command's ``--allow-long`` is given.
Bounds that need the model (its context, its width) are checked by the commands with ``check_memory`` and
``check_long`` once the model's facts are known, before anything big is allocated. Every output path goes
through ``check_output`` before the work starts; every comma-separated list through ``split_list``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import CostError, NonFiniteError, OutputError, RangeError, WorkbenchError


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
            why = number_problem(v, **limits) or bound_problem(ctx, param, v, integer=limits.get("integer", False))
            if why is not None:
                raise typer.BadParameter(why)
        return value

    return callback


# -- upper bounds: one table -------------------------------------------------------------------------------

def cpu_cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Bound:
    """An option's upper limit. ``hi``: the most it may be (a number, or a function of the machine), ``why``
    what that follows from; ``long``: beyond it the work takes hours, so it needs --allow-long; ``rate``:
    seconds per unit on this kind of machine (2 CPU cores), for the estimate; ``unit``: what is counted."""

    hi: float | Callable[[], float]
    why: str
    long: float | None = None
    rate: float | None = None
    unit: str = ""

    def limit(self) -> float:
        return self.hi() if callable(self.hi) else self.hi


INT_CAP = 1_000_000  # every whole-number option not in BOUNDS: no count here needs more, and none overflows
BOUNDS: dict[str, Bound] = {
    # machine
    "--threads": Bound(cpu_cores, "this machine's CPU cores (more threads only wait for each other)"),
    "--workers": Bound(256, "Ray workers each hold the model once"),
    "--seed": Bound(2**32 - 1, "seeds are 32-bit numbers"),
    "--batch-size": Bound(4_096, "items in one forward pass (its memory grows with them)"),
    "train --batch-size": Bound(65_536, "a batch larger than any toy task's train split"),
    "sae train --batch-size": Bound(65_536, "activations per training step"),
    "sae cache --batch-size": Bound(256, "windows in one forward pass (its memory grows with them)"),
    "sae dashboards --batch-size": Bound(256, "windows in one forward pass (its memory grows with them)"),
    "sae explain --batch-size": Bound(256, "windows in one forward pass (its memory grows with them)"),
    "lens-train --batch-windows": Bound(256, "128-token windows in one forward pass"),
    "lens-train --kl-batch": Bound(65_536, "tokens per KL step"),
    "--ctx": Bound(131_072, "longer than any model's context here"),
    "--position": Bound(INT_CAP, "longer than any model's context here"),
    "--feature": Bound(2**26, "wider than any dictionary"),
    "--max-new-tokens": Bound(131_072, "longer than any model's context here (the model's own is checked next)"),
    # times
    "--fit-seconds": Bound(7 * 86_400, "a week", long=3_600, rate=1.0, unit="second"),
    "--kl-seconds": Bound(7 * 86_400, "a week", long=3_600, rate=1.0, unit="second"),
    # sizes and counts that set the work
    "--epochs": Bound(10_000, "passes over the cached activations"),
    "--chars": Bound(200_000_000, "the corpus comes from the documentation installed here (a few hundred MB)"),
    "--shard-tokens": Bound(10_000_000, "a shard must fit in memory"),
    "--boot": Bound(100_000, "bootstrap resamples (1000 give two-digit intervals)"),
    "--dps": Bound(1_000, "digits of exact arithmetic (50 are plenty; each digit slows every query)"),
    "icl-readout --iters": Bound(10_000, "iterations of the solvers (32 converge; each one is kept in memory)"),
    "--edges": Bound(10_000_000, "more edges than any model here has"),
    "train --steps": Bound(10_000_000, "optimizer steps", long=200_000, rate=0.02, unit="step"),
    "train --d-model": Bound(16_384, "a toy model's width (its weights must fit in memory)"),
    "train --d-mlp": Bound(65_536, "a toy model's FFN width (its weights must fit in memory)"),
    "train --layers": Bound(256, "a toy model's depth"),
    "train --heads": Bound(1_024, "heads per layer (each at least one dimension of d_model)"),
    "train --experts": Bound(1_024, "MoE experts"),
    "train-vit --steps": Bound(10_000_000, "optimizer steps", long=100_000, rate=0.05, unit="step"),
    # the command's own estimate (--n x methods x steps) asks for --allow-long; rate: all 9 methods on one image
    "vit-eval --n": Bound(1_000_000, "held-out images", rate=0.25, unit="image"),
    "vit-eval --steps": Bound(1_000, "deletion / insertion steps (finer than one patch a step on any ViT here)"),
    "sae train --tokens": Bound(50_000_000, "cached activations must fit in memory or on disk",
                                long=5_000_000, rate=0.002, unit="token"),
    "sae train --width": Bound(2**20, "dictionary features (its weights and Adam's state must fit in memory)"),
    "sae cache --tokens": Bound(100_000_000, "activation shards must fit on disk"),
    "sae explain --windows": Bound(20_000, "held-out windows (each one forward; 256 choose and score every rule)"),
    "sae corpus --samples": Bound(100_000, "texts sampled from a model", long=3_000, rate=1.5, unit="text"),
    "lens-train --tokens": Bound(10_000_000, "training tokens streamed through the model (also checked "
                                 "against memory once the model is known)"),
    "recover-heads --d": Bound(1_024, "the token dimension (d x d matrices per head)"),
    "recover-heads --oversample": Bound(100, "extra k values per experiment (a few steady a noisy oracle)"),
    "icl-readout --n": Bound(INT_CAP, "prompts", long=500_000, rate=0.005, unit="prompt"),
    "icl-readout --n-train": Bound(INT_CAP, "prompts", long=500_000, rate=0.005, unit="prompt"),
    "train-vit --batch-size": Bound(4_096, "images per step (each step draws its own batch)"),
    "recover-heads --heads": Bound(1_024, "heads"),
    "recover-heads --bound": Bound(1_024, "heads"),
}


def _command_name(ctx: Any) -> str:
    """'sae train' for ``workbench sae train`` (the root's own name left out)."""
    names = []
    while ctx is not None and getattr(ctx, "info_name", None) is not None:
        names.append(ctx.info_name)
        ctx = getattr(ctx, "parent", None)
    return " ".join(reversed(names[:-1])) if len(names) > 1 else (names[0] if names else "")


def bound_of(command: str, flag: str) -> Bound | None:
    """The table's bound of ``flag`` in ``command`` (a command's own entry first, then the flag's)."""
    return BOUNDS.get(f"{command} {flag}") or BOUNDS.get(flag)


def bound_problem(ctx: Any, param: Any, value: Any, *, integer: bool = False) -> str | None:
    """Why ``value`` is beyond the table's bound for this option (None when within it, or no bound applies)."""
    flags = [o for o in (getattr(param, "opts", None) or []) if o.startswith("--")]
    flag = flags[0] if flags else None
    command = _command_name(ctx) if hasattr(ctx, "info_name") else ""
    bound = bound_of(command, flag) if flag else None
    if bound is None:
        if integer and abs(value) > INT_CAP:
            return f"must be <= {INT_CAP:,} (got {_fmt(value)}): no count or size here needs more"
        return None
    hi = bound.limit()
    if abs(value) > hi:
        return f"must be <= {_fmt(hi)} (got {_fmt(value)}): {bound.why}"
    if bound.long is not None and value > bound.long:
        allow = bool(getattr(ctx, "params", {}).get("allow_long"))
        has_flag = any(getattr(p, "name", None) == "allow_long" for p in getattr(getattr(ctx, "command", None),
                                                                                 "params", []))
        if not allow:
            est = f"about {duration(value * bound.rate)}" if bound.rate else "hours"
            how = "pass --allow-long to run it anyway" if has_flag else f"at most {_fmt(bound.long)} here"
            return f"{_fmt(value)} {bound.unit}s would take {est} on this machine; {how}"
    return None


def check_bound(command: str, flag: str, value: Any, *, allow_long: bool = False) -> Any:
    """``value`` if within the table's bound for ``flag`` of ``command`` ('sae train', '--width'), else CostError
    naming the option: the same judgement the CLI makes, for the app and the notebook API."""
    from types import SimpleNamespace

    ctx = SimpleNamespace(info_name="workbench", parent=None)
    for name in command.split():
        ctx = SimpleNamespace(info_name=name, parent=ctx)
    ctx.params = {"allow_long": allow_long}
    ctx.command = SimpleNamespace(params=[SimpleNamespace(name="allow_long")])
    why = bound_problem(ctx, SimpleNamespace(opts=[flag]), value, integer=isinstance(value, int))
    if why is not None:
        raise CostError(f"{flag} {why}")
    return value


def duration(seconds: float) -> str:
    """'40 min', '3.5 h', '12 days'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:,.0f} days"


def check_long(what: str, seconds: float, allow_long: bool, *, limit: float = 3_600) -> None:
    """CostError when work estimated at ``seconds`` exceeds ``limit`` (an hour) and --allow-long was not given."""
    if seconds > limit and not allow_long:
        raise CostError(f"{what} would take about {duration(seconds)} on this machine; pass --allow-long to run "
                        "it anyway")


def available_memory() -> int:
    """Bytes this process may still allocate: MemAvailable, or the cgroup's limit when lower."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = 8 * 2**30
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(f).read_text().strip()
            if text.isdigit():
                avail = min(avail, int(text))
        except OSError:
            pass
    return avail


def check_memory(what: str, nbytes: float) -> None:
    """CostError when ``what`` needs more memory (an estimate, bytes) than 3/4 of what this machine has free
    (the rest for the model, the data and everything else running)."""
    free = available_memory()
    if nbytes > 0.75 * free:
        raise CostError(f"{what} needs about {_gib(nbytes)} of memory; this machine has {_gib(free)} free")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


ALLOW_LONG_HELP = "Run even when the estimate says hours (an option beyond its soft limit)."


def allow_long_option() -> Any:
    """``--allow-long``: eager, so the other options' checks see it whatever the order on the line."""
    import typer

    return typer.Option(False, "--allow-long", is_eager=True, help=ALLOW_LONG_HELP)


# -- output paths: one check ----------------------------------------------------------------------------------

SYSTEM_ROOTS = ("/proc", "/sys", "/dev")


def output_problem(path: str | os.PathLike, *, kind: str = "file") -> str | None:
    """Why ``path`` cannot be written as a ``kind`` ("file" or "dir") output (None when it can)."""
    text = os.fspath(path)
    if not str(text).strip():
        return "is empty: name a path"
    try:
        p = _expand(text)
    except RuntimeError:  # ~nosuchuser
        return "names the home folder of a user this machine does not have"
    if any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in p.parts) or len(str(p)) > 4000:
        return "is too long: a file name has at most 255 bytes"
    try:
        real = p.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        return f"cannot be resolved ({exc})"
    for root in SYSTEM_ROOTS:
        if str(real) == root or str(real).startswith(root + "/"):
            return f"is under {root}, a system folder: write somewhere else"
    if kind == "file" and real.is_dir():
        return "is a directory: name a file"
    if kind == "dir" and real.exists() and not real.is_dir():
        return "exists and is not a directory"
    if kind == "dir" and real.is_dir():
        return None if os.access(real, os.W_OK | os.X_OK) else "is a folder this user cannot write in"
    parent = real.parent
    if not parent.exists():
        return f"cannot be written: its folder {parent} does not exist"
    if not parent.is_dir():
        return f"cannot be written: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be written: no permission to write in {parent}"
    return None


def check_output(what: str, path: str | os.PathLike | None, *, kind: str = "file") -> Path | None:
    """``path`` as a Path (None stays None) if it can be written; else OutputError naming ``what`` (the option).
    Called before any work starts, by every command that writes a file or folder the user names."""
    if path is None:
        return None
    why = output_problem(path, kind=kind)
    if why is not None:
        raise OutputError(f"{what} {os.fspath(path)} {why}")
    return _expand(os.fspath(path))


def _expand(text: str) -> Path:
    return Path(text).expanduser()


# -- comma-separated lists ------------------------------------------------------------------------------------

def split_list(what: str, text: str | None, default: list[str] | None = None) -> list[str]:
    """The items of a comma-separated option; None (not given) is ``default``. An empty value, an empty item
    ("a,,b", "a,") or an item named twice is refused, naming the option."""
    if text is None:
        if default is None:
            raise WorkbenchError(f"{what} is required")
        return list(default)
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or not any(items):
        raise WorkbenchError(f"{what} is empty: name at least one"
                             + (f" (without {what}: {','.join(default)})" if default else ""))
    if any(not x for x in items):
        raise WorkbenchError(f"{what} {text!r} has an empty item (a stray comma?)")
    twice = sorted({x for x in items if items.count(x) > 1})
    if twice:
        raise WorkbenchError(f"{what} names {', '.join(twice)} more than once")
    return items


def int_range(lo: int | None = None, hi: int | None = None) -> Callable[..., Any]:
    """A whole number in [lo, hi] (either end open when None)."""
    return _callback(integer=True, lo=lo, hi=hi)


def float_range(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[..., Any]:
    """A finite number in [lo, hi] ((lo, hi] with lo_open)."""
    return _callback(lo=lo, hi=hi, lo_open=lo_open)


any_int = int_range()  # positions (negative counts from the end): only the table's bound
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


# Method parameters that count something (integration steps, batch sizes, samples): whole numbers from 1 to
# their bound (10,000 integration steps, as circuits.edges allows; a batch as --batch-size; samples as --n).
COUNT_PARAMS = {"steps": 10_000, "internal_batch_size": 65_536, "batch_size": 65_536, "sample": INT_CAP,
                "samples": INT_CAP, "n_samples": INT_CAP}


def finite_param(option: str, key: str, value: Any) -> Any:
    """A ``--param`` value: numbers must be finite (``w_q=nan``, ``steps=inf`` are refused), and a count
    (COUNT_PARAMS: ``steps=1.5``, ``steps=0``, ``steps=10**9``) a whole number from 1 to its bound."""
    if isinstance(value, float) and not math.isfinite(value):
        raise NonFiniteError(f"{option} {key}={value}: not a finite number")
    most = COUNT_PARAMS.get(key.rpartition(".")[2])
    not_a_number = isinstance(value, bool) or not isinstance(value, (int, float))  # steps=abc: not a count either
    if most is not None and (not_a_number or value != int(value) or not 1 <= value <= most):
        shown = str(value) if len(str(value)) <= 40 else str(value)[:40] + "..."
        raise WorkbenchError(f"{option} {key}={shown}: must be a whole number >= 1 and <= {most:,}")
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


def dash_name_hint(argv: list[str]) -> str:
    """For click's "No such option": when an argument that starts with '-' looks like a file name
    ('-dash.png'), how to pass it (after ``--``, which ends the options)."""
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2 and ("." in arg or "/" in arg):
            return f" (if {arg!r} is a file name, put it after --, which ends the options: ... -- {arg})"
    return ""


def nonempty(ctx, param, value):
    """typer callback for an optional text option whose absence means a default: given empty ('' or spaces)
    it is a mistake, never read as "not given"."""
    import typer

    if value is None or getattr(ctx, "resilient_parsing", False):
        return value
    if not str(value).strip():
        raise typer.BadParameter("is empty: give a value or leave the option out")
    return value


def token_text(ctx, param, value):
    """typer callback for a token option (--target, --foil): '' is no token of any model, so it is refused as it
    is parsed, before a model is loaded (a single space may be one, so only the empty string is refused)."""
    import typer

    if value is None or getattr(ctx, "resilient_parsing", False):
        return value
    if value == "":
        raise typer.BadParameter("is empty: a token has at least one character (a leading space counts)")
    return value
