"""A hub look-up behind a network that never answers: a progress line on stderr, then one typed line that says
how to fetch the model, within seconds (not minutes of silence); the same for a remote (NDIF) model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def silent_server():
    """A TCP server that accepts every connection and never sends a byte (a stuck proxy or hub)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    srv.close()


# The messages prove which wait was used ("within 5 s", "within 2 s"); the clock only rules out a hang. A busy
# machine (CI beside other work) takes tens of seconds to start Python and import torch, so the guard is wide.
HANG_S = 60


def _run(args: list[str], env: dict[str, str], tmp_path) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HTTP", "HTTPS", "ALL_PROXY"))
             and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=2 * HANG_S,
                          env={**clean, "HF_HOME": str(tmp_path / "hf"), **env})
    return proc, time.monotonic() - started


@pytest.mark.parametrize("how", ["endpoint", "proxy"])
def test_info_on_a_silent_network_is_one_line_in_seconds(silent_server, tmp_path, how):
    # the default wait (5 s) through HF_ENDPOINT; a shorter one set by the user through a proxy
    env = {"HF_ENDPOINT": silent_server} if how == "endpoint" else \
        {"HTTPS_PROXY": silent_server, "WORKBENCH_HUB_TIMEOUT": "2"}
    proc, seconds = _run(["-m", "workbench.cli", "info", "someorg/somemodel"], env, tmp_path)
    assert seconds < HANG_S, seconds
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("looking up someorg/somemodel on the Hugging Face hub"), proc.stderr
    assert len(lines) == 2 and lines[1].startswith("error:") and "Traceback" not in proc.stderr, proc.stderr
    assert f"within {5 if how == 'endpoint' else 2} s" in lines[1] and "hf download someorg/somemodel" in lines[1]


def test_offline_setting_answers_at_once(tmp_path):
    proc, seconds = _run(["-m", "workbench.cli", "info", "someorg/somemodel"], {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert proc.returncode == 2 and "HF_HUB_OFFLINE is set" in proc.stderr and "hf download" in proc.stderr
    assert "looking up" not in proc.stderr and seconds < HANG_S


REMOTE = """
import workbench as wb
from core.errors import ModelFileError
try:
    wb.remote_model("openai-community/gpt2")
except ModelFileError as exc:
    print("TYPED", exc)
"""


@pytest.mark.parametrize("how", ["silent", "offline"])
def test_remote_model_offline_is_typed(silent_server, tmp_path, how):
    env = {"HF_ENDPOINT": silent_server, "WORKBENCH_HUB_TIMEOUT": "2"} if how == "silent" else \
        {"HF_HUB_OFFLINE": "1"}
    proc, seconds = _run(["-c", REMOTE], env, tmp_path)
    assert seconds < HANG_S, seconds
    assert proc.returncode == 0 and proc.stdout.startswith("TYPED model 'openai-community/gpt2'"), proc.stderr
    assert "hf download openai-community/gpt2 --include config.json" in proc.stdout
    assert ("within 2 s" if how == "silent" else "HF_HUB_OFFLINE") in proc.stdout


def test_lookup_answers_and_refusals(monkeypatch, capsys):
    """A hub that answers: the revision comes back; a missing repository is the hub's own error (not
    'unreachable'), so the one line says what the hub said."""
    import http.server
    import json

    from huggingface_hub import constants
    from huggingface_hub.errors import RepositoryNotFoundError

    from core.models import hub

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's name
            found = self.path.startswith("/api/models/someorg/real")
            body = json.dumps({"id": "someorg/real", "sha": "a" * 40} if found else {"error": "Repository not found"})
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Error-Code", "" if found else "RepoNotFound")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert hub.lookup("someorg/real") == "a" * 40
        assert "looking up someorg/real on the Hugging Face hub" in capsys.readouterr().err
        with pytest.raises(RepositoryNotFoundError):
            hub.lookup("someorg/missing")
    finally:
        server.shutdown()
