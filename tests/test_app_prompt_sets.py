"""Prompt sets page: a bundled prompt file attributed on a tiny Llama, the views, saving, a bad upload."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, frame_with, open_page, problems  # noqa: E402
from workbench.store import RunStore  # noqa: E402


@pytest.fixture
def page(tiny_llama_dir):
    return open_page("prompt_sets", {"sets_model": str(tiny_llama_dir), "sets_file": "ioi.jsonl",
                                     "sets_limit": 3, "sets_method": "dpa", "sets_level": "head",
                                     "sets_batch": 2})


def test_attribute_a_prompt_file(page):
    at = page
    assert not problems(at)
    at.button(key="sets_go").click().run()
    assert not problems(at), problems(at)
    table = frame_with(at, "top_item")
    assert len(table) == 3 and table["prompt"].iloc[0].startswith("When Alice and Robert")
    mean = chart(at, "sets_mean")
    assert mean["data"][0]["type"] == "heatmap"
    assert chart(at, "sets_one")["data"]
    before = len(RunStore().list())
    at.button(key="sets_save").click().run()
    assert not problems(at) and len(RunStore().list()) == before + 1


def test_methods_and_levels_follow_each_other(page):
    at = page
    at.selectbox(key="sets_method").set_value("rollout").run()
    assert not problems(at)
    assert at.selectbox(key="sets_level").options == ["token"]
