"""Feature graph page: a tiny random Llama with two random residual SAEs (tests/test_feature_dpa.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, frame_with, open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from test_feature_dpa import save_dictionary

    import workbench as wb
    from attribution.dpa.tiny import save_tiny_llama

    root = tmp_path_factory.mktemp("fg-app")
    model_dir = save_tiny_llama(root / "tiny-llama", layers=3)
    name = wb.load(str(model_dir)).name
    saes = [save_dictionary(root / f"sae-L{layer}", name, f"blocks.{layer}.hook_resid_post", seed=layer)
            for layer in (1, 2)]
    return model_dir, saes


def test_build_click_through_and_save(tiny, one_thread):
    model_dir, saes = tiny
    at = open_page("feature_graph", {"fg_model": str(model_dir), "fg_prompt": "The capital of France is",
                                     "fg_target": " Paris", "fg_foil": " London",
                                     "fg_extra": ",".join(str(p) for p in saes)})
    assert not problems(at)
    with pytest.raises(AssertionError, match="no chart"):  # nothing heavy runs before the button
        chart(at, "fg_graph")
    at.button(key="fg_run").click().run()
    assert not problems(at)
    drawn = list(chart(at, "fg_graph")["data"][-1]["customdata"])
    assert "logits" in drawn and any(".f" in n for n in drawn)
    assert set(frame_with(at, "influence")["id"]) == {n for n in drawn if not n.startswith("logit ")}  # + top tokens
    feature = next(n for n in drawn if n.startswith("L2.f"))
    at.selectbox(key="fg_graph_node").set_value(feature).run()
    assert not problems(at)
    links = [e.proto for e in at.get("page_link")]
    assert any(link.page == "sae" and f"feature={feature.split('.f')[1].split('@')[0]}" in link.query_string
               and "sae=" in link.query_string and "sae-L2" in link.query_string  # its path: not under data/saes
               for link in links), links
    at.button(key="fg_save").click().run()
    assert not problems(at)
    assert [r["kind"] for r in RunStore().list()] == ["feature-graph"]


def test_bad_dictionary_is_an_error_in_the_page(tiny, tmp_path, one_thread):
    model_dir, _ = tiny
    at = open_page("feature_graph", {"fg_model": str(model_dir), "fg_extra": str(tmp_path / "nowhere")})
    at.button(key="fg_run").click().run()
    assert [e.value for e in at.exception] == []
    assert any("not a dictionary directory" in str(e.value) for e in at.error)


def test_an_imported_graph_says_so_and_not_what_it_lacks(tiny, one_thread):
    """Issue 50 finding 5: an imported graph's caption said "target logit 0.000 · 0 DPA passes"."""
    from test_import_graph import FIXTURE, fixture_doc

    from circuits.importer import import_graph_json

    model_dir, _ = tiny
    run = import_graph_json(FIXTURE, RunStore())
    doc = fixture_doc()
    at = open_page("feature_graph", {"fg_model": str(model_dir)})
    at.selectbox(key="fg_open").set_value(run.id).run()
    assert not problems(at)
    captions = [str(c.value) for c in at.caption]
    head = next(c for c in captions if c.startswith("Imported"))
    assert "graph-json" in head and FIXTURE.name in head and "gemma-2-2b" in head
    assert f"{len(doc['nodes'])} nodes, {len(doc['links'])} edges" in head
    assert not any("target logit" in c or "DPA passes" in c for c in captions)
    assert chart(at, "fg_saved_graph")["data"]  # drawn
