"""Hardening of `workbench app`: its port is checked before Streamlit starts, uploads are capped, and the
WebSocket (where every byte of data flows) refuses a Host header that is not the app's (DNS rebinding)."""

from __future__ import annotations

import base64
import os
import socket

import pytest

from tests.cli_helpers import assert_bad, run_cli


@pytest.mark.parametrize("args, words", [
    (["--port", "99999"], ["--port", "65535"]), (["--port", "0"], ["--port"]), (["--port", "-1"], ["--port"]),
    (["--host", "999.1.1.300"], ["--host"]), (["--max-upload-mb", "0"], ["--max-upload-mb"]),
    (["--allowed-host", "a b"], ["--allowed-host"]),
])
def test_bad_app_options(monkeypatch, capsys, args, words):
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("Streamlit started"))
    code, out, err = run_cli(monkeypatch, capsys, "app", *args)
    assert_bad(code, err, *words)


def test_streamlit_options(monkeypatch, capsys):
    seen = {}

    def fake_execve(exe, cmd, env):
        seen["cmd"] = cmd
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", fake_execve)
    code, _, _ = run_cli(monkeypatch, capsys, "app", "--port", "8555", "--allowed-host", "wb.lan")
    cmd = seen["cmd"]
    opts = {}
    for k, v in zip(cmd, cmd[1:], strict=False):
        if k.startswith("--server."):
            opts.setdefault(k, []).append(v)
    assert opts["--server.port"] == ["8555"] and opts["--server.address"] == ["127.0.0.1"]
    assert opts["--server.maxUploadSize"] == ["25"]
    assert opts["--server.enableXsrfProtection"] == ["true"] and opts["--server.enableCORS"] == ["true"]
    assert set(opts["--server.allowedHosts"]) == {"localhost", "127.0.0.1", "::1", "wb.lan"}


def _upgrade(port: int, host_header: str, origin: str | None) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        key = base64.b64encode(os.urandom(16)).decode()
        req = (f"GET /_stcore/stream HTTP/1.1\r\nHost: {host_header}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               + (f"Origin: {origin}\r\n" if origin else "") + "\r\n")
        s.sendall(req.encode())
        return s.recv(1024).decode(errors="replace").split("\r\n")[0]


def test_dns_rebinding_host_refused(tmp_path):
    from app.serving import free_port, start_app, stop_app

    port = free_port()
    proc = start_app(port, tmp_path / "app.log")
    try:
        for name in ("127.0.0.1", "localhost"):
            assert " 101 " in _upgrade(port, f"{name}:{port}", f"http://{name}:{port}")
        # A rebinding page: its own name in Host and Origin (same-origin to the browser), pointing here.
        assert " 403 " in _upgrade(port, f"evil.example:{port}", f"http://evil.example:{port}")
        assert " 403 " in _upgrade(port, f"evil.example:{port}", None)
    finally:
        stop_app(proc)
