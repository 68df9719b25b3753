"""``workbench bench circuits``: bad input is one line, exit 2 and nothing saved; a tiny end-to-end run gives
finite CPR/CMD with intervals at edge and node level for every method."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_bad, run_cli

from circuits.bench.runner import METHODS, BenchConfig, run

ROWS = [{"prompt": f"The cat number {i} sat on the mat", "corrupt": f"The dog number {i} sat on the mat",
         "target": " and", "foil": " or"} for i in range(10)]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _nothing_saved(tmp_path, out):
    from core.store import RunStore

    assert not out.exists() and not out.with_suffix(".json").exists()
    assert not [r for r in RunStore().list() if r.kind == "bench"]


@pytest.mark.parametrize("case", ["unknown_task", "no_counterfactual", "split_too_small", "unknown_method",
                                  "steps_zero", "steps_absurd"])
def test_bad_input_is_one_line_exit_2_nothing_saved(monkeypatch, capsys, tmp_path, case):
    out = tmp_path / "doc.md"
    args = ["bench", "circuits", "--model", "smollm2-135m", "--out", str(out), "--n-train", "4", "--n-test", "4"]
    if case == "unknown_task":
        code, _, err = run_cli(monkeypatch, capsys, *args, "--tasks", "ioi,nonsense")
        assert_bad(code, err, "unknown task", "nonsense")
    elif case == "no_counterfactual":
        path = _write(tmp_path / "plain.jsonl", [{k: v for k, v in r.items() if k != "corrupt"} for r in ROWS])
        code, _, err = run_cli(monkeypatch, capsys, *args, "--tasks", path, "--methods", "eap,dpa")
        assert_bad(code, err, "no counterfactuals", "eap")
    elif case == "split_too_small":
        path = _write(tmp_path / "small.jsonl", ROWS[:5])
        code, _, err = run_cli(monkeypatch, capsys, *args, "--tasks", path)
        assert_bad(code, err, "split", "at least")
    elif case.startswith("steps"):  # dpa_path's steps are bounded before any model loads
        steps = "0" if case == "steps_zero" else "1000000"
        code, _, err = run_cli(monkeypatch, capsys, *args, "--methods", f"eap_ig,dpa_path:steps={steps}")
        assert_bad(code, err, "steps")
    else:
        code, _, err = run_cli(monkeypatch, capsys, *args, "--methods", "eap,acdc")
        assert_bad(code, err, "unknown method", "acdc")
    _nothing_saved(tmp_path, out)


def test_tiny_end_to_end_every_method_both_levels(tiny_llama, tmp_path):
    import torch

    torch.set_num_threads(1)
    rows = [dict(r, split=s) for r, s in zip(ROWS, ["train"] * 5 + ["test"] * 5, strict=True)]
    cfg = BenchConfig(model="tiny", tasks=[_write(tmp_path / "t.jsonl", rows)], n_train=4, n_test=4, n_patch=4,
                      n_boot=50, batch_size=4, filter_rows=False)  # a random model answers none of them
    result = run(cfg, model=tiny_llama)
    methods = result["tasks"][0]["methods"]
    assert set(methods) == set(METHODS)  # random and every line of the edge-method table
    assert set(methods["activation_patching"]["levels"]) == {"node"}
    for res in methods.values():
        for lv in res["levels"].values():
            assert lv["cpr_ci"][0] <= lv["cpr_ci"][1] and lv["cmd_ci"][0] <= lv["cmd_ci"][1]
            assert lv["cmd"] >= 0
            assert lv["curves"]["cpr"]["faithfulness"][-1] == pytest.approx(1.0)  # 100%: the whole model
            assert all(abs(v) < 1e6 for v in lv["curves"]["cmd"]["faithfulness"])
    from circuits.bench.report import markdown

    text = markdown(result)
    assert "Edge level: CPR" in text and "Node level: CMD" in text and "activation_patching" in text
    assert result["tasks"][0]["rows"] == {"train": 5, "validation": 0, "test": 5}  # the file's rows per split
    assert "| t | logit_diff | " in text and " | 5 / 0 / 5 | 4 | 4 | " in text


def test_edge_patching_sample_is_the_truth_the_methods_are_checked_against(tiny_llama, tmp_path):
    """Activation patching at edge level scores a seeded sample of edges exactly (the same effects as patching
    each alone), and every method's scores on those edges are correlated with them; patching's own full
    scores would agree perfectly."""
    import torch

    from circuits.bench.agreement import agreement
    from circuits.bench.prompts import task_prompts
    from circuits.edges.patching import score
    from circuits.graph import CircuitGraph
    from circuits.intervene import References

    torch.set_num_threads(1)
    rows = [dict(r, split=s) for r, s in zip(ROWS, ["train"] * 5 + ["test"] * 5, strict=True)]
    cfg = BenchConfig(model="tiny", tasks=[_write(tmp_path / "t.jsonl", rows)], methods=["random", "eap",
                      "activation_patching"], levels=["edge"], n_train=4, n_test=4, n_boot=20, batch_size=4,
                      patch_sample=30, filter_rows=False)
    result = run(cfg, model=tiny_llama)
    task = result["tasks"][0]
    sample = task["methods"]["activation_patching"]["sample"]
    assert len(sample["edges"]) == 30 == len(set(sample["edges"])) and sample["n_prompts"] == 4
    assert task["methods"]["activation_patching"]["levels"] == {}  # no curve from 30 edges
    graph = CircuitGraph.of(tiny_llama)
    prompts = task_prompts(tiny_llama, rows[:4], "logit_diff", 4)
    every = score(tiny_llama, graph, prompts, References(tiny_llama, graph, prompts))
    assert torch.allclose(every[sample["edges"]], torch.tensor(sample["exact"]), atol=1e-5)
    agree = task["patching_agreement"]
    assert set(agree["methods"]) == {"random", "eap"} and agree["n_edges"] == 30
    assert agree["methods"]["eap"]["pearson"] > agree["methods"]["random"]["pearson"]
    assert agreement(sample, {"truth": every})["methods"]["truth"]["spearman"] == pytest.approx(1.0)
    from circuits.bench.report import markdown

    assert "agreement with activation patching" in markdown(result)


def test_best_per_task_reads_intervals():
    """The best method per task: highest CPR, lowest CMD, random never counted; 'clear' only when the intervals
    do not overlap."""
    from circuits.bench.report import best_per_task, markdown

    def lv(cpr, cpr_ci, cmd, cmd_ci):
        return {"levels": {"edge": {"cpr": cpr, "cpr_ci": cpr_ci, "cmd": cmd, "cmd_ci": cmd_ci, "eval_seconds": 1}},
                "seconds": 1.0}

    methods = {"random": lv(9.0, [8.0, 10.0], 0.0, [0.0, 0.0]), "a": lv(1.2, [1.1, 1.3], 0.05, [0.04, 0.06]),
               "b": lv(1.0, [0.9, 1.05], 0.04, [0.03, 0.07])}
    result = {"config": {"levels": ["edge"], "methods": list(methods), "n_train": 4, "n_test": 4, "n_patch": 4,
                         "selection": "topk", "n_boot": 10, "batch_size": 4}, "model": "m", "seconds": 60,
              "tasks": [{"task": "t", "metric": "logit_diff", "source": "x", "n_train": 4, "n_test": 4,
                         "m_full": 1.0, "m_empty": 0.0, "methods": methods}]}
    best = best_per_task(result, "edge")["t"]
    assert best["cpr"] == {"method": "a", "value": 1.2, "runner_up": "b", "clear": True}
    assert best["cmd"] == {"method": "b", "value": 0.04, "runner_up": "a", "clear": False}
    assert "| t | a 1.200 * | b | b 0.040 | a |" in markdown(result)
