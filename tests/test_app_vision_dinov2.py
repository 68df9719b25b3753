"""Vision page with dinov2-small: a real photograph's maps for a linear head and for the saliency decoder's
region, a region that does not fit (a message, no exception), the hard set at 224 px with its mask."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import array, chart, frame_with, open_page, problems  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

STATE = {"vit_model": "dinov2-small", "vit_methods": ["attention", "rollout"], "vit_source": "photo"}


def heat(at) -> list:
    return [array(t["z"]) for t in chart(at, "vit_overlay")["data"] if t["type"] == "heatmap"]


def test_photograph_head_and_saliency_region():
    at = open_page("vision", dict(STATE, vit_photo="cat"))
    assert not problems(at), problems(at)
    maps = heat(at)
    assert len(maps) == 2 and maps[0].shape == (224, 224)  # 16 x 16 patches of 14 px
    assert list(frame_with(at, "seconds")["method"]) == ["attention", "rollout"]
    assert at.session_state["vit_head"] == "saliency"  # a photograph: the decoder's saliency, no synthetic head
    at.sidebar.selectbox(key="vit_head").set_value("synthetic").run()
    assert not problems(at), problems(at)
    at.sidebar.selectbox(key="vit_head").set_value("saliency").run()
    assert not problems(at), problems(at)
    assert any("mean saliency in the region" in c.value for c in at.caption)
    before = heat(at)
    at.number_input(key="vit_x0").set_value(200).run()  # x0 > x1 (168): does not fit
    assert not at.exception
    assert any("not inside" in e.value for e in at.error)
    at.number_input(key="vit_x0").set_value(10).run()
    assert not problems(at)
    assert len(heat(at)) == 2 and [h.tolist() for h in heat(at)] != [h.tolist() for h in before]
    # the hard set at 224 px with its mask, explained by the hard head
    at.sidebar.selectbox(key="vit_head").set_value("hard").run()
    at.radio(key="vit_source").set_value("hard").run()
    assert not problems(at), problems(at)
    assert list(frame_with(at, "pointing_game")["method"]) == ["attention", "rollout"]
