"""``workbench attribute``: the JSON contract, a saved run, --help listing, bad input -> exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_helpers import assert_bad
from cli_helpers import run_cli as run_main

from attribution.dpa.tiny import save_tiny_llama


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return str(save_tiny_llama(tmp_path_factory.mktemp("dpa-cli") / "tiny", seed=4))


def wb(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def test_json_contract_and_saved_run(model_dir, monkeypatch, capsys):
    code, stdout, err = run_main(monkeypatch, capsys, "attribute", model_dir, "The capital of France is",
                                 "--target", " Paris", "--foil", " London", "--method", "dpa",
                                 "--level", "head", "--param", "w_q=0", "--json")
    assert code == 0, err
    out = json.loads(stdout)  # stdout holds the JSON object and nothing else
    assert {"model", "method", "level", "tokens", "axes", "scores", "target_logit", "seconds"} <= set(out)
    assert out["method"] == "dpa" and out["level"] == "head" and out["axes"] == ["layer", "head", "query"]
    assert out["tokens"] == ["The", "capital", "of", "France", "is"]
    assert len(out["scores"]) == 2 and len(out["scores"][0]) == 4 and len(out["scores"][0][0]) == 5
    assert out["params"] == {"w_q": 0} and out["seconds"] > 0
    from core.store import RunStore

    runs = RunStore().list()
    assert [r["id"] for r in runs] == [out["run"]] and runs[0]["method"] == "dpa"
    saved = RunStore().get(out["run"]).result()
    assert saved["level"] == "head" and saved["target_logit"] == pytest.approx(out["target_logit"])


def test_edge_and_human_output(model_dir, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "attribute", model_dir, "The capital of France is",
                              "--target", " Paris", "--level", "edge", "--no-save")
    assert code == 0, err
    assert "query_str" in out and "key_str" in out and "score" in out


def test_help_lists_methods_and_levels():
    proc = wb("attribute", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    from attribution.methods import METHODS

    for spec in METHODS.values():
        flat = text.replace("- ", "-").replace(" /", "/")
        assert f"{spec.name}: {'/'.join(spec.levels)}" in flat, spec.name


@pytest.mark.parametrize("args,words", [
    (["--method", "magic"], ["unknown method", "magic"]),
    (["--method", "ig", "--level", "head"], ["integrated_gradients", "no head level"]),
    (["--level", "layer"], ["unknown level"]),
    (["--target", "Paris London"], ["2 tokens"]),
    (["--foil", " Paris"], ["same token"]),
    (["--param", "w_z=1"], ["no parameter", "w_z"]),
    (["--param", "oops"], ["key=value"]),
])
def test_bad_input(model_dir, monkeypatch, capsys, args, words):
    base = {"--target": " Paris", "--method": "dpa", "--level": "token"}
    opts = dict(base)
    extra = []
    i = 0
    while i < len(args):
        if args[i] in base:
            opts[args[i]] = args[i + 1]
        else:
            extra += args[i:i + 2]
        i += 2
    flat = [x for kv in opts.items() for x in kv] + extra
    code, out, err = run_main(monkeypatch, capsys, "attribute", model_dir, "The capital of France is", *flat)
    assert out == ""
    assert_bad(code, err, *words)


def test_bad_prompt_and_model(model_dir, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "attribute", model_dir, "  ", "--target", " Paris")
    assert_bad(code, err, "empty prompt")
    code, _, err = run_main(monkeypatch, capsys, "attribute", "gpt-17", "hello", "--target", " Paris")
    assert_bad(code, err, "unknown model", "gpt-17")
