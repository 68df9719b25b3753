"""Toy circuits page on a shipped toy checkpoint: accuracy, patterns, ablation, patching, variants."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import array, chart, frame_with, open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402


def _toy() -> str | None:
    from core.models.zoo import list_models

    names = [e.name for e in list_models() if e.kind == "toy" and e.loader.startswith("circuits.")]
    return "ioi-attn-1l2h" if "ioi-attn-1l2h" in names else (names[0] if names else None)


TOY = _toy()
pytestmark = pytest.mark.skipif(TOY is None, reason="no toy checkpoint in data/models")


def test_toy_page_follows_its_widgets():
    at = open_page("toy_circuits", {"toy_model": TOY})
    assert not problems(at)
    labels = {m.label: m.value for m in at.metric}
    assert "accuracy" in labels and 0.0 <= float(labels["accuracy"]) <= 1.0
    grid = chart(at, "toy_patterns")
    first = [array(t["z"]).tolist() for t in grid["data"]]
    # keys are labelled on the bottom row only, so no panel title sits on the tick labels above it (issue 17)
    xaxes = {k: v for k, v in grid["layout"].items() if k.startswith("xaxis")}
    shown = [k for k, v in xaxes.items() if v.get("showticklabels")]
    layers = {a["text"].split("H")[0] for a in grid["layout"]["annotations"]}
    assert shown and len(shown) == len(xaxes) // len(layers)
    at.number_input(key="toy_example").set_value(7).run()
    assert not problems(at)
    assert [array(t["z"]).tolist() for t in chart(at, "toy_patterns")["data"]] != first
    mean_abl = frame_with(at, "component")
    at.radio(key="toy_ablation").set_value("zero").run()
    assert not problems(at)
    assert not frame_with(at, "component").equals(mean_abl)
    assert chart(at, "toy_patch_heads") and chart(at, "toy_patch_resid")
    spectra = chart(at, "toy_spectra")  # the shipped checkpoint stores training snapshots
    assert spectra["data"] and all(len(array(tr["x"])) > 1 for tr in spectra["data"])
    assert TOY in list(frame_with(at, "ffn")["model"])  # the FFN-variant table lists it
    at.button(key="toy_abl_save").click().run()
    assert [r["kind"] for r in RunStore().list()] == ["toy-ablation"]


def test_not_a_toy_model_is_a_message(tmp_path):
    at = open_page("toy_circuits", {"toy_model": str(tmp_path / "missing")})
    assert not at.exception
    assert any("does not exist" in e.value for e in at.error)


def test_fourier_bars_are_labelled_by_frequency():
    """The tallest bar's label is a reported key frequency (bars were labelled by index, one too low)."""
    at = open_page("toy_circuits", {"toy_model": "modadd-dense"})
    assert not problems(at)
    keys = [int(k) for k in next(m.value for m in at.metric if m.label == "key frequencies").split(", ")]
    bars = chart(at, "toy_four_spec")["data"][0]
    labels, heights = list(array(bars["x"])), [float(v) for v in array(bars["y"])]
    assert labels[0] == "1"
    assert int(labels[heights.index(max(heights))]) in keys
