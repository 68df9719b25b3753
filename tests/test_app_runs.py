"""Runs page: browse, filter, open (including a missing run) and compare two runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import open_page, problems  # noqa: E402
from core.store import RunDraft, RunStore  # noqa: E402


@pytest.fixture
def two_runs():
    store = RunStore()
    a = store.save(
        RunDraft(
            kind="attribute",
            model="tiny",
            method="dpa",
            args={"prompt": "a b", "level": "token"},
            result={"target_logit": 1.5},
            tensors={"scores": torch.tensor([1.0, 2.0])},
            tables={"top": pd.DataFrame({"x": [1, 2]})},
        )
    )
    b = store.save(
        RunDraft(
            kind="recover-heads",
            model="random-mha",
            method="rational",
            args={"d": 3, "heads": 2},
            result={"queries": 69},
            tensors={"scores": torch.tensor([1.0, 4.0])},
        )
    )
    return a, b


def test_lists_filters_and_opens_runs(two_runs):
    a, b = two_runs
    at = open_page("runs")
    assert not problems(at)
    table = at.dataframe[0].value
    assert set(table["id"]) == {a.id, b.id}
    at.selectbox(key="runs_kind").set_value("attribute").run()
    assert list(at.dataframe[0].value["id"]) == [a.id]  # the filter changes the listing
    at.selectbox(key="runs_pick").set_value(a.id).run()
    assert not problems(at)
    shown = " ".join(str(m.value) for m in at.markdown)
    assert a.id in shown and "dpa" in shown
    assert any("top" in str(m.value) for m in at.markdown)  # its table is listed


def test_missing_run_is_a_message_not_a_crash(two_runs):
    at = open_page("runs")
    at.text_input(key="runs_id").set_value("20990101-000000-nope-000000").run()
    assert not at.exception
    assert any("no run" in e.value for e in at.error)
    at.text_input(key="runs_id").set_value("").run()  # the session is still alive
    assert not problems(at)


def test_compare_two_runs(two_runs):
    a, b = two_runs
    at = open_page("runs")
    assert not problems(at)
    at.toggle(key="runs_cmp_on").set_value(True).run()  # compared when asked (issue 28: a fast first render)
    assert not problems(at)
    frames = [d.value for d in at.dataframe]
    cmp = next(f for f in frames if "field" in f.columns)
    kind_row = cmp[cmp["field"] == "kind"].iloc[0]
    assert {kind_row["A"], kind_row["B"]} == {"attribute", "recover-heads"} and not kind_row["same"]
    metric = [m for m in at.metric if "max |B - A|" in m.label]
    assert metric and float(metric[0].value) == pytest.approx(2.0)


def test_delete_run(two_runs):
    a, b = two_runs
    at = open_page("runs")
    at.selectbox(key="runs_pick").set_value(a.id).run()
    at.button(key="runs_rm").click().run()
    assert not problems(at)
    assert [r["id"] for r in RunStore().list()] == [b.id]
