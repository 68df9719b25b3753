"""`workbench info` states a language model's architecture from its config.json without building it, and
the facts equal the loaded model's for every supported family."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_bad, run_cli
from family_models import save_family

import workbench as wb
from core.models.llm import describe
from core.models.zoo import resolve

FAMILIES = ("gpt2", "gpt_neox", "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2")


@pytest.mark.parametrize("family", FAMILIES)
def test_facts_from_the_config_equal_the_loaded_model(tmp_path, family, one_thread):
    path = save_family(tmp_path / family, family)
    facts = describe(resolve(str(path)))
    assert facts["arch"] == wb.load(str(path)).arch.to_dict()
    assert (facts["kind"], facts["backend"]) == ("llm", "transformer_lens")


def test_info_builds_nothing(tiny_llama_dir, tiny_llama, monkeypatch, capsys):
    import core.models.zoo

    def refuse(*args, **kwargs):
        raise AssertionError("info built the model")

    monkeypatch.setattr(core.models.zoo, "load", refuse)
    monkeypatch.setattr(wb, "load", refuse)
    code, out, err = run_cli(monkeypatch, capsys, "info", str(tiny_llama_dir), "--json")
    assert code == 0, err
    assert json.loads(out)["arch"] == tiny_llama.arch.to_dict()


def test_a_config_that_cannot_describe_the_model_is_one_line(tiny_llama_dir, tmp_path, monkeypatch, capsys):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_llama_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    del config["intermediate_size"]
    (bad / "config.json").write_text(json.dumps(config))
    code, out, err = run_cli(monkeypatch, capsys, "info", str(bad))
    assert_bad(code, err, "intermediate_size")


@pytest.mark.real
def test_real_models_facts_from_files(smollm2):
    assert describe(resolve("smollm2-135m"))["arch"] == smollm2.arch.to_dict()
