"""The Circuit benchmark page on a store without bench runs opens the leaderboards that ship in results/circuits/
(marked as shipped, with their settings, their circuits not drawable), lists a new run beside them, and says
"No benchmark runs yet" only when neither exists."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import open_page, problems, texts  # noqa: E402


def _infos(at) -> list[str]:
    return [i.value for i in at.info]


def test_a_fresh_store_opens_the_shipped_leaderboards():
    at = open_page("benchmark")
    assert not problems(at)
    assert not any("No benchmark runs yet" in i for i in _infos(at))
    options = at.selectbox(key="bench_run").options
    assert "shipped · bench_smollm2-135m.json" in options and "shipped · bench_gemma3-270m.json" in options
    assert not any("bench_known" in o for o in options)  # a supplement of another shape is no leaderboard
    shown = " ".join(_infos(at))
    assert "Shipped leaderboard results/circuits/" in shown and "Measured before issue 39" in shown
    frames = [d.value for d in at.dataframe if "ioi" in d.value.columns]
    assert frames and any(str(v).startswith("0.") for v in frames[0]["ioi"])  # CPR figures, not blanks
    assert any("keeps no edge scores" in c for c in texts(at, "caption"))
    goal = next(d.value for d in at.dataframe if "goal met by" in d.value.columns)  # DPA against EAP-IG
    assert "ioi" in set(goal["task"]) and all(v == "no" or "dpa" in v for v in goal["goal met by"])
    assert any(c.value.startswith("Goal met in ") and "fixed in advance" in c.value for c in at.caption)


def test_a_new_run_sits_beside_the_shipped_ones():
    from test_app_benchmark import _result

    from circuits.bench.cells import BenchResult
    from core.store import RunStore

    run = BenchResult(_result()).save(RunStore())
    at = open_page("benchmark")
    assert not problems(at)
    options = at.selectbox(key="bench_run").options
    assert options[0].startswith(run.id) and any(o.startswith("shipped · ") for o in options[1:])
    assert not any("Shipped leaderboard" in i for i in _infos(at))  # the new run is the one opened


def test_nothing_shipped_and_no_run_says_so(monkeypatch, tmp_path):
    import core.paths

    monkeypatch.setattr(core.paths, "results_root", lambda: tmp_path)
    at = open_page("benchmark")
    assert not problems(at)
    assert any("No benchmark runs yet" in i for i in _infos(at))


def test_task_files_are_columns_by_their_stem():
    from app.bench_view import column_names, table

    level = {"cpr": 0.5, "cpr_ci": [0.4, 0.6]}
    result = {"config": {}, "tasks": [{"task": "/data/x.jsonl", "label": "x",
                                       "methods": {"eap": {"levels": {"edge": level}}}}]}
    assert table(result, "edge", "cpr").columns.tolist() == ["method", "x"]
    result["tasks"].append({"task": "/other/x.jsonl", "label": "x", "methods": {}})
    assert column_names(result) == {"/data/x.jsonl": "/data/x.jsonl", "/other/x.jsonl": "/other/x.jsonl"}
