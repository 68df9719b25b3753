"""Bad input on the nnsight backend is one typed line: an engine the backend still refuses, ``remote=True`` with no
server (a refused port), and a server that answers HTTP but is not NDIF. The CLI's own path (exit 2, one
``error:`` line) is checked where the CLI reaches the backend: ``workbench info --backend``."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest
from cli_helpers import assert_bad, run_cli

import workbench as wb
from core.errors import BackendError, WorkbenchError

CLEAN = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def nn(tiny_llama_dir, tiny_llama, one_thread):
    return wb.load(str(tiny_llama_dir), backend="nnsight")


def _one_line(err: pytest.ExceptionInfo, *words: str) -> None:
    msg = str(err.value)
    assert isinstance(err.value, WorkbenchError) and "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


IOI = [{"prompt": CLEAN, "target": " Mary", "foil": " John"}]


def test_an_engine_a_backend_still_refuses_is_one_line(nn, tiny_llama_dir, tiny_gpt2_dir, monkeypatch):
    """What still refuses: circuits on the bridge for a non-Llama attention (its split heads are computed for
    Llama-style attention only), the internals on a non-Llama family through nnsight, circuits on a remote model
    (their backward runs after the trace)."""
    bridge = wb.load(str(tiny_gpt2_dir), backend="bridge")
    with pytest.raises(BackendError) as err:
        wb.circuit(bridge, IOI, method="eap", edges=5, evaluate=False)
    _one_line(err, "circuit", "bridge backend", "per-head q/k/v inputs")
    gpt2 = wb.load(str(tiny_gpt2_dir), backend="nnsight")
    with pytest.raises(BackendError) as err:
        wb.attribute(gpt2, CLEAN, target=" Mary", method="dpa")
    _one_line(err, "dpa", "nnsight backend", "Llama-style")
    monkeypatch.setattr(nn, "remote", True)
    with pytest.raises(BackendError) as err:
        wb.circuit(nn, IOI, method="eap", edges=5, evaluate=False)
    _one_line(err, "circuit", "nnsight backend", "remote trace cannot return")


def _remote(nn, monkeypatch, host: str) -> None:
    from nnsight import CONFIG

    monkeypatch.setenv("WORKBENCH_REMOTE_TIMEOUT", "2")
    monkeypatch.setattr(CONFIG.API, "HOST", host)
    monkeypatch.setattr(nn, "remote", True)
    monkeypatch.setattr(nn, "_ndif_checked", False)
    monkeypatch.setattr(nn, "_param_cache", None)
    monkeypatch.setattr(nn, "_rope_cache", {})


def test_remote_with_no_server_is_one_line(nn, monkeypatch):
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _remote(nn, monkeypatch, f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(BackendError) as err:
        wb.attribute(nn, CLEAN, target=" Mary", foil=" John", method="gradient", level="token")
    assert time.monotonic() - started < 60  # no hang (the figure itself is not a speed claim)
    _one_line(err, "NDIF", "did not answer")


class _NotNDIF(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        body = b"<html>a web server, not NDIF</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):  # quiet
        pass


def test_a_server_that_is_not_ndif_is_one_line(nn, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotNDIF)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _remote(nn, monkeypatch, f"http://127.0.0.1:{server.server_address[1]}")
        # nnsight names the model by its hub id, canonicalised through the hub: a local folder has none, so the
        # canonical id is given here (no network) and the request reaches the server
        from nnsight.modeling import huggingface

        monkeypatch.setitem(huggingface._ID_CACHE, nn.lm.repo_id, "HuggingFaceTB/SmolLM2-135M-Instruct")
        started = time.monotonic()
        with pytest.raises(BackendError) as err:
            wb.attribute(nn, CLEAN, target=" Mary", foil=" John", method="dpa", level="token")
        assert time.monotonic() - started < 60
        _one_line(err, "nnsight remote trace", "an NDIF server")
    finally:
        server.shutdown()
        server.server_close()


def test_cli_backend_refusal_is_one_line_exit_2(tiny_llama_dir, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "info", str(tiny_llama_dir), "--backend", "nnsite")
    assert_bad(code, err, "nnsite")
