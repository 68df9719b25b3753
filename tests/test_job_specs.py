"""Typed job specs (workbench/scheduler/specs.py): checks, the normalised key, old dict specs, and the promise
that a result computed by a command is found by the page that asks for the same work (circuit discovery,
faithfulness, attribution), which opens it without computing it again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli as cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from job_helpers import fake_submit  # noqa: E402

from workbench.scheduler import JobBoard  # noqa: E402
from workbench.scheduler.specs import (  # noqa: E402
    AttributeSpec,
    CircuitDiscoverSpec,
    FaithfulnessSpec,
    SpecError,
    VitEvalSpec,
    as_dict,
    key_of,
    parse,
)

ROWS = [{"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John"}]
IOI = Path(__file__).resolve().parents[1] / "data" / "prompts" / "ioi.jsonl"


# -- checks and keys -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("make", "words"), [
    (lambda: FaithfulnessSpec(model="m", rows=ROWS, methods=["dpa"], level="edge"), ["level", "'edge'"]),
    (lambda: FaithfulnessSpec(model="m", rows=ROWS, methods=[]), ["methods"]),
    (lambda: FaithfulnessSpec(model="m", rows=[], methods=["dpa"]), ["row"]),
    (lambda: FaithfulnessSpec(model="m", rows=ROWS, methods=["nosuch"]), ["nosuch"]),
    (lambda: FaithfulnessSpec(model="m", rows=ROWS, methods=["dpa"], batch_size=0), ["batch_size"]),
    (lambda: AttributeSpec(model="m", prompt="  "), ["empty prompt"]),
    (lambda: AttributeSpec(model="m", prompt="a", target=" b", method="dpa", level="nosuch"), ["nosuch"]),
    (lambda: VitEvalSpec(model="m", methods=["dap"], steps=15), ["steps"]),
    (lambda: parse({"kind": "sleep", "bogus": 1}), ["bogus"]),
    (lambda: parse({"kind": "attribute", "model": "m"}), ["attribute", "incomplete"]),
])
def test_a_bad_spec_is_one_line_naming_the_field(make, words):
    from core.errors import WorkbenchError

    with pytest.raises(SpecError) as err:  # a WorkbenchError: one line and exit 2 from the CLI
        make()
    assert isinstance(err.value, WorkbenchError)
    text = str(err.value)
    assert "\n" not in text and all(w in text for w in words), text


def test_the_key_is_the_work_whatever_order_defaults_or_provenance():
    base = FaithfulnessSpec(model="m", rows=ROWS, methods=["dpa", "ig"])
    same = [
        FaithfulnessSpec(model="m", rows=ROWS, methods=["integrated_gradients", "dpa"]),  # alias, order
        FaithfulnessSpec(model="m", rows=ROWS, methods=["dpa", "ig"], level="token", ablation="zero", rank="signed",
                         use_foil=True, batch_size=32, device="cpu", params={}),  # the defaults spelt out
        FaithfulnessSpec(model="m", rows=ROWS, methods=["dpa", "ig"], threads=1, limit=1,
                         prompts_file="/somewhere/ioi.jsonl"),  # how it ran, where the rows came from
    ]
    assert {s.key() for s in same} == {base.key()}
    other = [FaithfulnessSpec(model="m", rows=ROWS, methods=["dpa"]),
             FaithfulnessSpec(model="m", rows=ROWS, methods=["dpa", "ig"], level="head"),
             FaithfulnessSpec(model="m", rows=[{**ROWS[0], "foil": " Bob"}], methods=["dpa", "ig"])]
    assert len({s.key() for s in other} | {base.key()}) == 4
    # a dict is read through the same class: the same key as the typed spec, with its fields in any order
    assert key_of(dict(reversed(list(base.to_dict().items())))) == base.key()


def test_a_model_directory_typed_two_ways_is_one_model(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    rel = AttributeSpec(model="m", prompt="a b", target=" c", method="activation_patching", level="head")
    absolute = AttributeSpec(model=str(tmp_path / "m"), prompt="a b", target=" c", method="activation_patching",
                             level="head", n_items=12, foil="")  # n_items: a hint; an empty foil is none
    assert rel.key() == absolute.key()
    assert rel.key() != AttributeSpec(model="m", prompt="a b ", target=" c", method="activation_patching",
                                      level="head").key()  # prompts as given


def test_circuit_defaults_are_resolved_into_the_key():
    rows = [{**ROWS[0], "corrupt": "When Anna and Bob went to the store, Bob gave a drink to"}]
    page = CircuitDiscoverSpec(model="m", rows=rows, method="dpa", ablation="corrupt", selection="greedy")
    command = CircuitDiscoverSpec(model="m", rows=rows, method="dpa", ablation=None, metric="logit_diff",
                                  selection="greedy", grid=[2000, 1000, 500, 200, 100, 50, 20, 10],
                                  prompts_file="ioi.jsonl")
    assert page.key() == command.key()
    assert page.key() != CircuitDiscoverSpec(model="m", rows=rows, method="dpa", ablation="mean",
                                             selection="greedy").key()


def test_old_dict_specs_still_read_and_unknown_kinds_stay_dicts():
    old = {"kind": "vit_eval", "model": "vit-synth", "methods": ["dap"], "n": 4, "seed": 2, "dataset": "synthetic",
           "batch_size": 50}
    assert as_dict(old) == old  # nothing added that the job code did not read before
    assert as_dict({"kind": "vit-eval", **{k: v for k, v in old.items() if k != "kind"}})["kind"] == "vit_eval"
    odd = {"kind": "plugin_kind", "x": 1}
    assert parse(odd) is odd and key_of(odd) == key_of(dict(odd))


def test_a_job_recorded_before_specs_were_typed_is_still_found():
    from workbench.scheduler import run
    from workbench.scheduler.specs import SleepSpec

    board = JobBoard()
    job, _ = run({"kind": "sleep", "seconds": 0.02, "steps": 2})
    job.key = "0123456789abcdef"  # what an old record holds: a digest of its raw dict
    board.write(job)
    assert board.latest_done(SleepSpec(seconds=0.02, steps=2)).id == job.id
    assert board.latest_done(SleepSpec(seconds=0.02, steps=3)) is None


# -- a command's result, found by the page -----------------------------------------------------------
@pytest.fixture
def recorded(monkeypatch):
    """Jobs a page starts are recorded only (no driver, no Ray): the test sees whether anything started."""
    import app.jobs_view as J

    monkeypatch.setattr(J, "THRESHOLD_S", 0.0)  # every job counts as long: nothing is computed in the page
    monkeypatch.setenv("WORKBENCH_LOCAL_S", "0")
    return fake_submit(monkeypatch)


def test_circuit_command_result_opens_on_the_circuits_page(recorded, monkeypatch, capsys, one_thread):
    import torch

    from app import circuit_jobs as CJ
    from app.testing import open_page, problems
    from circuits.discover import CircuitResult
    from core.store import RunStore

    code, out, err = cli(monkeypatch, capsys, "circuit", "discover", "--model", "ioi-attn-2l1h", "--prompts",
                         "task", "--limit", "32", "--method", "dpa", "--selection", "greedy", "--json")
    assert code == 0, err
    done = JobBoard().get(json.loads(out)["job_id"])
    rows = done.spec["rows"]  # the toy model's own task rows: the page offers its first 32 by default
    assert CJ.discover_spec("ioi-attn-2l1h", rows, "dpa", {}, "corrupt", "greedy").key() == done.key

    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})  # the page's defaults: corrupt, greedy
    assert not problems(at), problems(at)
    assert not recorded and len(JobBoard().list()) == 1  # nothing started: the command's circuit was found
    (res,) = dict(at.session_state["_circ_cache"]).values()
    saved = CircuitResult.from_run(RunStore().get(done.run_id))
    assert torch.equal(res.scores, saved.scores) and res.scores.abs().sum() > 0


def test_faithfulness_command_result_is_found_by_the_jobs_page(recorded, monkeypatch, capsys, tiny_llama_dir):
    from types import SimpleNamespace

    from app import common as C
    from app.testing import open_page, problems

    model = str(tiny_llama_dir)
    code, out, err = cli(monkeypatch, capsys, "faithfulness", "--model", model, "--prompts", str(IOI), "--methods",
                         "random,dpa", "--limit", "2", "--json")
    assert code == 0, err
    done = JobBoard().get(json.loads(out)["job_id"])

    monkeypatch.setattr(C, "zoo", lambda kinds=None: [SimpleNamespace(name=model)])  # the tiny model offered
    at = open_page("jobs")
    at.selectbox(key="jobs_prompts").set_value("ioi.jsonl")
    at.number_input(key="jobs_limit").set_value(2)
    at.multiselect(key="jobs_methods").set_value(["dpa", "random"])
    at.button[0].click().run()  # the form's Start job
    assert not problems(at), problems(at)
    assert not recorded and len(JobBoard().list()) == 1  # found, not started again
    assert at.session_state["jobs_last"] == done.id
    assert any(done.id in i.value for i in at.info)


def test_attribute_command_result_opens_on_the_attribution_page(recorded, monkeypatch, capsys, tiny_llama_dir):
    from app.testing import chart, open_page, problems

    state = {"attr_model": str(tiny_llama_dir), "attr_prompt": "When Mary and John went to the store, John gave",
             "attr_methods": ["activation_patching"]}
    at = open_page("attribution", state)
    assert not problems(at) and "attr_job_go_head" in {b.key for b in at.button}
    target, foil = at.text_input(key="attr_target").value, at.text_input(key="attr_foil").value or None

    args = ["attribute", str(tiny_llama_dir), state["attr_prompt"], "--target", target, "--method",
            "activation_patching", "--level", "head", "--json"] + (["--foil", foil] if foil else [])
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    done = JobBoard().get(json.loads(out)["job_id"])
    assert done.key == AttributeSpec(model=str(tiny_llama_dir), prompt=state["attr_prompt"], target=target, foil=foil,
                                     method="activation_patching", level="head", n_items=99).key()

    fresh = open_page("attribution", state)  # the head level opens from the command's run
    assert not problems(fresh), problems(fresh)
    assert "attr_job_go_head" not in {b.key for b in fresh.button} and chart(fresh, "attr_head_grid")["data"]
    assert not recorded and len(JobBoard().list()) == 1


def test_a_slow_method_at_the_last_position_without_a_target_is_one_line(monkeypatch, capsys, tiny_llama_dir):
    from cli_helpers import assert_bad

    code, _, err = cli(monkeypatch, capsys, "attribute", str(tiny_llama_dir), "When Mary and John went", "--method",
                       "activation_patching", "--level", "head", "--position", "-1")
    assert_bad(code, err, "last token", "--target")
