"""`workbench info --backend` takes the names `workbench attribute --backend` takes (tl, transformer_lens, nnsight,
bridge, any case), and refuses any other in one line, exit 2, as attribute does."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli


@pytest.mark.parametrize(("given", "loaded"), [("tl", "transformer_lens"), ("transformer_lens", "transformer_lens"),
                                               ("TL", "transformer_lens"), ("bridge", "bridge"),
                                               ("nnsight", "nnsight")])
def test_info_takes_attributes_backend_names(tiny_llama_dir, one_thread, monkeypatch, capsys, given, loaded):
    code, out, err = run_cli(monkeypatch, capsys, "info", str(tiny_llama_dir), "--backend", given, "--json")
    assert code == 0, err
    facts = json.loads(out)
    assert facts["arch"]["n_layers"] > 0 and facts["backend"] == loaded


@pytest.mark.parametrize("command", [("info",), ("attribute", "When Mary and John went", "--target", " Mary")])
def test_an_unknown_backend_reads_the_same_in_info_and_attribute(tiny_llama_dir, monkeypatch, capsys, command):
    code, out, err = run_cli(monkeypatch, capsys, command[0], str(tiny_llama_dir), *command[1:], "--backend", "hf")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "unknown --backend 'hf': tl, nnsight or bridge" in err
