"""SAE page on a tiny random SAE over a tiny word-level model: prompt features, dashboard, search."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import open_page, problems  # noqa: E402
from workbench.store import RunStore  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (Path(__file__).resolve().parents[1] / "attribution" / "sae" / "dashboard.py").exists(),
    reason="the SAE engine is not in this checkout",
)
HOOK = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def sae_dir(tmp_path_factory) -> Path:
    import torch

    from attribution.probes.tiny import save_tiny
    from attribution.sae.train import save_sae, training_sae

    root = tmp_path_factory.mktemp("sae")
    model = save_tiny(root / "tiny-model", name="tiny-sae-model")
    torch.manual_seed(0)
    sae = training_sae("topk", 16, 32, k=4, model=str(model), hook=HOOK)
    return save_sae(sae, root / "tiny-sae", {"model": str(model), "hook": HOOK})


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_dashboard_follows_the_feature(sae_dir):
    at = open_page("sae", {"sae_pick": "other directory…", "sae_path": str(sae_dir)})
    assert not problems(at)
    first = metrics(at)
    assert "density" in first
    at.number_input(key="sae_feature").set_value(5).run()
    assert not problems(at)
    assert metrics(at) != first
    at.button(key="sae_save").click().run()
    assert [r["kind"] for r in RunStore().list()] == ["sae-dashboard"]


def test_prompt_features_and_search(sae_dir):
    at = open_page("sae", {"sae_pick": "other directory…", "sae_path": str(sae_dir)})
    at.text_input(key="sae_prompt").set_value("the movie was very good").run()
    assert not problems(at)
    table = at.dataframe[0].value
    assert len(table) == 12 and (table["max activation"] >= 0).all()
    at.text_input(key="sae_prompt").set_value("the movie was zzz").run()  # zzz is not in the vocabulary
    assert not at.exception
    assert any("not in the model's vocabulary" in e.value for e in at.error)
    at.text_input(key="sae_prompt").set_value("").run()  # the session is still alive
    at.text_input(key="sae_query").set_value("good").run()
    assert not problems(at)
    assert any(c.value.endswith(" features") for c in at.caption)


def test_missing_sae_is_a_message(tmp_path):
    at = open_page("sae", {"sae_pick": "other directory…", "sae_path": str(tmp_path)})
    assert not at.exception
    assert any("not an SAE directory" in e.value for e in at.error)
