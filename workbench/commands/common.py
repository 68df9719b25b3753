"""What every command shares: the --json, --device and --dtype options, a result printed as JSON or for people
(``emit``), the consoles (stderr for progress, stdout for results), tables that fit the terminal, a progress bar.
Command modules import these; workbench/cli.py holds the typer app and registers every command module."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import typer

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


def emit(result: Any, as_json: bool, human: Callable[[Any], None] | None = None) -> None:
    """Print a result: JSON only on stdout with --json, a readable rendering otherwise.

    Strict JSON in both modes: a result holding NaN or Infinity is refused (NonFiniteError, exit 2)
    before anything is printed, never written as the non-standard ``NaN`` / ``Infinity``."""
    text = to_json(result)
    if as_json:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    elif human is not None:
        human(result)
    else:
        from rich import print_json

        print_json(text)


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
