"""One argument checker for the notebook API: ``@checked(...)`` on every public function of ``workbench``.

Before the function body runs, the call is bound to the function's signature and every argument is checked:

- a missing argument, an unknown keyword (also those a ``**kwargs`` would swallow: each function says which
  extra keywords it takes, by name or by asking the engine it calls) or a value whose type does not match the
  function's type hint is an ``ArgumentTypeError`` (a WorkbenchError and a TypeError);
- a value outside its rule (``Int(1, 1000)``, ``Choice(...)``, a loaded model, a prompt set's rows, a
  device this machine has) is an ``ArgumentError`` (a WorkbenchError and a ValueError).

Each message is one line that names the function and the argument. WorkbenchErrors raised further in (by the
engines: an unknown method, a token that is not one token, a missing file) leave the facade as the same class
made also a ValueError, so ``except ValueError`` works for every bad input of the notebook API as Python users
expect, and ``except MethodError`` still does.

Rules are data (``fn.__checks__``), so a test can enumerate every public function, its parameters and the
values each rule refuses (``Rule.refused()``), and a new function is covered the day it is added.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from core.errors import ArgumentError, ArgumentTypeError, WorkbenchError

_MISSING = inspect.Parameter.empty


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _got(value: Any) -> str:
    """``int 5`` / ``str 'x'`` for a message's "(got ...)"; just ``None`` for None."""
    return "None" if value is None else f"{type(value).__name__} {_show(value)}"


class Rule:
    """A check of one argument's value beyond its type hint; ``refused()`` lists values it refuses (tests)."""

    optional = False  # None is accepted

    def check(self, where: str, value: Any) -> Any:
        """``value`` (possibly normalised) or an ArgumentError / ArgumentTypeError naming ``where``."""
        return value

    def refused(self) -> list[Any]:
        return []


@dataclass
class Int(Rule):
    """A whole number in [lo, hi] (an end None is open); not a bool, not a float."""

    lo: int | None = None
    hi: int | None = None
    optional: bool = False

    def check(self, where: str, value: Any) -> Any:
        if value is None and self.optional:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"{where} must be a whole number (got {_got(value)})")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise ArgumentError(f"{where} must be {self._range()} (got {value})")
        return value

    def _range(self) -> str:
        if self.hi is None:
            return f">= {self.lo}"
        if self.lo is None:
            return f"<= {self.hi}"
        return f"between {self.lo} and {self.hi}"

    def refused(self) -> list[Any]:
        out: list[Any] = [1.5, True]
        if self.lo is not None:
            out += [self.lo - 1, -(10 ** 12) if self.lo > -(10 ** 12) else self.lo - 2]
        if self.hi is not None:
            out += [self.hi + 1, 10 ** 30]
        return out


@dataclass
class Float(Rule):
    """A finite number in [lo, hi]."""

    lo: float | None = None
    hi: float | None = None
    optional: bool = False

    def check(self, where: str, value: Any) -> Any:
        if value is None and self.optional:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ArgumentTypeError(f"{where} must be a number (got {_got(value)})")
        if not math.isfinite(value):
            raise ArgumentError(f"{where} must be a finite number (got {value})")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise ArgumentError(f"{where} must be within [{self.lo}, {self.hi}] (got {value})")
        return value

    def refused(self) -> list[Any]:
        out: list[Any] = [math.nan, math.inf, "1"]
        if self.lo is not None:
            out.append(self.lo - 1)
        if self.hi is not None:
            out.append(self.hi + 1)
        return out


@dataclass
class Choice(Rule):
    """One of a fixed set of strings (or a callable giving them, read at call time: no engine at import)."""

    choices: tuple[str, ...] | Callable[[], Iterable[str]]
    optional: bool = False

    def names(self) -> list[str]:
        return list(self.choices() if callable(self.choices) else self.choices)

    def check(self, where: str, value: Any) -> Any:
        if value is None and self.optional:
            return value
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{where} must be a string (got {_got(value)})")
        names = self.names()
        if value not in names:
            raise ArgumentError(f"{where} {value!r} is not one of {', '.join(names)}")
        return value

    def refused(self) -> list[Any]:
        return ["no-such-choice", "", 3]


@dataclass
class Text(Rule):
    """A string that is not empty or blank (a prompt, a name)."""

    optional: bool = False

    def check(self, where: str, value: Any) -> Any:
        if value is None and self.optional:
            return value
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{where} must be a string (got {_got(value)})")
        if not value.strip():
            raise ArgumentError(f"{where} is empty")
        return value

    def refused(self) -> list[Any]:
        return ["", "   ", ["a prompt"], 7]


@dataclass
class LoadedModel(Rule):
    """A model loaded with ``wb.load`` (a name or None is refused with how to load it)."""

    optional: bool = False
    names_too: bool = False  # also a zoo name or a path (the function loads it itself)

    def check(self, where: str, value: Any) -> Any:
        if value is None and self.optional:
            return value
        if self.names_too and isinstance(value, (str, os.PathLike)):
            return value
        if isinstance(value, str):
            raise ArgumentTypeError(f"{where} must be a loaded model, not the string {_show(value)}: load it "
                                    f"first, m = wb.load({value!r})")
        if not _is_model(value):
            raise ArgumentTypeError(f"{where} must be a model loaded with wb.load(...) "
                                    f"(got {_got(value)})")
        return value

    def refused(self) -> list[Any]:
        out: list[Any] = [42, object()] if self.names_too else ["ioi-attn-1l2h", 42, object()]
        return out if self.optional else [None, *out]


def _is_model(value: Any) -> bool:
    from core.models.hooked import HookedModel

    if isinstance(value, HookedModel):
        return True
    # the ViTs (core.models.vit.HookedViT) are torch modules with a model config: no import of the engine
    return hasattr(value, "forward") and hasattr(value, "cfg") and callable(getattr(value, "run_with_cache", None))


@dataclass
class Device(Rule):
    """cpu, cuda, cuda:N or mps, and only one this machine has."""

    def check(self, where: str, value: Any) -> Any:
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{where} must be a string such as 'cpu' (got {_got(value)})")
        kind, _, index = value.partition(":")
        if kind not in ("cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
            raise ArgumentError(f"{where} {value!r} is not a device: use cpu, cuda, cuda:N or mps")
        if kind == "cpu":
            return value
        import torch

        if kind == "mps" and not torch.backends.mps.is_available():
            raise ArgumentError(f"{where} 'mps': this machine's torch has no MPS device; use cpu")
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise ArgumentError(f"{where} {value!r}: this machine's torch has no CUDA device "
                                    "(torch.cuda.is_available() is False); use cpu")
            if index and int(index) >= torch.cuda.device_count():
                raise ArgumentError(f"{where} {value!r}: this machine has {torch.cuda.device_count()} CUDA "
                                    "device(s)")
        return value

    def refused(self) -> list[Any]:
        out: list[Any] = ["tpu", "", "cuda:x", 0]
        try:
            import torch

            if not torch.cuda.is_available():
                out.append("cuda")
        except ImportError:
            pass
        return out


@dataclass
class DType(Rule):
    """A dtype name (float32, bfloat16, ...) or a torch.dtype; which ones the loader takes is its to say."""

    optional: bool = True

    def check(self, where: str, value: Any) -> Any:
        if value is None or isinstance(value, str) or type(value).__module__ == "torch":
            return value
        raise ArgumentTypeError(f"{where} must be a dtype name such as 'bfloat16' (got {_got(value)})")

    def refused(self) -> list[Any]:
        return [5, 2.5, ["float32"]]


@dataclass
class PromptRows(Rule):
    """A prompt set: a JSONL path, or rows {"prompt": str, "target": str, "foil"?: str, "corrupt"?: str}."""

    need_target: bool = True

    def check(self, where: str, value: Any) -> Any:
        if isinstance(value, (str, os.PathLike)):
            if not str(value).strip():
                raise ArgumentError(f"{where} is an empty path")
            return str(value)
        if isinstance(value, (dict, str, bytes)) or not isinstance(value, Iterable):
            raise ArgumentTypeError(f"{where} must be a JSONL path or a list of rows {{'prompt', 'target', "
                                    f"'foil'?}} (got {_got(value)})")
        rows = list(value)
        if not rows:
            raise ArgumentError(f"{where} has no rows")
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ArgumentTypeError(f"{where}[{i}] must be a dict {{'prompt', 'target', 'foil'?}} "
                                        f"(got {_got(row)})")
            need = ("prompt", "target") if self.need_target else ("prompt",)
            for key in need:
                if key not in row:
                    raise ArgumentError(f"{where}[{i}] has no {key!r} (a row is {{'prompt', 'target', "
                                        "'foil'?})")
            for key in ("prompt", "target", "foil", "corrupt"):
                if key in row and not (row[key] is None and key != "prompt") and not isinstance(row[key], str):
                    raise ArgumentTypeError(f"{where}[{i}][{key!r}] must be a string (got "
                                            f"{_got(row[key])})")
            if not row["prompt"].strip():
                raise ArgumentError(f"{where}[{i}]['prompt'] is empty")
        return rows

    def refused(self) -> list[Any]:
        return [[], [{"prompt": "N1 and N2"}], ["N1 and N2"], [{"prompt": "", "target": "N1"}],
                [{"prompt": 5, "target": "N1"}], {"prompt": "x", "target": "y"}, 3, ""]


@dataclass
class Image(Rule):
    """An image: a path, a PIL image, or an array / tensor (its content is the engine's to judge)."""

    def check(self, where: str, value: Any) -> Any:
        if isinstance(value, (str, os.PathLike)) or hasattr(value, "shape") or hasattr(value, "getpixel"):
            return value
        raise ArgumentTypeError(f"{where} must be an image path, a PIL image or a (3, H, W) tensor "
                                f"(got {_got(value)})")

    def refused(self) -> list[Any]:
        return [None, 5, {"a": 1}, [0.5, 0.5]]


@dataclass
class StoredRun(Rule):
    """A run of the store (``res.save()``, ``wb.runs().get(id)``), or its id or a unique prefix of one."""

    def check(self, where: str, value: Any) -> Any:
        from core.store import Run

        if isinstance(value, Run):
            return value
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{where} must be a stored run (res.save(), wb.runs().get(id)) or a run id "
                                    f"(got {_got(value)})")
        if not value.strip():
            raise ArgumentError(f"{where} is empty: give a run id (or a unique prefix of one)")
        return value

    def refused(self) -> list[Any]:
        return [None, "", "  ", 5, object()]


@dataclass
class Region(Rule):
    """Four finite numbers (x0, y0, x1, y1) with x0 < x1 and y0 < y1, or None."""

    optional: bool = True

    def check(self, where: str, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
            raise ArgumentTypeError(f"{where} must be (x0, y0, x1, y1) (got {_got(value)})")
        box = list(value)
        if len(box) != 4 or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                for v in box):
            raise ArgumentError(f"{where} must be four finite numbers (x0, y0, x1, y1) (got {_show(value)})")
        if not (box[0] < box[2] and box[1] < box[3]):
            raise ArgumentError(f"{where} {tuple(box)} is empty: need x0 < x1 and y0 < y1")
        return tuple(box)

    def refused(self) -> list[Any]:
        return [(1, 2, 3), (5, 5, 1, 1), "0,0,1,1", (0, 0, math.nan, 1)]


@dataclass
class Checks:
    """What ``@checked`` holds for one function (read by the tests through ``fn.__checks__``)."""

    name: str
    rules: dict[str, Rule]
    hints: dict[str, Any]
    extras: dict[str, Rule | Any] | Callable[[dict[str, Any]], dict[str, Any] | None] | None
    signature: inspect.Signature


def checked(extras: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
            name: str | None = None, **rules: Rule) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Check every argument of the decorated function (its type hints, then ``rules``) before it runs.

    ``extras``: the keywords a ``**kwargs`` takes, as {name: Rule or type} or a function of the bound
    arguments giving them (None: whatever the engine below accepts; it refuses the rest itself)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        label = f"wb.{name or fn.__name__}"
        unknown_rule = set(rules) - set(sig.parameters)
        if unknown_rule:
            raise TypeError(f"{label}: rules for no parameter: {sorted(unknown_rule)}")
        spec = Checks(label, rules, hints, extras, sig)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = _bind(spec, args, kwargs)
            try:
                return fn(*bound.args, **bound.kwargs)
            except WorkbenchError as exc:
                if isinstance(exc, (ValueError, TypeError)):
                    raise
                try:
                    valued = _as_value_error(type(exc))(*exc.args)
                except Exception:  # noqa: BLE001 - a class built with other arguments: raised as it is
                    raise exc from None
                raise valued.with_traceback(exc.__traceback__) from None

        run.__checks__ = spec  # type: ignore[attr-defined]
        return run

    return wrap


def _bind(spec: Checks, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
    var_kw = next((p.name for p in spec.signature.parameters.values() if p.kind is p.VAR_KEYWORD), None)
    named = [p.name for p in spec.signature.parameters.values() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if var_kw is None:
        unknown = sorted(set(kwargs) - set(named))
        if unknown:
            raise ArgumentTypeError(f"{spec.name}() has no argument {', '.join(unknown)}; its arguments: "
                                    f"{', '.join(named) or 'none'}")
    try:  # a missing argument, or one given twice or too many positionally
        bound = spec.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ArgumentTypeError(f"{spec.name}(): {exc}") from None
    values = dict(bound.arguments)
    extra = values.pop(var_kw, {}) if var_kw else {}
    for pname, value in values.items():
        where = f"{spec.name}: {pname}"
        hint = spec.hints.get(pname, Any)
        rule = spec.rules.get(pname)
        default = spec.signature.parameters[pname].default
        if rule is None and not (value is default and default is not _MISSING):
            _check_type(where, value, hint)
        if rule is not None:
            if not (value is None and default is None):
                bound.arguments[pname] = rule.check(where, value)
    if extra:
        _check_extras(spec, values, extra)
    return bound


def _check_extras(spec: Checks, values: dict[str, Any], extra: dict[str, Any]) -> None:
    allowed = spec.extras(values) if callable(spec.extras) else spec.extras
    if allowed is None:
        return  # the engine below names its own parameters and refuses the rest
    unknown = sorted(set(extra) - set(allowed))
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise ArgumentTypeError(f"{spec.name}() has no argument {', '.join(unknown)}; its extra arguments here: "
                                f"{known}")
    for key, value in extra.items():
        where = f"{spec.name}: {key}"
        check = allowed[key]
        if isinstance(check, Rule):
            extra[key] = check.check(where, value)
        else:
            _check_type(where, value, check)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` matches ``hint`` (shallow: containers by their kind and their items' kind)."""
    if hint is Any or hint is inspect.Parameter.empty or isinstance(hint, typing.TypeVar):
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is not None:
        if origin in (Callable, typing.Callable) or str(origin) == "collections.abc.Callable":
            return callable(value)
        if not isinstance(origin, type) or not isinstance(value, origin):
            return False
        item_hints = typing.get_args(hint)
        if origin in (list, set, frozenset) and item_hints:
            return all(_fits(v, item_hints[0]) for v in value)
        if origin is dict and len(item_hints) == 2:
            return all(_fits(k, item_hints[0]) and _fits(v, item_hints[1])
                       for k, v in value.items())
        return True
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint this checker cannot read is not a reason to refuse


def _check_type(where: str, value: Any, hint: Any) -> None:
    if not _fits(value, hint):
        raise ArgumentTypeError(f"{where} must be {_hint_text(hint)} (got {_got(value)})")


def _hint_text(hint: Any) -> str:
    if hint is type(None) or hint is None:
        return "None"
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__name__
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_hint_text(h) for h in typing.get_args(hint))
    return str(hint).replace("typing.", "")


def type_refusals(hint: Any) -> list[Any]:
    """Values of a type ``hint`` refuses (for the tests): picked from a fixed assortment."""
    assortment: list[Any] = [object(), 12345, "some text", 2.5, [1, 2], {"a": 1}, None, b"bytes"]
    return [v for v in assortment if not _fits(v, hint)]


@functools.cache
def _as_value_error(cls: type[WorkbenchError]) -> type[WorkbenchError]:
    """``cls``, also a ValueError: a bad-input error from an engine as the notebook API raises it."""
    return types.new_class(cls.__name__, (cls, ValueError), {},
                           lambda ns: ns.update({"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                                 "__doc__": cls.__doc__}))


def job_kinds() -> list[str]:
    """Every job kind: the typed ones (workbench/scheduler/specs.py), their old spellings, and kinds a plug-in or a
    test registered at run time (workbench.scheduler.kinds.KINDS)."""
    from workbench.scheduler.kinds import KINDS
    from workbench.scheduler.specs import ALIASES, SPECS

    return list(dict.fromkeys([*SPECS, *ALIASES, *KINDS]))


class JobSpecArg(Rule):
    """A spec made by ``wb.job_spec``, or a dict whose ``kind`` is a job kind."""

    def check(self, where: str, value: Any) -> Any:
        from workbench.scheduler.specs import JobSpec

        if isinstance(value, JobSpec):
            return value
        if not isinstance(value, dict):
            raise ArgumentTypeError(f"{where} must be a wb.job_spec(...) or a dict with a 'kind' (got {_got(value)})")
        kind = value.get("kind")
        kinds = job_kinds()
        if not isinstance(kind, str) or kind not in kinds:
            raise ArgumentError(f"{where} has kind {kind!r:.60}; kinds: {', '.join(kinds)}")
        return value

    def refused(self) -> list[Any]:
        return [None, "faithfulness", {"kind": "nosuch"}, {}]
