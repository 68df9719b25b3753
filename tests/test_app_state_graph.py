"""Interaction state belongs to one graph (issue 50 item 1), through Streamlit's AppTest on the Circuits page with
the tiny Llama: a supernode made on one circuit is saved with its run as it was at saving (later changes do not
rewrite the run), a new prompt starts with no pins, supernodes or threshold of the old graph and writes nothing
into the old graph's run, and the run reopens with exactly what it was saved with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402

FACT = "The Eiffel Tower is located in the city of"


def names(at) -> list[str]:
    return list(chart(at, "circ_graph_dpa")["data"][-1]["customdata"])


def group(at, label: str, members: list[str]) -> None:
    at.text_input(key="circ_sn_name").set_value(label).run()
    at.multiselect(key="circ_sn_members").set_value(members).run()
    at.button(key="circ_sn_group").click().run()
    assert not problems(at), problems(at)


def kept(run_id: str) -> dict:
    return json.loads((RunStore().get(run_id).path / "supernodes.json").read_text())


def test_state_is_the_graphs_own(tiny_llama_dir, one_thread):
    at = open_page("circuits", {"circ_model": str(tiny_llama_dir)})
    assert not problems(at)
    first = names(at)
    heads = [n for n in first if ".H" in n]
    group(at, "early", heads[:2])
    at.number_input(key="circ_prune").set_value(0.5).run()
    assert "⊕ early" in names(at)
    at.button(key="circ_save_dpa").click().run()
    assert not problems(at)
    (run,) = RunStore().list(kind="circuit")
    saved = kept(run["id"])
    assert [s["name"] for s in saved["supernodes"]] == ["early"] and saved["threshold"] == 0.5
    # a later change on the same graph stays in the session: the run keeps what it was saved with
    at.number_input(key="circ_prune").set_value(1.0).run()
    group(at, "more", [h for h in heads[2:4]])
    assert kept(run["id"]) == saved
    assert any("as they were then" in c.value for c in at.caption)
    # a new prompt: a clean state, nothing of the old graph's; the run untouched
    at.text_area(key="circ_prompt").set_value(FACT).run()
    assert not problems(at)
    assert not [n for n in names(at) if n.startswith("⊕ ")]
    assert at.number_input(key="circ_prune").value == 1.0
    assert not any("Saved as run" in s.value for s in at.success)
    new_heads = [n for n in names(at) if ".H" in n]
    group(at, "late", new_heads[:2])
    assert kept(run["id"]) == saved
    # the saved run reopens with exactly what it was saved with
    at.selectbox(key="circ_open").set_value(run["id"]).run()
    assert not problems(at)
    reopened = list(chart(at, "circ_saved_graph")["data"][-1]["customdata"])
    assert "⊕ early" in reopened and "⊕ more" not in reopened and "⊕ late" not in reopened
    assert at.number_input(key="circ_saved_prune").value == 0.5
