"""Running the CLI inside the test process and checking the bad-input contract."""

from __future__ import annotations

import sys


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """workbench.cli.main in this process (torch is already imported): (exit code, stdout, stderr)."""
    from workbench.cli import main

    monkeypatch.setattr(sys, "argv", ["workbench", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad(code: int, err: str, *words: str) -> None:
    """Bad input: exit 2, exactly one 'error:' line naming the problem, no traceback."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], lines[0]
