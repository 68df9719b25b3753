"""`workbench recover-heads`: JSON keys, run store, one-line errors with exit code 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

KEYS = {"queries", "expected_queries", "max_query_length", "heads_true", "heads_recovered",
        "max_rel_error_W", "max_rel_error_v", "seconds"}
ROOT = Path(__file__).resolve().parent.parent


def _cli(args, runs, timeout=300):
    env = {"WORKBENCH_RUNS": str(runs), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "workbench.cli", "recover-heads", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_json_keys_counts_and_saved_run(tmp_path):
    r = _cli(["--d", "3", "--heads", "2", "--bound", "3", "--seed", "1", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert KEYS <= out.keys()
    assert out["queries"] == out["expected_queries"] == 4 * 3 * 9 - 6 + 1
    assert out["max_query_length"] == 7 and out["heads_true"] == out["heads_recovered"] == 2
    assert out["max_rel_error_W"] < 1e-6 and out["max_rel_error_v"] < 1e-6
    from core.store import RunStore

    run = RunStore(tmp_path).get(out["run"])
    assert run.kind == "recover-heads" and set(run.tensors()) >= {"W", "v", "W_true", "v_true"}


def _inproc(args, runs, monkeypatch):
    """In-process run (shares the torch import across tests); success paths only."""
    from typer.testing import CliRunner

    from workbench.cli import app

    monkeypatch.setenv("WORKBENCH_RUNS", str(runs))
    r = CliRunner().invoke(app, ["recover-heads", *args])
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads(r.stdout)


def test_noise_run_saves_error_vs_noise_figure(tmp_path, monkeypatch):
    out = _inproc(["--d", "2", "--heads", "1", "--noise", "1e-9", "--json"], tmp_path, monkeypatch)
    assert out["noise"] == 1e-9 and 1e-9 in out["noise_sweep"]["noise"]
    run_dir = tmp_path / out["run"]
    assert (run_dir / "error_vs_noise.plotly.json").exists() and (run_dir / "noise_sweep.csv").exists()


def test_ffn_run(tmp_path, monkeypatch):
    out = _inproc(["--d", "3", "--heads", "2", "--ffn", "--json", "--no-save"], tmp_path, monkeypatch)
    assert KEYS <= out.keys() and out["agreement_region"] < 1e-9 and "run" not in out


def _oracle_file(tmp_path, body):
    f = tmp_path / "my_oracle.py"
    f.write_text("import numpy as np\n\ndef f(X):\n    return " + body + "\n")
    return f"{f}:f"


@pytest.mark.parametrize("args", [
    ["--d", "0", "--heads", "2"],
    ["--d", "3", "--heads", "0"],
    ["--d", "3", "--heads", "2", "--bound", "1"],
    ["--heads", "2"],
    ["--d", "3", "--heads", "1", "--oracle", "NAN"],
    ["--d", "3", "--heads", "1", "--oracle", "SHAPE"],
    ["--d", "3", "--heads", "1", "--oracle", "nosuchmodule_xyz:f"],
    ["--model", "no-such-toy-model"],
    ["--d", "3", "--heads", "1", "--noise", "-1"],
])
def test_bad_input_one_line_exit_2(tmp_path, args):
    args = [_oracle_file(tmp_path, "float('nan')") if a == "NAN" else
            _oracle_file(tmp_path, "np.zeros(3)") if a == "SHAPE" else a for a in args]
    r = _cli(args, tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert r.stdout == ""


def test_user_oracle_file_runs(tmp_path, monkeypatch):
    body = "float(np.exp(X @ X[-1]) @ X[:, 0] / np.exp(X @ X[-1]).sum())"  # W = I, v = e_0
    out = _inproc(["--d", "2", "--heads", "1", "--oracle", _oracle_file(tmp_path, body), "--json"], tmp_path,
                  monkeypatch)
    assert out["heads_recovered"] == 1 and out["queries"] == 4 * 4 - 2 + 1
    assert out["heads_true"] is None  # a user oracle has no known truth
    from core.store import RunStore

    W = RunStore(tmp_path).get(out["run"]).tensors()["W"][0]
    assert abs(W - __import__("torch").eye(2, dtype=W.dtype)).max() < 1e-6


@pytest.mark.slow
def test_trained_toy_run_says_within_tolerance(tmp_path):
    pytest.importorskip("transformer_lens")
    r = _cli(["--model", "tiny-attn", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["within_tolerance"] is True and out["tolerance"] == 1e-4
    assert out["max_rel_error_W"] < 1e-4 and out["max_rel_error_v"] < 1e-4
    assert out["queries"] == out["expected_queries"]
