"""The ``workbench`` command. Subcommands live in ``workbench/commands/*.py``; each module
defines ``register(app)`` and imports heavy libraries only inside its command bodies, so
``workbench --help``, ``models`` and ``runs`` stay fast."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
from collections.abc import Callable
from typing import Any

import typer

from core.errors import WorkbenchError

app = typer.Typer(
    name="workbench",
    help="Mechanistic-interpretability workbench: attribution, circuits, probes, SAEs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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


def _print_version(value: bool) -> None:
    if value:
        from core.paths import version

        print(f"workbench {version()}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the installed version and exit.")) -> None:
    """Mechanistic-interpretability workbench: attribution, circuits, probes, SAEs."""
    if "--help" not in sys.argv:
        from core.store import check_settings

        check_settings()  # WORKBENCH_RUNS / WORKBENCH_JOBS empty or relative: one line before any work


def _register_commands() -> None:
    import workbench.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"workbench.commands.{info.name}")
        if hasattr(module, "register"):
            module.register(app)


_register_commands()


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    try:
        from core.options import check_argv

        check_argv(sys.argv[1:])
        if app(standalone_mode=False) == 130:  # typer turns Ctrl-C into Exit(130) and, not standalone, returns it
            raise KeyboardInterrupt
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # click usage errors (typer may vendor click) and unexpected failures
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            message = exc.format_message()
            if message and message.startswith("No such option"):
                from core.options import dash_name_hint

                message += dash_name_hint(sys.argv[1:])
            if message:
                print(f"error: {message}", file=sys.stderr)
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Exit" and hasattr(exc, "exit_code"):
            sys.exit(exc.exit_code)
        from core.checks import disk_full

        if disk_full(exc):  # a writer without a check of its own (store and job writes say so themselves)
            where = getattr(exc, "filename", None)
            print(f"error: no space left on device{f' at {where}' if where else ''}", file=sys.stderr)
            sys.exit(2)
        if os.environ.get("WORKBENCH_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (set WORKBENCH_DEBUG=1 for a traceback)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
