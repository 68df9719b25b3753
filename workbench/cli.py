"""The ``workbench`` command. Subcommands live in ``workbench/commands/*.py``; each module
defines ``register(app)`` and imports heavy libraries only inside its command bodies, so
``workbench --help``, ``models`` and ``runs`` stay fast. What the commands share (options, ``emit``, consoles,
tables) is workbench/commands/common.py: the commands import it, never this module."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import typer

import workbench.commands
from core.errors import WorkbenchError
from core.options import check_argv, dash_name_hint
from core.paths import version

app = typer.Typer(
    name="workbench",
    help="Mechanistic-interpretability workbench: attribution, circuits, probes, SAEs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
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
    for info in sorted(pkgutil.iter_modules(workbench.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"workbench.commands.{info.name}")
        if hasattr(module, "register"):
            module.register(app)


_register_commands()


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    from workbench.commands.common import warnings_as_lines

    try:
        check_argv(sys.argv[1:])
        with warnings_as_lines():  # each warning one line on stderr, once; --json keeps them
            code = app(standalone_mode=False)
        if code == 130:  # typer turns Ctrl-C into Exit(130) and, not standalone, returns it
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
