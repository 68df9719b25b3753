"""Issue 17 in the app: explain any position, direct logit attribution, LLM patching, copy as code and links,
the first-token toggle, the head drill-down, target and foil, numbers and axes, vision, runs, the model page
and error placement. AppTest on a tiny random Llama and the shipped toy and ViT models."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import MAIN, array, chart, open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture
def attr(tiny_llama_dir):
    return open_page("attribution", {"attr_model": str(tiny_llama_dir), "attr_prompt": PROMPT,
                                     "attr_methods": ["dpa"]})


def share(at, key: str) -> str:
    return at.session_state[f"_share_{key}"]


def test_position_dla_code_and_link(attr, tiny_llama_dir):
    """Items 2, 3 and 5: a clicked token is the explained position; DLA is drawn; the code reproduces it."""
    at = attr
    assert not problems(at)
    code = share(at, "attr_tokens")
    assert f"m = wb.load({str(tiny_llama_dir)!r})" in code and "r = wb.attribute(m, " in code
    assert "method='dpa', level='token'" in code and "position=" not in code  # the last position: no argument
    assert at.query_params["prompt"] == PROMPT and at.query_params["method"] == "dpa"
    at.button_group(key="attr_position").set_value(2).run()  # " and": the prompt continues with " John"
    assert not problems(at)
    assert at.text_input(key="attr_target").value == " John"  # the prompt's own next token at 2
    assert "position=2" in share(at, "attr_tokens") and at.query_params["position"] == "2"
    scores = array(chart(at, "attr_tokens")["data"][0]["customdata"])
    assert np.all(scores[:, 3:] == 0) and np.any(scores[:, :3] != 0)  # later positions cannot move it
    if (Path(__file__).resolve().parents[1] / "attribution" / "dla.py").exists():
        heads = array(chart(at, "attr_dla_heads")["data"][0]["z"])
        assert heads.shape == (2, 4)
        acc = chart(at, "attr_dla_acc")["data"][0]
        assert list(acc["x"])[-1] == "final"
        assert "r = wb.dla(m, " in share(at, "attr_dla") and "position=2" in share(at, "attr_dla")


def test_a_link_reproduces_the_view(tiny_llama_dir):
    """Item 5: ?prompt=&target=&foil=&method=&position= opens the same view."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.query_params = {"model": str(tiny_llama_dir), "prompt": "The cat sat on the mat", "target": " mat",
                       "foil": " cat", "method": "dpa", "position": "3", "level": "head"}
    at.switch_page("pages/attribution.py")
    at.run()
    assert not problems(at)
    assert at.text_input(key="attr_target").value == " mat" and at.text_input(key="attr_foil").value == " cat"
    assert at.session_state["attr_position"] == 3
    assert "target=' mat', foil=' cat'" in share(at, "attr_tokens") and "position=3" in share(at, "attr_tokens")


def test_first_token_toggle_and_head_drill_down(attr):
    """Items 6 and 8: position 0 out of the colour scale by default (scores kept); the top head first; every
    key labelled; whole words among the pushed tokens."""
    at = attr
    tok = chart(at, "attr_tokens")["data"][0]
    raw, scaled = array(tok["customdata"])[0], array(tok["z"])[0]
    assert at.toggle(key="attr_tokens_skip0").value is True
    assert np.isclose(np.abs(scaled[1:]).max(), 1.0)  # scaled to the largest of positions 1..
    at.toggle(key="attr_tokens_skip0").set_value(False).run()
    tok = chart(at, "attr_tokens")["data"][0]
    assert np.allclose(array(tok["customdata"])[0], raw)  # scores unchanged
    assert np.isclose(np.abs(array(tok["z"])[0]).max(), 1.0)
    head_scores = at.session_state["_attr_cache"]
    res = next(v for k, v in head_scores.items() if k[-1] == "head")
    s = res.scores.sum(-1) if res.scores.dim() == 3 else res.scores
    top = divmod(int(s.abs().flatten().argmax()), s.shape[1])
    assert (at.selectbox(key="attr_layer").value, at.selectbox(key="attr_head").value) == top
    pattern = chart(at, "attr_pattern")
    n = len(pattern["data"][0]["x"])
    assert list(pattern["layout"]["xaxis"]["tickvals"]) == list(pattern["data"][0]["x"]) and n == 14
    assert "query" in str(pattern["data"][0]["text"][0][0]) and "key" in str(pattern["data"][0]["text"][0][0])
    words = [d.value for d in at.dataframe if "whole word" in d.value.columns][0]["whole word"]
    assert len(words) and all(eval(w).startswith(" ") and eval(w)[1:].isalpha() for w in words)  # noqa: S307


def test_target_and_foil_follow_the_user(attr):
    """Item 9: a typed foil survives a new prompt; "Mary" without its space is flagged, " Mary" offered."""
    at = attr
    at.text_input(key="attr_foil").set_value(" Mary").run()
    at.text_area(key="attr_prompt").set_value("Then Mary and John left, and John smiled at").run()
    assert not problems(at)
    assert at.text_input(key="attr_foil").value == " Mary"
    at.text_input(key="attr_target").set_value("John").run()
    assert any("no leading space" in w.value for w in at.warning)
    at.button(key="attr_target_spaced").click().run()
    assert at.text_input(key="attr_target").value == " John" and not problems(at)


def test_patching_the_llm_from_the_page(attr):
    """Item 4: swap names builds the corrupted prompt; each site's map is drawn, saved and given as code."""
    at = attr
    at.text_input(key="attr_target").set_value(" Mary").run()
    at.text_input(key="attr_foil").set_value(" John").run()
    at.button(key="attr_patch_swap").click().run()
    assert at.text_input(key="attr_patch_corrupt").value.startswith("When John and Mary")
    for site in ("resid", "heads"):
        at.radio(key="attr_patch_site").set_value(site).run()
        at.button(key="attr_patch_go").click().run()
        assert not problems(at)
        z = array(chart(at, "attr_patch_fig")["data"][0]["customdata"])
        assert z.shape == ((2, 14) if site == "resid" else (2, 4))
        assert f"site={site!r}" in share(at, "attr_patch") and "wb.patch(m, " in share(at, "attr_patch")
    at.button(key="attr_patch_save").click().run()
    assert [r["kind"] for r in RunStore().list()] == ["patch"]


def test_blackbox_numbers_axes_and_error_placement():
    """Items 10 and 14: errors in scientific notation, whole-number ticks; a refused bound turns the status
    red instead of 'done'."""
    at = open_page("blackbox", {"bb_d": 2, "bb_heads": 1, "bb_noise": 1e-9})
    at.button[0].click().run()
    assert not problems(at)
    heads = next(d for d in at.dataframe if "rel_error_W" in d.value.columns)
    assert "%.3e" in str(heads.proto.columns)  # NumberColumn format for the float columns
    fig = chart(at, "bb_recovered_0")
    assert fig["layout"]["yaxis"]["dtick"] == 1 and fig["layout"]["yaxis"]["autorange"] == "reversed"
    bad = open_page("blackbox", {"bb_d": 1, "bb_heads": 4, "bb_bound": 1, "bb_noise": 1e-9})
    bad.button[0].click().run()
    assert bad.error and all("done" not in s.label for s in bad.status)
    assert any("failed" in s.label for s in bad.status)


def test_noise_sweep_marks_failed_rows():
    """Item 10: a noise level whose recovery failed (infinite error) is drawn as a marked point."""
    from attribution.blackbox.noisy import NoiseSweep

    sw = NoiseSweep(d=2, heads=1, oversample=0, noise=[1e-8, 1e-3], rel_error_W=[1e-6, float("inf")],
                    rel_error_v=[1e-6, float("inf")], heads_recovered=[1, 0], queries=[15, 15],
                    outcome=["ok", "NoiseBreakdownError"])
    failed = [t for t in sw.plot().data if t.name == "failed: error infinite"]
    assert failed and list(failed[0].x) == [1e-3]


def test_head_grid_whole_number_ticks():
    """Item 10: the 2-layer x 1-head map has whole-number ticks (the toy grid's titles: test_app_toy_circuits)."""
    import torch

    from app.views import head_grid

    grid = head_grid(torch.randn(2, 1))
    assert grid.layout.yaxis.dtick == 1 and grid.layout.xaxis.dtick == 1


def test_vision_digits_warning_and_maps(monkeypatch):
    """Item 11: digits fed to a shapes-only ViT warn; maps are big with a colour bar and the mask outlined;
    metric headers say which way is better."""
    at = open_page("vision", {"vit_model": "vit-synth", "vit_methods": ["attention"]}, timeout=600)
    assert not problems(at)
    fig = chart(at, "vit_overlay")
    assert fig["layout"]["width"] >= 500 and any(t.get("showscale") for t in fig["data"] if t["type"] == "heatmap")
    contours = [t for t in fig["data"] if t["type"] == "contour"]
    assert contours and contours[0]["line"]["width"] >= 2
    table = next(d for d in at.dataframe if "method" in d.value.columns)
    labels = {k: v.get("label", "") for k, v in json.loads(table.proto.columns).items()}
    assert labels["deletion_auc"].endswith("↓") and labels["insertion_auc"].endswith("↑")
    at.radio(key="vit_source").set_value("digits").run()
    assert any("not among them" in w.value for w in at.warning)


def test_runs_list_and_compare_like_with_like(tiny_llama):
    """Item 12: level, method and prompt columns; Compare pairs runs of the same level by default."""
    import workbench as wb

    store = RunStore()
    wb.attribute(tiny_llama, "The cat sat", target=" on", method="dpa", level="token").save(store)
    wb.attribute(tiny_llama, "The dog sat", target=" on", method="dpa", level="head").save(store)
    wb.attribute(tiny_llama, "The cat ran", target=" on", method="dpa", level="token").save(store)
    at = open_page("runs")
    assert not problems(at)
    table = at.dataframe[0].value
    assert {"level", "prompt", "method"} <= set(table.columns)
    assert sorted(table["level"]) == ["head", "token", "token"]
    a, b = at.selectbox(key="runs_a").value, at.selectbox(key="runs_b").value
    assert store.get(a).meta["args"]["level"] == store.get(b).meta["args"]["level"] == "token"


def test_model_page_text_once_and_cache_by_memory(tiny_llama_dir, monkeypatch):
    """Item 13: the continuation is shown once, without special tokens; the cache evicts by bytes."""
    from app import common as C

    at = open_page("model", {"model_name": str(tiny_llama_dir)})
    assert not problems(at)
    texts = [c.value for c in at.code if c.language == "text"]
    assert sum(t.startswith("The capital of France is") for t in texts) == 1  # the continuation, once
    assert not any("<|im_end|>" in t for t in texts)
    assert any("m.generate(" in c.value for c in at.code if c.language == "python")
    monkeypatch.setattr(C, "HELD", {"big": [3e9, 1.0], "toy": [1e5, 2.0]})
    monkeypatch.setenv("WORKBENCH_APP_MODEL_MB", "2000")
    cleared = []
    monkeypatch.setattr(C.load_cached, "clear", lambda name: cleared.append(name))
    C._evict_for("toy")
    assert cleared == ["big"] and list(C.HELD) == ["toy"]


def test_upload_error_names_the_users_file(monkeypatch):
    """Item 14: a bad uploaded concept file is named as the user named it, not as a temporary file."""
    from types import SimpleNamespace

    from app import common as C
    from attribution.probes.activations import load_dataset

    errors = []
    monkeypatch.setattr(C.st, "error", errors.append)
    got = C.read_upload(SimpleNamespace(name="my_concepts.jsonl", getvalue=lambda: b"not json\n"), load_dataset,
                        "Cannot read")
    assert got is None and errors and "my_concepts.jsonl" in errors[0] and "/tmp" not in errors[0]
