"""`workbench app` never switches its Host check (DNS rebinding) off silently: every interface without a named
host, and wildcard host patterns, are refused before Streamlit starts; --allow-any-host says it out loud."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_helpers import assert_bad, run_cli

ROOT = Path(__file__).resolve().parents[1]


def _streamlit_options(monkeypatch, capsys, *args: str) -> tuple[dict[str, list[str]], str]:
    seen: dict = {}

    def fake_execve(exe, cmd, env):
        seen["cmd"] = cmd
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", fake_execve)
    code, _, err = run_cli(monkeypatch, capsys, "app", *args)
    assert code == 0 and "cmd" in seen, err
    opts: dict[str, list[str]] = {}
    for k, v in zip(seen["cmd"], seen["cmd"][1:], strict=False):
        if k.startswith("--server."):
            opts.setdefault(k, []).append(v)
    return opts, err


@pytest.mark.parametrize("args, words", [
    (["--host", "0.0.0.0"], ["--host", "--allowed-host", "--allow-any-host"]),
    (["--host", "::"], ["--host", "--allowed-host"]),
    (["--allowed-host", "*"], ["--allowed-host", "'*'", "pattern"]),
    (["--allowed-host", "*.example"], ["--allowed-host", "'*.example'", "pattern"]),
    (["--host", "0.0.0.0", "--allowed-host", "*.example"], ["'*.example'"]),
    (["--allowed-host", "wb.lan", "--allowed-host", "evil?.example"], ["'evil?.example'"]),
    (["--allowed-host", "wb.lan", "--allow-any-host"], ["--allow-any-host", "--allowed-host"]),
    (["--allowed-host", ""], ["--allowed-host"]),
])
def test_host_check_not_switched_off(monkeypatch, capsys, args, words):
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("Streamlit started"))
    code, _, err = run_cli(monkeypatch, capsys, "app", *args)
    assert_bad(code, err, *words)


def test_every_interface_with_a_named_host(monkeypatch, capsys):
    opts, err = _streamlit_options(monkeypatch, capsys, "--host", "0.0.0.0", "--allowed-host", "wb.lan")
    assert opts["--server.address"] == ["0.0.0.0"] and not err
    assert set(opts["--server.allowedHosts"]) == {"localhost", "127.0.0.1", "::1", "wb.lan"}


def test_concrete_address_allows_itself(monkeypatch, capsys):
    opts, _ = _streamlit_options(monkeypatch, capsys, "--host", "127.0.0.2")
    assert set(opts["--server.allowedHosts"]) == {"localhost", "127.0.0.1", "::1", "127.0.0.2"}


def test_allow_any_host_warns(monkeypatch, capsys):
    opts, err = _streamlit_options(monkeypatch, capsys, "--host", "0.0.0.0", "--allow-any-host")
    assert opts["--server.allowedHosts"] == ["*"]
    assert err.startswith("warning: --allow-any-host") and "DNS rebinding" in err


@pytest.mark.parametrize("args, word", [(["--host", "0.0.0.0"], "--host '0.0.0.0'"),
                                        (["--allowed-host", "*.example"], "--allowed-host '*.example'")])
def test_refused_by_the_real_command(args, word):
    """The installed entry point, as a user runs it: one line, exit 2, before Streamlit is imported."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "app", "--port", "8599", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert_bad(proc.returncode, proc.stderr, word)
    assert time.monotonic() - started < 30
