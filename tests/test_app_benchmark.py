"""The Circuit benchmark page (app/pages/benchmark.py, app/bench_view.py): a stored bench run opens as its
leaderboard (CPR, CMD with intervals, the best per task marked, seconds), a task's curves, and a cell's circuit
drawn from the run's edge scores; a run saved before cells kept their scores still shows its tables and says why
its circuits cannot be drawn; the Runs page opens a bench run as the same leaderboard."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import chart, open_page, problems, texts  # noqa: E402
from core.store import RunStore  # noqa: E402

TASKS = ["ioi", "facts"]
METHODS = ["random", "eap", "activation_patching"]
CPR = {("ioi", "random"): 0.1, ("ioi", "eap"): 0.8, ("facts", "random"): 0.3, ("facts", "eap"): 0.2}
GRID = [0.001, 0.01, 0.1, 1.0]


def _level(cpr: float) -> dict:
    curve = {"fractions": GRID, "counts": [1, 2, 8, 80], "edges_kept": [1, 2, 8, 80],
             "faithfulness": [cpr / 2, cpr, cpr, 1.0]}
    return {"cpr": cpr, "cmd": 1 - cpr, "cpr_ci": [cpr - 0.1, cpr + 0.1], "cmd_ci": [0.9 - cpr, 1.1 - cpr],
            "curves": {"cpr": {**curve, "absolute": False}, "cmd": {**curve, "absolute": True}},
            "n_forwards": 3, "eval_seconds": 2.0}


def _result() -> dict:
    from circuits.bench.runner import BenchConfig

    cfg = BenchConfig(model="tiny", tasks=TASKS, methods=METHODS, levels=["edge", "node"], grid=GRID, n_boot=20)
    tasks = []
    for t in TASKS:
        methods = {m: {"levels": {"edge": _level(CPR[(t, m)]), "node": _level(CPR[(t, m)] / 2)}, "seconds": 1.5,
                       "n_scored": 4} for m in METHODS[:2]}
        methods["activation_patching"] = {"levels": {"node": _level(0.6)}, "seconds": 9.0, "n_scored": 4}
        tasks.append({"task": t, "metric": "logit_diff", "source": "built", "n_train": 4, "n_test": 4, "m_full": 2.0,
                      "m_empty": 0.1, "ends_seconds": 0.1, "methods": methods})
    tasks[0]["patching_agreement"] = {"n_edges": 64, "n_prompts": 4, "methods": {
        "random": {"spearman": 0.01, "pearson": None}, "eap": {"spearman": 0.62, "pearson": 0.91}}}
    return {"config": asdict(cfg), "model": "tiny", "tasks": tasks, "seconds": 60.0}


@pytest.fixture
def runs():
    """(a bench run with every edge cell's scores, one saved the old way: results only)."""
    from circuits.bench.cells import BenchResult
    from circuits.bench.runner import pack
    from circuits.graph import CircuitGraph

    graph = CircuitGraph(2, 4, True)
    cells, tensors = [], {}
    for t in TASKS:
        for m in METHODS[:2]:
            scores, scale = pack(torch.randn(graph.n_edges, generator=torch.Generator().manual_seed(len(tensors))))
            name = f"edges.{len(tensors)}"
            tensors[name] = scores
            cells.append({"task": t, "method": m, "tensor": name, "scale": scale})
    store = RunStore()
    new = BenchResult(_result(), cells, tensors, {"n_layers": 2, "n_heads": 4, "has_mlp": True,
                                                  "parallel": False}).save(store)
    old = BenchResult(_result()).save(store)
    (old.path / "result.json").write_text('{"rows": []}')  # what the command saved before: no cells
    return new, old


def _table(at, which):
    """The leaderboard's CPR, CMD, seconds or patching-agreement table (in that order; AppTest keeps no key for a
    dataframe)."""
    frames = [d.value for d in at.dataframe if "ioi" in d.value.columns]
    assert len(frames) == 4, [f.columns.tolist() for f in frames]
    return frames[("cpr", "cmd", "seconds", "agreement").index(which)].set_index("method")


def test_a_bench_run_opens_as_its_leaderboard_and_draws_a_cell(runs):
    new, _ = runs
    at = open_page("benchmark", {"bench_run": new.id})
    assert not problems(at)
    runs = [o for o in at.selectbox(key="bench_run").options if not o.startswith("shipped")]  # the shipped: beside
    assert runs and all("2 tasks x 3 methods" in o for o in runs)
    cpr = _table(at, "cpr")
    assert cpr.loc["eap", "ioi"] == "0.800 [0.70, 0.90] ★" and cpr.loc["random", "ioi"] == "0.100 [0.00, 0.20]"
    # facts: eap's interval [0.10, 0.30] overlaps random's [0.20, 0.40]: no winner, eap grey; random never wins
    assert "★" not in "".join(cpr["facts"]) and cpr.loc["activation_patching", "ioi"] == "-"
    cmd = _table(at, "cmd")
    assert cmd.loc["eap", "ioi"].startswith("0.200") and cmd.loc["eap", "ioi"].endswith("★")  # lowest CMD
    assert _table(at, "seconds").loc["activation_patching", "facts"] == "9.0 (2)"
    agree = _table(at, "agreement")  # only the task that patched a sample, only the methods checked
    assert agree.loc["eap", "ioi"] == "0.62 / 0.91" and agree.loc["random", "ioi"] == "0.01 / n/a"
    assert "facts" not in agree.columns and "activation_patching" not in agree.index
    assert {t["name"] for t in chart(at, "bench_curves")["data"] if "name" in t} == {"random", "eap"}
    at.radio(key="bench_level").set_value("node").run()
    assert _table(at, "cpr").loc["activation_patching", "ioi"] == "0.600 [0.50, 0.70] ★"

    at.selectbox(key="bench_cell_task").set_value("facts").run()
    at.selectbox(key="bench_cell_method").set_value("activation_patching").run()
    assert at.button(key="bench_open").disabled
    assert any("node level only" in c for c in texts(at, "caption"))
    at.selectbox(key="bench_cell_method").set_value("eap").run()
    at.number_input(key="bench_cell_k").set_value(20).run()
    at.button(key="bench_open").click().run()
    assert not problems(at)
    spec = chart(at, "bench_circuit")
    assert "eap on facts: top 20 edges" in spec["layout"]["title"]["text"]
    nodes = spec["data"][-1]["customdata"]
    assert "logits" in nodes and len(nodes) > 2
    assert any("eap on facts at edge level: CPR 0.200" in c for c in texts(at, "caption"))


def _opened(page, key, run_id):
    """``page`` opened on a bench run (through its session-state ``key``), healthy, with its CPR table drawn."""
    at = open_page(page, {key: run_id})
    assert not problems(at)
    assert _table(at, "cpr").loc["eap", "ioi"].startswith("0.800")
    return at


def test_best_only_clear_of_random_and_the_rest_grey():
    from app.bench_view import decade_ticks, styled, table

    result = _result()
    cpr = table(result, "edge", "cpr").set_index("method")
    assert cpr.loc["eap", "ioi"].endswith("★") and not cpr.loc["eap", "facts"].endswith("★")
    frame = table(result, "edge", "cpr")
    assert frame.attrs["indistinguishable"] == [("eap", "facts")]
    html = styled(frame).to_html()
    assert html.count("color: #9e9e9e") == 1
    axis = decade_ticks([0.001, 0.01, 0.1, 1.0])
    assert axis["ticktext"] == ["0.001", "0.01", "0.1", "1"]


def test_an_old_run_shows_its_tables_and_says_why_no_circuit(runs):
    at = _opened("benchmark", "bench_run", runs[1].id)
    assert at.button(key="bench_open").disabled
    assert any("saved before bench runs kept each cell's edge scores" in c for c in texts(at, "caption"))


def test_the_runs_page_opens_a_bench_run_as_the_leaderboard(runs):
    at = _opened("runs", "runs_id", runs[0].id)
    assert any(c.key == "runs_open_curves" for c in at.get("plotly_chart"))
