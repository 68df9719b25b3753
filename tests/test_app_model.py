"""Model page: zoo or local path, architecture facts, quick generate, bad input."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import frame_with, open_page, problems  # noqa: E402


def test_local_model_shows_architecture_and_generates(tiny_llama_dir):
    at = open_page("model", {"model_name": str(tiny_llama_dir)})
    assert not problems(at)
    facts = frame_with(at, "fact")
    arch = dict(zip(facts["fact"], facts["value"], strict=True))
    assert arch["n_layers"] == "2" and arch["n_heads"] == "4" and arch["n_kv_heads"] == "2"
    first = at.code[0].value
    assert first.startswith("The capital of France is")
    at.text_input(key="model_prompt").set_value("Once upon a time").run()
    assert not problems(at)
    assert at.code[0].value.startswith("Once upon a time") and at.code[0].value != first
    at.button(key="model_save").click().run()
    assert any("Saved as run" in s.value for s in at.success)


def test_bad_path_and_empty_prompt_keep_the_session(tiny_llama_dir, tmp_path):
    at = open_page("model", {"model_name": str(tmp_path / "nowhere")})
    assert not at.exception
    assert any("does not exist" in e.value for e in at.error)
    at.text_input(key="model_name_path").set_value(str(tiny_llama_dir)).run()
    assert not problems(at)
    at.text_input(key="model_prompt").set_value("   ").run()
    assert not at.exception
    assert any("prompt is empty" in w.value for w in at.warning)
