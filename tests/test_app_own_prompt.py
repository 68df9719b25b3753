"""The app on a researcher's own prompt (issue 37 item 1): a new prompt on the Circuits and Feature graph pages
fills target and foil from the model's own prediction (counterfactual cleared, mean ablation), so the page draws
a circuit with no field fixed by hand; an empty or over-long prompt is a message; a negative or falling
faithfulness curve gets one note."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, open_page, problems, texts  # noqa: E402

FACT = "The Eiffel Tower is located in the city of"


def _top_two(model_dir, prompt):
    import torch

    import workbench as wb

    m = wb.load(str(model_dir))
    with torch.no_grad():
        logits = m.logits(m.to_tokens(prompt))[0, -1]
    return [m.decode([int(i)]) for i in logits.topk(2).indices]


def test_circuits_follow_a_new_prompt(tiny_llama_dir, one_thread):
    at = open_page("circuits", {"circ_model": str(tiny_llama_dir)})
    assert not problems(at)
    assert at.text_input(key="circ_target").value == " Mary"  # the IOI example keeps its own fields
    at.text_area(key="circ_prompt").set_value(FACT).run()
    assert not problems(at), problems(at)
    top = _top_two(tiny_llama_dir, FACT)
    assert at.text_input(key="circ_target").value == top[0]
    assert at.text_input(key="circ_foil").value not in ("", " John", top[0])
    assert at.text_area(key="circ_corrupt").value == ""
    assert at.selectbox(key="circ_ablation").value == "mean"
    assert any("Filled from the model's prediction" in c for c in texts(at, "caption"))
    assert "logits" in chart(at, "circ_graph_dpa")["data"][-1]["customdata"]
    # a typed target survives the next prompt; the foil still follows
    at.text_input(key="circ_target").set_value(" the").run()
    at.text_area(key="circ_prompt").set_value("The capital of France is").run()
    assert not problems(at)
    assert at.text_input(key="circ_target").value == " the"


def test_circuits_bad_prompts_are_messages(tiny_llama_dir, one_thread):
    at = open_page("circuits", {"circ_model": str(tiny_llama_dir)})
    at.text_area(key="circ_prompt").set_value("   ").run()
    assert not at.exception
    assert any("prompt is empty" in w for w in texts(at, "warning"))
    at.text_area(key="circ_prompt").set_value("word " * 400).run()  # past the model's 128 positions
    assert not at.exception
    assert at.error and all("\n" not in e.value for e in at.error)
    at.text_area(key="circ_prompt").set_value(FACT).run()  # nothing lost: the page works again
    assert not problems(at) and "logits" in chart(at, "circ_graph_dpa")["data"][-1]["customdata"]


def test_feature_graph_follows_a_new_prompt(tiny_llama_dir, one_thread):
    at = open_page("feature_graph", {"fg_model": str(tiny_llama_dir)})
    assert not at.exception
    assert at.text_input(key="fg_target").value == " Mary"
    at.text_input(key="fg_prompt").set_value(FACT).run()
    assert not at.exception
    assert at.text_input(key="fg_target").value == _top_two(tiny_llama_dir, FACT)[0]
    assert at.text_input(key="fg_foil").value != " John"
    at.text_input(key="fg_prompt").set_value("").run()
    assert not at.exception and any("prompt is empty" in w for w in texts(at, "warning"))


@pytest.mark.parametrize("normalized,empty,says", [
    ([0.2, 0.5, 0.9], 0.0, None),
    ([-0.2, -0.1, -0.05], 0.0, "below zero"),
    ([0.5, 0.1, 0.9], 0.0, "non-monotone"),
    ([-0.3, 0.2, 0.4], 2.0, "empty circuit already scores"),
])
def test_curve_note(normalized, empty, says):
    from app.circuit_views import curve_note
    from circuits.evaluate import Faithfulness

    f = Faithfulness(k=[1, 5, 10], normalized=normalized, complement=[0.0] * 3, metric_full=2.0,
                     metric_empty=empty, auc=0.0)
    note = curve_note({"dpa": f})
    assert (note is None) if says is None else (says in note and "mean ablation" in note)


def _flow_edges(at) -> int:
    import re

    title = chart(at, "attr_flow")["layout"]["title"]["text"]
    return int(re.search(r"DPA circuit: (\d+) of", title)[1])


def test_information_flow_shows_a_capped_circuit_and_the_neurons_figure(tiny_llama_dir, one_thread):
    """A non-IOI prompt opens on a connected circuit (not 'raise k'), within the slider's cap at every k;
    the Neurons tab draws its top neurons by layer and position beside the table."""
    at = open_page("attribution", {"attr_model": str(tiny_llama_dir), "attr_prompt": FACT, "attr_methods": ["dpa"]})
    assert not problems(at), problems(at)
    drawn = _flow_edges(at)
    assert 0 < drawn <= at.slider(key="attr_flow_k").value
    assert any("strongest connected circuit" in c for c in texts(at, "caption"))
    for k in (5, 100):
        at.slider(key="attr_flow_k").set_value(k).run()
        assert not problems(at)
        n = _flow_edges(at)
        assert 0 < n and (n <= k or any("none smaller fits" in c for c in texts(at, "caption")))
    neurons = chart(at, "attr_neurons_fig")
    assert neurons["layout"]["title"]["text"] == "Top neurons by layer and position"
    assert sum(len(t["x"]) for t in neurons["data"]) == 25  # the table's 25 neurons, each placed


@pytest.mark.slow  # the SAE page imports SAELens (about 10 s)
def test_sae_names_lead_with_what_tells_them_apart():
    at = open_page("sae", {"sae_source": "other directory…", "sae_path": ""})
    assert not at.exception
    shown = at.sidebar.selectbox(key="sae_source").options
    if any("smollm2-135m" in o for o in shown):  # the shipped dictionaries
        assert "L6-resid-topk2304 · smollm2-135m" in shown


def test_the_toolbar_is_minimal():
    from app.launch import with_minimal_toolbar

    argv = with_minimal_toolbar(["app.launch", "run", "app/main.py", "--server.port", "8501"])
    assert argv[-2:] == ["--client.toolbarMode", "minimal"]  # no Deploy button
    chosen = ["x", "run", "m.py", "--client.toolbarMode=viewer"]
    assert with_minimal_toolbar(chosen) == chosen  # a mode the caller chose stays
