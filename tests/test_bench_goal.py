"""Issue 39's goal read off a result: a DPA variant best or tied best by intervals on CPR and CMD, at no more
than a third of EAP-IG's scoring time."""

from __future__ import annotations

from circuits.bench.goal import dpa_goal, goal_lines, is_dpa, met_by_variant
from circuits.bench.report import markdown


def _method(cpr: tuple[float, float, float], cmd: tuple[float, float, float], seconds: float) -> dict:
    return {"seconds": seconds, "levels": {"edge": {"cpr": cpr[0], "cpr_ci": [cpr[1], cpr[2]],
                                                    "cmd": cmd[0], "cmd_ci": [cmd[1], cmd[2]], "eval_seconds": 1.0}}}


def _result() -> dict:
    task = {"task": "ioi", "metric": "logit_diff", "source": "x", "n_train": 4, "n_test": 4, "m_full": 1.0,
            "m_empty": 0.0, "methods": {
                "random": _method((9.0, 8.0, 10.0), (0.0, 0.0, 0.0), 0.0),  # random never counts as best
                "eap_ig": _method((2.0, 1.9, 2.1), (0.01, 0.005, 0.02), 30.0),
                "dpa": _method((1.9, 1.7, 2.0), (0.03, 0.025, 0.04), 3.0),  # tied on CPR only
                "dpa_cf": _method((1.8, 1.7, 2.0), (0.015, 0.01, 0.03), 6.0),  # tied on both, cheap
                "dpa_path:steps=16": _method((2.1, 1.98, 2.3), (0.012, 0.01, 0.02), 40.0),  # best CPR, too dear
            }}
    other = {**task, "task": "sub", "methods": {k: task["methods"][k] for k in ("eap_ig", "dpa")}}
    cfg = {"methods": list(task["methods"]), "levels": ["edge"], "n_train": 4, "n_patch": 4, "n_test": 4,
           "selection": "topk", "n_boot": 10, "batch_size": 8}
    return {"model": "m", "config": cfg, "seconds": 60.0, "tasks": [task, other]}


def test_variants_tied_by_interval_and_the_cost_limit():
    goal = dpa_goal(_result(), "edge")
    ioi = goal["ioi"]
    assert ioi["cpr"] == ["dpa", "dpa_cf", "dpa_path:steps=16"]
    assert ioi["cmd"] == ["dpa_cf", "dpa_path:steps=16"]
    assert ioi["both"] == ["dpa_cf", "dpa_path:steps=16"]
    assert ioi["met"] == ["dpa_cf"]  # dpa_path is tied on both but costs 1.33x EAP-IG
    assert abs(ioi["cost"]["dpa_path:steps=16"] - 40 / 30) < 1e-12
    assert goal["sub"]["cpr"] == ["dpa"] and goal["sub"]["cmd"] == [] and goal["sub"]["met"] == []
    assert met_by_variant(goal) == {"dpa": 0, "dpa_cf": 1, "dpa_path:steps=16": 0}


def test_the_document_says_how_many_tasks_meet_it():
    lines = goal_lines(_result())
    assert lines[-1] == ("Goal met in 1 of 2 tasks; a DPA variant best or tied on both metrics at any cost in 1 of 2. "
                         "By one variant fixed in advance: dpa 0, dpa_cf 1, dpa_path:steps=16 0.")
    assert "## Edge level: the DPA goal" in markdown(_result())


def test_what_counts_as_a_dpa_variant():
    assert all(map(is_dpa, ("dpa", "dpa_cf", "dpa_path:steps=4", "dpa:w_v=0.7")))
    assert not any(map(is_dpa, ("eap", "eap_ig", "dpaX", "random")))


def test_the_document_is_written_with_the_umask_modes_and_fails_in_one_line(tmp_path):
    import os
    import stat

    import pytest

    from circuits.bench.report import write_document
    from core.errors import OutputError

    md, js = write_document(_result(), tmp_path / "bench.md")
    mask = os.umask(0)
    os.umask(mask)
    for path in (md, js):  # not mkstemp's private 0600: a shared results folder stays readable
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert "Goal met in 1 of 2 tasks" in md.read_text()
    (tmp_path / "blocked").write_text("a file where the folder should be")
    with pytest.raises(OutputError, match="cannot write the benchmark's JSON"):
        write_document(_result(), tmp_path / "blocked" / "bench.md")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.md", "blocked"]
