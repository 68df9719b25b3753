"""Attribution page: DPA on a tiny Llama (and, marked real, on smollm2 within the time budget)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import array, chart, frame_with, open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (Path(__file__).resolve().parents[1] / "attribution" / "dpa" / "engine.py").exists(),
    reason="the DPA engine is not in this checkout",
)


def token_scores(at) -> list:
    return array(chart(at, "attr_tokens")["data"][0]["customdata"])


@pytest.fixture
def page(tiny_llama_dir):
    state = {
        "attr_model": str(tiny_llama_dir),
        "attr_prompt": "When Mary and John went to the store, John gave",
        "attr_methods": ["dpa"],
    }
    return open_page("attribution", state)


def test_dpa_views_render_and_follow_the_prompt(page):
    at = page
    assert not problems(at)
    check_attention_tab_and_coloured_tokens(at)
    target = at.text_input(key="attr_target").value
    assert target, "target is suggested from the model's top prediction"
    before = token_scores(at)
    assert before.shape == (1, 11)  # one row per method, one column per prompt token
    assert chart(at, "attr_head_grid")["data"][0]["marker"]["symbol"] == "square"
    flow = chart(at, "attr_flow")  # the prompt's DPA circuit, through the app's graph component
    assert {"embed", "logits"} <= set(flow["data"][-1]["customdata"])
    held = at.session_state["_attr_flow_circuit"]
    at.slider(key="attr_flow_k").set_value(100).run()
    assert not problems(at) and at.session_state["_attr_flow_circuit"] is held  # k re-selects, no new scores
    assert "neuron" in frame_with(at, "neuron").columns
    at.text_area(key="attr_prompt").set_value("The cat sat on the").run()
    assert not problems(at)
    after = token_scores(at)
    assert after.shape == (1, 5)
    if "gradient" in at.multiselect(key="attr_methods").options:  # baselines side by side with DPA
        at.multiselect(key="attr_methods").set_value(["dpa", "gradient"]).run()
        assert not problems(at)
        assert token_scores(at).shape == (2, 5)


def test_faithfulness_tab_follows_the_ranking(page):
    at = page
    at.multiselect(key="attr_methods").set_value(["dpa", "random"]).run()
    at.radio(key="attr_faith_rank").set_value("abs").run()
    at.button(key="attr_faith_go").click().run()
    assert not problems(at)
    fig = chart(at, "attr_faith_fig")
    assert len(fig["data"]) == 4  # disrupt and recover for each method
    assert fig["data"][0]["y"][0] == 100  # disrupt(0) ablates nothing
    assert at.session_state["_attr_faith"][1].rank == "abs"
    at.radio(key="attr_faith_rank").set_value("signed").run()
    with pytest.raises(AssertionError, match="no chart"):  # the abs curves no longer match the settings
        chart(at, "attr_faith_fig")
    at.button(key="attr_faith_go").click().run()
    assert not problems(at)
    assert at.session_state["_attr_faith"][1].rank == "signed"


def test_clicked_head_changes_its_view(page):
    at = page
    effect = [m for m in at.metric if "direct logit effect" in m.label]
    start = (at.selectbox(key="attr_layer").value, at.selectbox(key="attr_head").value)
    assert effect and effect[0].label.startswith("L{}H{}".format(*start))  # the top-scoring head
    pattern = array(chart(at, "attr_pattern")["data"][0]["z"])
    other = (0, 0) if start != (0, 0) else (1, 3)
    at.selectbox(key="attr_layer").set_value(other[0]).run()
    at.selectbox(key="attr_head").set_value(other[1]).run()
    assert not problems(at)
    effect = [m for m in at.metric if "direct logit effect" in m.label]
    assert effect[0].label.startswith("L{}H{}".format(*other))
    assert array(chart(at, "attr_pattern")["data"][0]["z"]).tolist() != pattern.tolist()


def test_bad_input_is_a_message(page):
    at = page
    at.text_input(key="attr_target").set_value(" Paris and Rome").run()
    assert not at.exception
    assert any("tokens, not one" in e.value for e in at.error)
    at.text_input(key="attr_target").set_value(" Mary").run()
    assert not problems(at)
    at.text_input(key="attr_foil").set_value(" Mary").run()
    assert any("same token" in e.value for e in at.error)
    at.text_area(key="attr_prompt").set_value("").run()
    assert not at.exception
    assert any("prompt is empty" in w.value for w in at.warning)
    at.text_area(key="attr_prompt").set_value("The cat sat on the").run()
    assert not at.exception and any("same token" in e.value for e in at.error)  # typed values are kept
    at.text_input(key="attr_foil").set_value("").run()
    assert not problems(at) and at.text_input(key="attr_target").value == " Mary"


def test_save_then_open_from_the_store(page):
    at = page
    at.button(key="attr_save").click().run()
    assert not problems(at)
    runs = RunStore().list(kind="attribute")
    assert {r["method"] for r in runs} == {"dpa"} and len(runs) == 4  # token, head, neuron, edge
    token_run = next(r["id"] for r in runs if RunStore().get(r["id"]).meta["args"]["level"] == "token")
    at.selectbox(key="attr_open").set_value(token_run).run()
    assert not problems(at)
    saved = chart(at, "attr_saved_fig")
    assert saved["data"][0]["type"] == "bar"


@pytest.fixture
def server_threads():
    """The thread count the app server uses (app.common._server_threads): one on a two-core machine."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1 if (os.cpu_count() or 2) <= 2 else (os.cpu_count() or 2) // 2)
    yield
    torch.set_num_threads(n)


@pytest.mark.real
def test_smollm2_dpa_page_on_30_token_prompts(server_threads):
    """Fresh 30-token prompts on smollm2-135m: every DPA view is drawn for each new prompt.

    The 3 s goal is measured by scripts/bench_app_dpa.py, not by this test.
    """
    base = (
        "In the small town by the river, the baker opened his shop early every morning, and the "
        "children who walked past on their way to school "
    )
    state = {"attr_model": "smollm2-135m", "attr_prompt": "The capital of France is", "attr_methods": ["dpa"]}
    at = open_page("attribution", state, timeout=300)
    assert not problems(at)
    previous = None
    for end in ("asked for", "wished for"):
        at.text_area(key="attr_prompt").set_value(base + end).run()
        assert not problems(at)
        scores = token_scores(at)
        assert scores.shape == (1, 30)
        assert previous is None or not np.allclose(scores, previous)  # a new prompt, a new result
        previous = scores
        assert chart(at, "attr_head_grid") and chart(at, "attr_flow")  # every DPA view is drawn


def check_attention_tab_and_coloured_tokens(at) -> None:
    """The Attention tab (wb.attention's grid, then one head) and the coloured tokens under the token chart;
    called from the test above, which has the page open already (a page open costs 15-40 s)."""
    grid = chart(at, "attn_fig")  # a layer's heads (the tiny Llama: 4), tokens on both axes
    assert len(grid["data"]) == 4 and len(grid["data"][0]["x"]) == 11
    at.selectbox(key="attn_layer").set_value(1).run()
    at.selectbox(key="attn_head").set_value(2).run()
    one = chart(at, "attn_fig")
    assert not problems(at) and len(one["data"]) == 1 and "L1H2" in one["layout"]["title"]["text"]
    html = [el.proto.body for el in at.get("html")]
    assert any("wb-colored-tokens" in body and "\u00b7Mary" in body for body in html), html
