"""What every command shares: the --json, --device and --dtype options, a result printed as JSON or for people
(``emit``), the consoles (stderr for progress, stdout for results), tables that fit the terminal, a progress bar.
Command modules import these; workbench/cli.py holds the typer app and registers every command module."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import typer

from core.options import any_int, nonneg_int, positive_int, token_text

JSON_OPTION = typer.Option(False, "--json", help="Print only a JSON result on stdout.")


def _device_option(value: str) -> str:
    """--device checked as it is parsed: one line and exit 2 for an unknown device or cuda without CUDA."""
    from core.errors import DeviceError
    from core.models.zoo import check_device

    try:
        return check_device(value)
    except DeviceError as exc:
        raise typer.BadParameter(str(exc)) from None


DEVICE_OPTION = typer.Option("cpu", "--device", callback=_device_option, help="cpu (default) or cuda when present.")


def _dtype_option(value: str) -> str:
    from core.errors import ModelFileError
    from core.models.zoo import check_dtype

    try:
        return check_dtype(value)
    except ModelFileError as exc:
        raise typer.BadParameter(str(exc)) from None


DTYPE_OPTION = typer.Option("float32", "--dtype", callback=_dtype_option,
                            help="An LLM's weight precision: float32 (default), bfloat16 or float16.")


def dtype_spec(dtype: str) -> dict[str, str]:
    """What a job spec records of the dtype: nothing for the default float32 (older specs keep their keys)."""
    return {} if dtype == "float32" else {"dtype": dtype}


# Options several commands spell alike, declared once (a command whose option says something else keeps its own).
SAVE_OPTION = typer.Option(True, "--save/--no-save", help="Save the run to the run store.")
THREADS_OPTION = typer.Option(None, "--threads", help="torch CPU threads (default: torch's).", callback=positive_int)
MODEL_OPTION = typer.Option(..., "--model", help="A model from `workbench models` or a local model directory.")
MODEL_PATH_OPTION = typer.Option(..., "--model", help="Model name or local path.")
SEED_OPTION = typer.Option(0, "--seed", callback=nonneg_int)
MODEL_ARGUMENT = typer.Argument(..., help="A model from `workbench models`, or a local model directory.")
PROMPT_ARGUMENT = typer.Argument(..., help="The prompt.")
# the attribution commands (attribute, attribute-set)
LEVEL_OPTION = typer.Option("token", "--level", help="token, head, neuron or qk (a query-key pair of one head; "
                            "edge, its old name, still means qk).")
# the token a one-prompt attribution explains (attribute, dla)
FOIL_OPTION = typer.Option(None, "--foil", help="Foil token: attribute logit(target) - logit(foil).",
                           callback=token_text)
POSITION_OPTION = typer.Option(None, "--position", help="Explain the prediction made at this position "
                               "(0-based; negative counts from the end; default the last).", callback=any_int)
# the commands that run a model over corpus windows (sae dashboards, sae explain)
WINDOWS_BATCH_OPTION = typer.Option(8, "--batch-size", help="Windows per forward.", callback=positive_int)
BF16_OPTION = typer.Option(None, "--bf16/--no-bf16", help="bfloat16 autocast for the model forward "
                           "(default: on for models over 10M parameters on CPU).")
# the prompt-set commands (attribute-set, faithfulness)
PROMPT_SET_MODEL_OPTION = typer.Option(..., "--model", help="Model from `workbench models`, or a local directory.")
PROMPTS_OPTION = typer.Option(..., "--prompts", help="JSONL file: {\"prompt\", \"target\", \"foil\"?} per line.")
LIMIT_OPTION = typer.Option(None, "--limit", help="Only the first N prompts.", callback=positive_int)
USE_FOIL_OPTION = typer.Option(True, "--foil/--no-foil", help="Explain target minus foil (when a prompt has "
                               "one) or the target logit alone.")


def emit(result: Any, as_json: bool, human: Callable[[Any], None] | None = None) -> None:
    """Print a result: JSON only on stdout with --json, a readable rendering otherwise.

    Strict JSON in both modes: a result holding NaN or Infinity is refused (NonFiniteError, exit 2)
    before anything is printed, never written as the non-standard ``NaN`` / ``Infinity``."""
    if as_json and isinstance(result, dict) and WARNINGS:  # --json keeps the warnings the user saw on stderr
        result = {**result, "warnings": [dict(w) for w in WARNINGS]}
    text = to_json(result)
    try:
        if as_json:
            sys.stdout.write(text + "\n")
        elif human is not None:
            human(result)
        else:
            from rich import print_json

            print_json(text)
        sys.stdout.flush()
    except OSError as exc:  # stdout on a full disk (or > /dev/full): the one line names where it went
        from core.checks import disk_full, disk_full_error

        if not disk_full(exc):
            raise
        raise disk_full_error(stdout_name(), "the output was not written in full") from None


# The warnings of this command, once each: {"warning": first line, "category": class name, "count": times}.
WARNINGS: list[dict[str, Any]] = []


def _warning_key(category: type, text: str) -> tuple[str, str]:
    """Warnings of one kind: the same class and text but for its numbers (one per prompt, say) are one."""
    import re

    return category.__name__, re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", text)


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Every Python warning raised while a command runs (ours, a library's) reaches the user as one line on
    stderr, "warning: TEXT", in the CLI's words: no source path, no code line, no class name; the same warning
    again (the same text but for its numbers, e.g. once per prompt) is counted, not printed again. With --json
    the JSON result keeps them (``emit``: "warnings"). The one place the CLI handles warnings (cli.main)."""
    import warnings

    from core.text import one_line

    seen: dict[tuple[str, str], dict[str, Any]] = {}
    previous = warnings.showwarning
    # for developers, not users: Python hides them outside __main__ unless asked (-W, a test run); shown as before
    developers = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if issubclass(category, developers):
            previous(message, category, filename, lineno, file, line)
            return
        text = one_line(message if isinstance(message, BaseException) else category(str(message)))
        key = _warning_key(category, text)
        if key in seen:
            seen[key]["count"] += 1
            return
        seen[key] = {"warning": text, "category": category.__name__, "count": 1}
        WARNINGS.append(seen[key])
        try:
            print(f"warning: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed or full: a warning is never worth a failure
            pass

    WARNINGS.clear()
    with warnings.catch_warnings():
        warnings.showwarning = show
        try:
            yield
        finally:
            WARNINGS.clear()


def stdout_name() -> str:
    """Where stdout goes, for a message: "standard output (/path/it/names)" where the system says, else
    "standard output"."""
    import os

    try:
        target = os.readlink(f"/proc/self/fd/{sys.stdout.fileno()}")
    except (OSError, ValueError, AttributeError):  # no /proc, or stdout replaced (a test's capture)
        return "standard output"
    return f"standard output ({target})"


def finish(out: dict[str, Any], as_json: bool, human: Callable[[dict[str, Any]], None], result: Any = None,
           save: bool = False, png: str | None = None, say: Callable[[str], Any] | None = None) -> None:
    """How a result command ends, the same in every one: ``out`` (the result's JSON and what the command adds)
    gains "run", ``result.save()``'s id, when ``save`` (a job that stored its run puts "run" in ``out`` itself)
    and "png", ``result.plot()`` written to ``png``, when given; then ``emit``: the JSON alone with --json, else
    ``human(out)`` closed by "saved run ID" and "figure saved to PATH" (on the result console, or by ``say``)."""
    if save:
        out["run"] = result.save().id
    if png:
        from core.figures import save_figure

        out["png"] = str(save_figure(result.plot(), png))

    def show(r: dict[str, Any]) -> None:
        human(r)
        line = say or result_console().print
        if "run" in r:
            line(f"saved run {r['run']}")
        if "png" in r:
            line(f"figure saved to {r['png']}")

    emit(out, as_json, show)


def finish_listing(rows: list[dict[str, Any]], bad: list[dict[str, Any]], as_json: bool,
                   human: Callable[[list[dict[str, Any]]], None], skipped: str, note: str) -> None:
    """How a listing command ends (runs list, jobs list): the sound rows (--json keeps its shape, a list), the
    damaged entries ``bad`` named below them, "damaged (N; ``skipped``):", or with --json on stderr, "note: N
    ``note``"."""

    def show(rows: list[dict[str, Any]]) -> None:
        human(rows)
        if bad:
            print(f"damaged ({len(bad)}; {skipped}):")
            for r in bad:
                print(f"  {r['id']}: {r['reason']}")

    emit(rows, as_json, show)
    if bad and as_json:
        print(f"note: {len(bad)} {note}", file=sys.stderr)


def emit_damaged(bad: list[dict[str, Any]], as_json: bool, none: str) -> None:
    """A listing's --damaged: "ID: reason" a line (``none`` when there are none)."""
    emit(bad, as_json, lambda rows: print("\n".join(f"{r['id']}: {r['reason']}" for r in rows) if rows else none))


def to_json(result: Any) -> str:
    """``json.dumps`` with allow_nan=False; a non-finite number is a NonFiniteError naming where it is."""
    try:
        return json.dumps(result, default=_json_default, allow_nan=False)
    except ValueError as exc:
        if "not JSON compliant" not in str(exc):
            raise
        from core.errors import NonFiniteError
        from core.options import first_non_finite

        where = first_non_finite(json.loads(json.dumps(result, default=_json_default)))
        raise NonFiniteError(f"the result is not finite ({where or exc}); nothing printed") from None


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def console():
    """A rich console on stderr, so progress never pollutes --json output."""
    from rich.console import Console

    return Console(stderr=True)


def result_console():
    """A rich console on stdout for a command's human-readable result (so `| grep` and `> file` see it);
    progress, logs and warnings stay on console() (stderr)."""
    from rich.console import Console

    return Console()


def print_table(columns: list[str], rows: list[list[str]], whole: tuple[str, ...] = (),
                numbers: tuple[str, ...] = ()) -> None:
    """A result table on stdout that fits the terminal (80 columns too) without cutting what a user must
    type: a column in ``whole`` (ids, names) keeps its cells' first lines whole (a second line under the name
    may wrap), one in ``numbers`` never wraps; the other, descriptive columns fold (never vanish)."""
    import textwrap

    from rich.table import Table
    from rich.text import Text

    # rich measures a cell by its longest word and crops the line (never folds) when those minima exceed the
    # width, so a long word in a descriptive column is broken here, to the width the other columns leave it
    width = result_console().width
    fixed = [i for i, name in enumerate(columns) if name in whole or name in numbers]
    fold = [i for i in range(len(columns)) if i not in fixed]
    taken = sum(max([len(columns[i])] + [len(row[i].split("\n")[0]) for row in rows]) for i in fixed)
    room = max(6, (width - taken - 2 * (len(columns) - 1)) // max(1, len(fold)))
    rows = [[("\n".join("\n".join(textwrap.wrap(line, room) or [""]) for line in cell.split("\n"))
              if i in fold else cell) for i, cell in enumerate(row)] for row in rows]
    table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False)
    for i, name in enumerate(columns):
        widest = max([len(name)] + [len(row[i].split("\n")[0]) for row in rows])
        if name in whole:
            table.add_column(name, overflow="fold", min_width=widest)
        elif name in numbers:
            table.add_column(name, no_wrap=True, min_width=widest)
        else:
            table.add_column(name, overflow="fold", min_width=min(widest, 6))
    table.header_style = "bold underline"
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # as written: "[x]" in a name is no markup
    result_console().print(table, highlight=False)


def progress():
    """A rich progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console(), transient=True)


def check_device(device: str) -> str:
    """The device's name, or DeviceError (core.models.zoo.check_device)."""
    from core.models.zoo import check_device as check

    return check(device)


def check_prompt(prompt: str, png: str | None = None) -> None:
    """What every one-prompt command refuses before any work, in one order: a bad --png, then an empty prompt."""
    from core.errors import PromptError
    from core.figures import check_figure_path

    check_figure_path(png)
    if not prompt.strip():
        raise PromptError("empty prompt: give at least one token")


def corpus_model(model: str, name: str | None, what: str, threads: int) -> Any:
    """The language model a dictionary build trains on (``what``: "a transcoder set", "a cross-layer
    transcoder"), after the checks that need no model: ``--name`` a plain folder name, the model a language model;
    torch on ``threads`` threads."""
    from core.errors import RangeError
    from core.models import zoo

    if name is not None and ("/" in name or name.startswith(".")):
        raise RangeError(f"--name {name!r}: the name of {what} is a plain folder name")
    if zoo.resolve(model).kind != "llm":
        raise RangeError(f"{model} is not a language model: {what} trains on the English corpus")
    import torch

    torch.set_num_threads(threads)
    import workbench as wb

    return wb.load(model)
