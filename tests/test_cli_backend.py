"""``workbench attribute --backend tl|nnsight|bridge`` and ``--remote``: the numbers of the default backend on the
others, and every bad input one ``error:`` line with exit 2, checked before a model (or torch, in a fresh
interpreter) loads: an unknown backend, an engine the chosen backend refuses on the model, ``--remote`` off nnsight
or with a name that is no hub id, no NDIF server reachable (the host named), a server that answers but is not
NDIF (a local http.server), and a backend other than tl sent to jobs."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest
from backend_checks import fresh_cli_refusals
from cli_helpers import assert_bad, run_cli

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: these refusals need none."""
    import core.models.zoo as zoo
    import workbench

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(zoo, "load", boom)
    monkeypatch.setattr(workbench, "load", boom)
    monkeypatch.setattr(workbench, "remote_model", boom)


def _attr(model, *extra: str) -> list[str]:
    return ["attribute", str(model), PROMPT, "--target", " Mary", "--foil", " John", "--no-save", *extra]


def _free_port() -> int:
    with socket.socket() as s:  # free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NotNDIF(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = b"<html>a web server, not NDIF</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _LikeNDIF(_NotNDIF):
    def do_GET(self):  # noqa: N802
        body = json.dumps({"deployments": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server(request):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), request.param)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_unknown_backend(no_model, tiny_llama_dir, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, *_attr(tiny_llama_dir, "--backend", "nnsite"))
    assert_bad(code, err, "unknown --backend 'nnsite'", "tl, nnsight or bridge")


def test_an_engine_the_backend_refuses(no_model, tiny_gpt2_dir, monkeypatch, capsys):
    """GPT-2 on nnsight has the hooks, not every internal: DPA refuses from config.json alone; a hook-only method
    passes the check (and would load)."""
    code, _, err = run_cli(monkeypatch, capsys, *_attr(tiny_gpt2_dir, "--backend", "nnsight", "--method", "dpa"))
    assert_bad(code, err, "dpa does not run on the nnsight backend", "gpt2", "--backend tl")
    code, _, err = run_cli(monkeypatch, capsys, *_attr(tiny_gpt2_dir, "--backend", "nnsight", "--method", "rollout"))
    assert code != 0 and "a model was loaded" in err, err  # the check let it through to the (failing) loader


def test_remote_needs_nnsight_and_a_hub_id(no_model, tiny_llama_dir, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, *_attr("org/model", "--remote"))
    assert_bad(code, err, "--remote", "--backend nnsight", "transformer_lens")
    code, _, err = run_cli(monkeypatch, capsys, *_attr(tiny_llama_dir, "--backend", "nnsight", "--remote"))
    assert_bad(code, err, "--remote takes the hub id")


def test_remote_without_a_reachable_server_names_the_host(no_model, monkeypatch, capsys):
    host = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("NDIF_HOST", host)
    monkeypatch.setenv("WORKBENCH_REMOTE_TIMEOUT", "2")
    code, _, err = run_cli(monkeypatch, capsys, *_attr("org/model", "--backend", "nnsight", "--remote"))
    assert_bad(code, err, f"NDIF at {host} did not answer within 2 s")


def test_remote_without_a_network_names_ndifs_own_host(no_model, monkeypatch, capsys, tmp_path):
    """nnsight's shipped host (no NDIF_HOST, no user config): here there is no network, so it does not answer."""
    monkeypatch.delenv("NDIF_HOST", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("WORKBENCH_REMOTE_TIMEOUT", "2")
    code, _, err = run_cli(monkeypatch, capsys, *_attr("org/model", "--backend", "nnsight", "--remote"))
    assert_bad(code, err, "NDIF at https://api.ndif.us did not answer within 2 s")


@pytest.mark.parametrize("server", [_NotNDIF], indirect=True)
def test_a_server_that_is_not_ndif(no_model, server, monkeypatch, capsys):
    monkeypatch.setenv("NDIF_HOST", server)
    code, _, err = run_cli(monkeypatch, capsys, *_attr("org/model", "--backend", "nnsight", "--remote"))
    assert_bad(code, err, f"{server} answered but is not an NDIF server", "HTTP 200, text/html")


@pytest.mark.parametrize("server", [_LikeNDIF], indirect=True)
def test_a_server_answering_as_ndif_passes_the_check(server):
    from core.models.nnsight_ndif import check_ndif

    check_ndif(server, timeout=10, identify=True)  # no exception: NDIF's /status shape


def test_another_backend_is_not_sent_to_jobs(no_model, tiny_llama_dir, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, *_attr(tiny_llama_dir, "--backend", "nnsight", "--workers", "2"))
    assert_bad(code, err, "runs in this process", "--workers")


@pytest.mark.parametrize("backend", ["nnsight", "bridge"])
def test_the_backends_give_the_default_backends_numbers(tiny_llama_dir, monkeypatch, capsys, backend):
    import torch

    def scores(*extra: str) -> tuple[torch.Tensor, dict]:
        code, out, err = run_cli(monkeypatch, capsys, *_attr(tiny_llama_dir, "--method", "gradient", "--level",
                                                              "head", "--json", *extra))
        assert code == 0, err
        res = json.loads(out)
        return torch.tensor(res["scores"], dtype=torch.float64), res

    ref, ref_json = scores()
    got, got_json = scores("--backend", backend)
    assert "backend" not in ref_json and got_json["backend"] == backend
    scale = float(ref.abs().max())
    assert scale > 0 and float((got - ref).abs().max()) <= 1e-4 * scale


def test_the_refusals_import_neither_torch_nor_nnsight(tiny_gpt2_dir, tmp_path):
    """In a fresh interpreter, as a user runs the command: each refusal is exit 2 with torch and nnsight never
    imported (they cost seconds)."""
    cases = [_attr("org/model", "--backend", "nnsite"), _attr(tiny_gpt2_dir, "--backend", "nnsight"),
             _attr("org/model", "--remote"), _attr("org/model", "--backend", "nnsight", "--remote")]
    got, errors, stderr = fresh_cli_refusals(cases, tmp_path, NDIF_HOST=f"http://127.0.0.1:{_free_port()}",
                                             WORKBENCH_REMOTE_TIMEOUT="2")
    assert got == {"codes": [2] * len(cases), "heavy": []}, (got, stderr)
    assert len(errors) == len(cases)
