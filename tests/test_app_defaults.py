"""Issue 28, defaults that misled: the IOI foil, the foil after a position change, integer layer axes,
whole-number log ticks, the Vision outline's colour."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, open_page, problems  # noqa: E402

IOI = ["When", " Mary", " and", " John", " went", " to", " the", " store", ",", " John", " gave", " a", " drink",
       " to"]


def test_the_default_foil_is_the_other_name():
    from app.attr_inputs import suggestions

    tops = [(" Mary", 0.5), (" the", 0.2), (" them", 0.1), (" John", 0.05)]
    ppass = SimpleNamespace(tokens=IOI, tops=[tops] * len(IOI), top=tops)
    assert suggestions(ppass, len(IOI) - 1) == (" Mary", " John")
    # no candidate in the prompt: the model's best other token
    plain = [(" Paris", 0.6), (" the", 0.1)]
    assert suggestions(SimpleNamespace(tokens=["The", " capital", " is"], tops=[plain] * 3, top=plain), 2) == (
        " Paris", " the")


def test_a_typed_foil_follows_a_new_position(tiny_llama_dir):
    prompt = "When Mary and John went to the store, John gave a drink to"
    at = open_page("attribution", {"attr_model": str(tiny_llama_dir), "attr_prompt": prompt, "attr_methods": ["dpa"]})
    at.text_input(key="attr_foil").set_value(" John").run()
    at.button_group(key="attr_position").set_value(9).run()  # ' John': the prompt continues with ' gave'
    assert not problems(at)
    assert at.text_input(key="attr_target").value == " gave"
    assert at.text_input(key="attr_foil").value != " John"  # the old foil went with the old target
    # a pair typed together stays over a position change
    at.text_input(key="attr_target").set_value(" Mary").run()
    at.text_input(key="attr_foil").set_value(" John").run()
    at.button_group(key="attr_position").set_value(11).run()
    assert (at.text_input(key="attr_target").value, at.text_input(key="attr_foil").value) == (" Mary", " John")


def test_head_grid_layer_axis_is_the_models_layers():
    import torch

    from app.views import head_grid

    fig = head_grid(torch.randn(30, 9))
    assert tuple(fig.layout.yaxis.range) == (-0.5, 29.5) and fig.layout.yaxis.dtick == 1
    assert tuple(fig.layout.xaxis.range) == (-0.5, 8.5)


def test_log_axes_read_as_whole_numbers():
    from circuits.plot import faithfulness_figure, log_ticks

    ticks = log_ticks(8, 300)
    assert ticks["ticktext"] == ["10", "20", "50", "100", "200"] and ticks["type"] == "log"
    assert log_ticks(1, 49152)["ticktext"] == ["1", "10", "100", "1,000", "10,000", "100,000"][: len(
        log_ticks(1, 49152)["ticktext"])]
    fig = faithfulness_figure({"dpa": {"k": [8, 16, 32, 64, 128, 256], "normalized": [0.1] * 6, "auc": 0.5}})
    assert all(t.replace(",", "").isdigit() for t in fig.layout.xaxis.ticktext)


def test_lens_rank_axis_ticks(tiny_llama_dir):
    at = open_page("lens", {"lens_model": str(tiny_llama_dir), "lens_prompt": "The capital of France is",
                            "lens_target": " Paris"})
    assert not problems(at)
    axis = chart(at, "lens_target_chart")["layout"]["yaxis2"]
    assert axis["type"] == "log" and all(t.replace(",", "").isdigit() for t in axis["ticktext"])
    texts = [t for row in chart(at, "lens_grid")["data"][0]["text"] for t in row]
    assert texts and all(t.strip() for t in texts)  # no blank top-token text


def test_vision_outline_is_white_on_black():
    import torch

    from attribution.vit.maps import PatchMap, overlay_figure

    pm = PatchMap(torch.rand(1, 2, 2), "attention", torch.tensor([0]), patch_size=4)
    mask = torch.zeros(1, 8, 8, dtype=torch.bool)
    mask[0, 2:6, 2:6] = True
    fig = overlay_figure(torch.rand(1, 3, 8, 8), {"attention": pm}, [0], masks=mask)
    contours = [t for t in fig.data if t.type == "contour"]
    # coloring "lines" takes the colour from the colour scale, so the scale must be the one colour
    assert {c.colorscale[0][1] for c in contours} == {"black", "white"}
    assert all(c.colorscale[0][1] == c.colorscale[-1][1] for c in contours)
