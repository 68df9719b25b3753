"""The Runs list tells runs of one prompt apart (issue 50 item 2): prompt, target, foil, counterfactual, method and
ablation are columns, filled from a circuit run's first prompt and arguments."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import frame_with, open_page, problems  # noqa: E402


def test_runs_list_names_foil_counterfactual_and_ablation(tiny_llama_dir, one_thread):
    at = open_page("circuits", {"circ_model": str(tiny_llama_dir)})
    assert not problems(at)
    at.button(key="circ_save_dpa").click().run()  # the IOI example: corrupt ablation with its counterfactual
    at.selectbox(key="circ_ablation").set_value("mean").run()
    at.button(key="circ_save_dpa").click().run()
    assert not problems(at)
    runs = open_page("runs")
    assert not problems(runs)
    frame = frame_with(runs, "counterfactual")
    for col in ("prompt", "target", "foil", "counterfactual", "method", "ablation"):
        assert col in frame.columns, frame.columns
    rows = frame.to_dict("records")
    assert len(rows) == 2 and {r["ablation"] for r in rows} == {"corrupt", "mean"}
    assert all(r["foil"] == " John" and r["target"] == " Mary" and r["method"] == "dpa" for r in rows)
    assert all(r["counterfactual"].startswith("When Alice and Bob") for r in rows)
