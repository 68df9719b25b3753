"""The CLI contract: --json prints only JSON, bad input exits 2 with one line, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def wb(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def assert_bad(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0]


def test_models_json():
    proc = wb("models", "--json")
    assert proc.returncode == 0
    rows = json.loads(proc.stdout)
    assert all({"name", "kind", "params", "source"} <= set(r) for r in rows)
    smol = [r for r in rows if r["name"] == "smollm2-135m"]
    assert smol and smol[0]["kind"] == "llm" and smol[0]["params"] == 134_515_008


def test_runs_list_empty_and_missing_run(tmp_path):
    env = {"WORKBENCH_RUNS": str(tmp_path)}
    proc = wb("runs", "list", "--json", env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    assert_bad(wb("runs", "show", "nope", env=env), "nope")
    assert_bad(wb("runs", "rm", "nope", env=env), "nope")


def test_unknown_model():
    assert_bad(wb("info", "gpt-17"), "unknown model", "gpt-17")


def test_missing_path():
    assert_bad(wb("info", "/no/such/model"), "does not exist")


def test_unreadable_path(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{not json")
    assert_bad(wb("info", str(d)), "cannot read")


def test_truncated_weights(tiny_llama_dir, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_llama_dir, bad)
    w = bad / "model.safetensors"
    w.write_bytes(w.read_bytes()[:1000])
    assert_bad(wb("info", str(bad)), "truncated")


def test_corrupt_weights(tiny_llama_dir, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_llama_dir, bad)
    (bad / "model.safetensors").write_bytes(b"garbage" * 10)
    assert_bad(wb("info", str(bad)), "corrupt")


def test_empty_prompt(tiny_llama_dir):
    assert_bad(wb("generate", str(tiny_llama_dir), "  "), "empty prompt")


def test_prompt_too_long(tiny_llama_dir):
    assert_bad(wb("generate", str(tiny_llama_dir), "word " * 300), "longer than the model's context")


def test_bad_device():
    assert_bad(wb("generate", "smollm2-135m", "x", "--device", "tpu"), "unknown device")


def test_usage_error_exit_2():
    proc = wb("runs", "list", "--no-such-flag")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.real
def test_generate_json_is_pure():
    proc = wb("generate", "smollm2-135m", "The capital of France is", "--max-new-tokens", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["continuation"].startswith(" Paris")
