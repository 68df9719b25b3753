"""Circuits page: a toy IOI model (fast) and, marked real/slow, smollm2 on the IOI prompt."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from job_helpers import fake_submit  # noqa: E402

from app.testing import array, chart, frame_with, open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402


@pytest.fixture
def page(one_thread):
    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})
    assert not problems(at)
    return at


def results(at) -> dict:
    return dict(at.session_state["_circ_cache"])


def nodes_drawn(at, method: str = "dpa") -> list[str]:
    """The graph's nodes (not the top output tokens drawn beside the logits, ``logit ' the'``)."""
    return [n for n in chart(at, f"circ_graph_{method}")["data"][-1]["customdata"] if not n.startswith("logit ")]


def test_the_default_circuit_is_drawn_on_open(page):
    """Quick work needs no button: the default prompt's circuit and its curve are there on open, and no Run
    button (greyed or not) is left on the page."""
    at = page
    assert not [b for b in at.button if b.key == "circ_run"]
    assert set(nodes_drawn(at)) == {"embed", "L0.H0", "L1.H0", "logits"}
    faith = chart(at, "circ_faith")
    assert faith["data"][0]["name"].startswith("dpa (AUC")
    table = frame_with(at, "AUC")
    assert list(table["method"]) == ["dpa"] and table["scoring s"][0] >= 0
    edges = frame_with(at, "src")
    assert len(edges) and {"L1.H0", "logits"} <= set(edges["src"]) | set(edges["dst"])


def test_k_and_selection_do_not_recompute(page):
    at = page
    before = results(at)
    n_before = len(frame_with(at, "src"))
    at.slider(key="circ_k").set_value(12).run()
    at.toggle(key="circ_greedy").set_value(False).run()
    assert not problems(at)
    after = results(at)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)  # same objects
    assert len(frame_with(at, "src")) == 12 != n_before  # top-12 of the 12 edges, drawn from the same scores
    at.multiselect(key="circ_methods").set_value(["dpa", "eap", "activation_patching"]).run()  # computed at once
    assert not problems(at)
    assert all(results(at)[k] is before[k] for k in before)
    curves = chart(at, "circ_faith")["data"]
    assert sorted(c["name"].split(" ")[0] for c in curves) == ["activation_patching", "dpa", "eap"]


def test_selected_node_drill_down(page):
    at = page
    at.selectbox(key="circ_node").set_value("L1.H0").run()
    assert not problems(at)
    effect = [m for m in at.metric if "direct logit effect" in m.label]
    assert effect and effect[0].label.startswith("L1.H0") and float(effect[0].value) > 0
    pattern = array(chart(at, "circ_pattern")["data"][0]["z"])
    assert pattern.shape == (5, 5)
    edges = frame_with(at, "direction")
    assert set(edges["direction"]) == {"in", "out"} and "logits" in set(edges["dst"])
    nodes = chart(at, "circ_graph_dpa")["data"][-1]  # labelled H0 in its row L1; customdata is its name
    sizes = nodes["marker"]["size"]
    assert sizes[list(nodes["customdata"]).index("L1.H0")] > min(sizes)  # the selected node is drawn bigger
    sizes = chart(at, "circ_graph_dpa")["data"][-1]["marker"]["size"]
    assert max(sizes) > min(sizes)
    at.selectbox(key="circ_node").set_value("embed").run()
    assert not problems(at) and not [m for m in at.metric if "direct logit effect" in m.label]


def test_click_in_graph_moves_the_node_box(page):
    """A plotly click (its selection state) selects the node, as the browser sends it."""
    at = page
    at.session_state["circ_graph_dpa"] = {"selection": {"points": [{"customdata": "L0.H0"}]}}
    at.run()
    assert not problems(at)
    assert at.selectbox(key="circ_node").value == "L0.H0"
    assert [m for m in at.metric if m.label.startswith("L0.H0 direct logit effect")]


def test_evaluate_save_and_open(page):
    at = page
    at.slider(key="circ_k").set_value(3).run()
    at.button(key="circ_evaluate").click().run()
    assert not problems(at)
    assert any("faithfulness at k=3: dpa" in c.value for c in at.caption)
    at.button(key="circ_save_dpa").click().run()
    assert not problems(at)
    (run,) = RunStore().list(kind="circuit")
    assert RunStore().get(run["id"]).meta["args"]["edges"] == 3
    at.selectbox(key="circ_open").set_value(run["id"]).run()
    assert not problems(at)
    assert "logits" in chart(at, "circ_saved_graph")["data"][-1]["customdata"]


def test_bad_counterfactual_is_one_line(tiny_llama_dir, one_thread):
    at = open_page("circuits", {"circ_model": str(tiny_llama_dir)})
    assert not problems(at)
    at.text_area(key="circ_corrupt").set_value("When Alice and Bob went to the shop, Bob handed a drink over to").run()
    assert not at.exception
    (err,) = at.error
    assert "tokens" in err.value and "\n" not in err.value
    assert not at.expander or all("details" not in e.label for e in at.expander)  # no traceback
    at.button(key="circ_swap").click().run()
    assert at.text_area(key="circ_corrupt").value == "When John and Mary went to the store, Mary gave a drink to"
    assert not problems(at)


def _no_ray(monkeypatch) -> None:
    """Ray cannot start here (as on a machine where its start times out), and no job driver may be spawned."""
    import subprocess

    import ray

    def fail(*args, **kwargs):
        raise RuntimeError("The current node timed out during startup (forced by the test)")

    popen = subprocess.Popen

    def no_driver(cmd, *args, **kwargs):
        if "workbench.scheduler" in list(map(str, cmd)):
            raise AssertionError(f"a job driver process was started: {cmd}")
        return popen(cmd, *args, **kwargs)

    monkeypatch.setattr(ray, "init", fail)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(subprocess, "Popen", no_driver)


def _wait_for_jobs_here() -> list:
    from workbench.scheduler import JobBoard
    from workbench.scheduler.runner import wait_here

    jobs = JobBoard().list()
    for job in jobs:
        assert wait_here(job.id, timeout=240), f"job {job.id} still runs"
    return JobBoard().list()


@pytest.mark.real
@pytest.mark.slow
def test_smollm2_ioi_default_view_is_connected_without_ray(monkeypatch, one_thread):  # the server: 1 thread
    """smollm2's one-prompt DPA circuit (about 5 s with its curve) runs in the app's own process, on open,
    with Ray unable to start: its graph and curve come back, and its run is stored for later sessions."""
    import os

    import torch

    _no_ray(monkeypatch)
    # the in-process limit grows with the load average, but a loaded CI measures its estimate over it too:
    # fix the limit, so this test sees the in-process path whatever the machine's load
    monkeypatch.setenv("WORKBENCH_LOCAL_S", "120")
    at = open_page("circuits", {"circ_model": "smollm2-135m"}, timeout=300)
    assert not problems(at)
    if not results(at):  # estimated over the page's 3 s: a job in this process, started on open
        (job,) = _wait_for_jobs_here()
        assert job.state == "done", job.log
        assert job.driver["pid"] == os.getpid() and job.ray_address is None
        assert any("runs in this process" in line for line in job.log)
        at = open_page("circuits", {"circ_model": "smollm2-135m"}, timeout=300)  # a later session
        assert not problems(at)
    res = results(at)[next(iter(results(at)))]
    assert res.faithfulness is not None and chart(at, "circ_faith")["data"]
    assert not [b for b in at.button if b.key == "circ_run"]
    edges = frame_with(at, "src")
    assert len(edges) >= 5
    g = res.graph
    mask = torch.zeros(g.n_edges, dtype=torch.bool)
    mask[[g.edge_id(s, d) for s, d in zip(edges["src"], edges["dst"], strict=True)]] = True
    assert torch.equal(g.prune_connected(mask), mask)  # every drawn edge lies on a path embed -> logits
    assert "embed" in set(edges["src"]) and "logits" in set(edges["dst"])
    drawn = set(nodes_drawn(at))
    assert drawn == set(edges["src"]) | {g.receivers[g.receiver_index[d]].component for d in edges["dst"]}


def test_prompt_file_with_swapped_names(tiny_llama_dir, one_thread):
    at = open_page("circuits", {"circ_model": str(tiny_llama_dir), "circ_source": "prompt file",
                                "circ_file": "ioi.jsonl", "circ_limit": 3})
    assert not problems(at)
    assert at.selectbox(key="circ_ablation").options == ["corrupt", "mean", "zero"]  # the file's counterfactuals
    at.checkbox(key="circ_file_swap").check().run()
    at.multiselect(key="circ_methods").set_value(["eap"]).run()
    assert not problems(at)
    res = list(results(at).values())[-1]  # the newest: eap on the swapped prompts (dpa was drawn on open)
    assert res.n_prompts == 3 and res.ablation == "corrupt" and res.method == "eap"
    assert res.rows[0]["corrupt"] == "When Robert and Alice arrived at the restaurant, Alice handed a book to"
    n_all = len(frame_with(at, "src"))
    at.slider(key="circ_thr").set_value(0.5).run()
    assert not problems(at)
    kept = frame_with(at, "src")
    assert 0 < len(kept) < n_all and (kept["score"].abs() >= 0.5 * kept["score"].abs().max()).all()


def test_discovery_over_the_page_threshold_runs_in_this_process(one_thread, monkeypatch):
    """Over the job panel's threshold (lowered here) but under the runner's local one (about 10 s), discovery is
    computed in the page itself, with no job (issue 50 items 2 and 7: nothing starts by itself); the page's
    circuit is exactly what the engine computes."""
    import torch

    from app import jobs_view
    from workbench.scheduler import JobBoard

    _no_ray(monkeypatch)
    monkeypatch.setattr(jobs_view, "THRESHOLD_S", 0.0)
    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})
    assert not problems(at)
    assert not JobBoard().list()  # no job started
    assert set(nodes_drawn(at)) == {"embed", "L0.H0", "L1.H0", "logits"}
    (res,) = results(at).values()
    import workbench as wb
    from circuits.discover import circuit

    mine = circuit(wb.load("ioi-attn-2l1h"), res.rows, method="dpa", edges=res.edges, ablation=res.ablation,
                   selection=res.selection)
    assert torch.equal(mine.scores, res.scores) and mine.scores.abs().sum() > 0


def test_long_discovery_runs_as_a_job_and_a_new_session_opens_it(one_thread, monkeypatch):
    """Above the threshold (lowered here, so the toy model's discovery counts as long) a method gets a job
    button with its measured estimate; the finished job's stored circuit opens in a new session at once."""
    from app import jobs_view
    from circuits.discover import CircuitResult
    from workbench.scheduler import JobBoard
    from workbench.scheduler.runner import drive

    monkeypatch.setattr(jobs_view, "THRESHOLD_S", 0.0)
    monkeypatch.setenv("WORKBENCH_LOCAL_S", "0")  # nothing runs in the server's process either
    made = fake_submit(monkeypatch)
    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})
    assert not problems(at)
    assert any("dpa on 32 prompts: about" in str(w.value) and "estimated" in str(w.value) for w in at.warning)
    assert not made  # nothing starts before the one Run button
    at.button(key="circ_run").click().run()
    assert not problems(at)
    (job,) = made
    assert job.spec["kind"] == "circuit_discover" and job.spec["method"] == "dpa"
    assert JobBoard().get(job.id).state == "queued" and not results(at)  # nothing computed in the app
    done, _ = drive(job, JobBoard())  # its driver would run it on Ray; here, in this process
    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})
    assert not problems(at)
    assert set(nodes_drawn(at)) == {"embed", "L0.H0", "L1.H0", "logits"}
    (res,) = results(at).values()
    saved = CircuitResult.from_run(RunStore().get(done.run_id))
    assert res.method == "dpa" and bool((res.scores == saved.scores).all()) and res.faithfulness is not None
    assert len(made) == 1 and len(JobBoard().list()) == 1  # nothing more was started
