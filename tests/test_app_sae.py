"""SAE page on a tiny word-level model and a random dictionary with stored dashboards and explanations:
features per position (position 0 hidden by default) with their explanations and simulation scores, a
dashboard opened by deep link, escaped contexts, an out-of-range id as a message, steering, and search by
token; on the real smollm2 and its shipped layer-6 SAE, a name feature among the IOI prompt's first rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, open_page, problems  # noqa: E402

HOOK = "blocks.0.hook_resid_post"
PROMPT = "the movie was very good"
TEXTS = ["the movie was very good and the meal was great . the book was bad",
         "it really was quite good . the movie was so bad and not nice"] * 8


@pytest.fixture(scope="module")
def sae_dir(tmp_path_factory) -> Path:
    import torch

    import workbench as wb
    from attribution.sae.dashboard import build_dashboards
    from attribution.sae.train import save_sae, training_sae
    from attribution.sae.units import open_dictionary
    from core.models.tiny import save_tiny

    root = tmp_path_factory.mktemp("sae")
    model_dir = save_tiny(root / "tiny-sae-model", name="tiny-sae-model")
    torch.manual_seed(0)
    sae = training_sae("topk", 16, 32, k=4, model=str(model_dir), hook=HOOK)
    path = save_sae(sae, root / "tiny-sae", {"model": str(model_dir), "hook": HOOK, "kind": "topk", "k": 4})
    m = wb.load(str(model_dir))
    db = build_dashboards(m, [open_dictionary(path)], n_tokens=300, ctx=16,
                          texts=[m.to_tokens(t)[0].tolist() for t in TEXTS])[0]
    db.save(path)
    from attribution.sae.explanation_store import save_explanations

    # hand-written explanations (the tiny model's held-out text is too short to build them)
    save_explanations(path, {"version": 1, "features": [
        {"text": f"feature {f} made readable", "short": f"readable {f}", "score": round(0.03 * f, 2),
         "rule": {"token": {"kind": "any"}, "level": 1.0}} for f in range(32)]})
    return path


def _page(sae_dir: Path, **state):
    return open_page("sae", {"sae_source": "other directory…", "sae_path": str(sae_dir), **state})


def test_prompt_features_hide_position_0_by_default(sae_dir):
    at = _page(sae_dir, sae_prompt=PROMPT)
    assert not problems(at)
    spec = chart(at, "sae_prompt_fig")
    assert len(spec["data"][0]["x"]) == len(PROMPT.split()) - 1  # position 0 left out
    assert "position 0 left out" in spec["layout"]["title"]["text"]
    table = at.dataframe[0].value
    assert {"feature", "explanation", "sim score", "activation", "÷ held-out max", "at"} <= set(table.columns)
    f = int(table["feature"][0])
    assert table["explanation"][0] == f"feature {f} made readable" and table["sim score"][0] == round(0.03 * f, 2)
    assert any(y.startswith(f"f{f} readable {f} · sim") for y in spec["data"][0]["y"])  # the heatmap's rows
    assert not table["at"].str.startswith("0:").any()
    per_position = at.dataframe[1].value  # every shown position has its own strongest features
    assert set(per_position["at"].str.split(":").str[0].astype(int)) <= set(range(1, len(PROMPT.split())))
    toggle = at.toggle(key="sae_show_first")
    assert "attention sink" in toggle.help
    toggle.set_value(True).run()
    assert not problems(at)
    assert len(chart(at, "sae_prompt_fig")["data"][0]["x"]) == len(PROMPT.split())


def test_deep_link_opens_a_dashboard_and_steers(sae_dir):
    from streamlit.testing.v1 import AppTest

    from app.testing import MAIN

    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.query_params["sae"] = str(sae_dir)
    from attribution.sae.dashboard import Dashboards

    live = str(int(Dashboards.load(sae_dir).tensors["density"].argmax()))
    at.query_params["feature"] = live
    at.switch_page("pages/sae.py")
    at.run()
    assert not problems(at)
    assert at.radio(key="sae_view").value == "Dashboard"
    assert at.text_input(key="sae_feature_text").value == live
    assert {"density", "max activation", "mean when firing", "simulation score"} <= {m.label for m in at.metric}
    assert f"feature {live} made readable" in at.subheader[0].value
    html = "".join(h.proto.body for h in at.html)
    assert "background:rgba" in html and "white-space:pre" in html
    at.text_input(key="sae_steer_prompt").set_value("the movie was").run()
    at.text_input(key="sae_target").set_value("good").run()
    at.button(key="sae_steer").click().run()
    assert not problems(at)
    assert any("p('good')" in m.label for m in at.metric)


def test_out_of_range_feature_is_a_message(sae_dir):
    at = _page(sae_dir, sae_view="Dashboard", sae_feature_text="32")
    assert not problems(at)
    assert any("out of range" in w.value and "0..31" in w.value for w in at.warning)
    assert not at.metric  # no dashboard of another feature is left on the page
    at.text_input(key="sae_feature_text").set_value("5").run()
    assert not problems(at) and at.metric


def test_search_by_exact_token(sae_dir):
    at = _page(sae_dir, sae_view="Search")
    at.text_input(key="sae_query").set_value("meal").run()
    assert not problems(at)
    rows = at.dataframe[0].value
    assert len(rows) and list(rows["max_activation"]) == sorted(rows["max_activation"], reverse=True)
    at.text_input(key="sae_query").set_value("zebra").run()
    assert any("does not occur" in e.value for e in at.error) and not at.exception


def test_missing_dictionary_is_a_message(tmp_path):
    at = open_page("sae", {"sae_source": "other directory…", "sae_path": str(tmp_path)})
    assert not at.exception
    assert any("not a dictionary directory" in e.value for e in at.error)


@pytest.mark.real
def test_ioi_prompt_shows_a_name_feature_in_the_first_rows():
    """The shipped layer-6 SAE's name feature (f2231, 10th by activation ÷ held-out max) is among the first five
    rows of the IOI prompt's features, with its explanation and score."""
    name = "smollm2-135m-L6-resid-topk2304"
    if not (Path(__file__).resolve().parents[1] / "data" / "saes" / name / "explanations.json.gz").exists():
        pytest.skip(f"{name} has no explanations")
    at = open_page("sae", {"sae_source": name}, timeout=300)
    assert not problems(at)
    table = at.dataframe[0].value
    first = table.head(5)
    assert 2231 in set(first["feature"]), table[["feature", "explanation"]]
    assert first["sim score"].notna().all() and first["explanation"].str.len().min() > 0
