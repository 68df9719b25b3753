"""Lens page: the layers x positions map, a cell's top-k list, the target per layer, bad input."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import array, chart, frame_with, open_page, problems  # noqa: E402


def test_grid_cell_list_and_target(tiny_llama_dir):
    at = open_page("lens", {"lens_model": str(tiny_llama_dir), "lens_prompt": "The capital of France is",
                            "lens_target": " Paris"})
    assert not problems(at)
    grid = chart(at, "lens_grid")["data"][0]
    probs = array(grid["z"])
    assert probs.shape == (3, 5)  # embed + 2 blocks, 5 tokens
    assert grid["y"] == ["embed", "L0", "L1"] and len(grid["text"][0]) == 5
    cell = frame_with(at, "rank")
    assert len(cell) == 5 and list(cell["probability"]) == sorted(cell["probability"], reverse=True)
    assert abs(float(cell["probability"].iloc[0]) - float(probs[2, 4])) < 1e-6  # the default cell: last, last
    target = frame_with(at, "layer")
    assert list(target["layer"]) == ["embed", "L0", "L1"] and target["rank"].min() >= 1
    at.selectbox(key="lens_layer").set_value("embed").run()
    at.selectbox(key="lens_pos").set_value(at.selectbox(key="lens_pos").options[1]).run()
    assert not problems(at)
    first = frame_with(at, "rank")
    assert abs(float(first["probability"].iloc[0]) - float(probs[0, 1])) < 1e-6


def test_tuned_without_a_lens_and_empty_prompt(tiny_llama_dir):
    at = open_page("lens", {"lens_model": str(tiny_llama_dir), "lens_kind": "tuned"})
    assert not at.exception
    assert any("no tuned lens" in w.value for w in at.warning)
    at.radio(key="lens_kind").set_value("logit").run()
    assert not problems(at)
    at.text_input(key="lens_prompt").set_value("  ").run()
    assert not at.exception and any("prompt is empty" in w.value for w in at.warning)


def test_a_click_selects_the_cell():
    from app.lens_view import selected_cell

    res = SimpleNamespace(tokens=["a", "b"], layers=["embed", "L0"])
    event = SimpleNamespace(selection=SimpleNamespace(points=[{"x": "1:'b'", "y": "L0"}]))
    assert selected_cell(event, res) == (1, 1)
    assert selected_cell(SimpleNamespace(selection=SimpleNamespace(points=[])), res) is None
