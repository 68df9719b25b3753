"""Attribution over a prompt set: API (batched DPA equals one prompt at a time) and ``workbench attribute-set``."""

from __future__ import annotations

import json

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli
from test_baselines_tiny import make_examples, tiny_llama

from attribution import attribute
from attribution.prompt_set import attribute_set
from core.models import zoo

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ("attribute-set", "--model", "tiny-llama-set")


@pytest.fixture(scope="module")
def rows():
    model = tiny_llama()  # prompts of 5 to 9 symbols, so batches are right-padded
    return [row for n in range(5) for row in make_examples(model, 1, seed=4 + n, length=5 + n)]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory, rows):
    zoo.register(zoo.ModelEntry(name="tiny-llama-set", kind="toy", params=0, source="test",
                                loader="test_baselines_tiny:load_tiny"))
    path = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("level", ["token", "head", "edge", "neuron"])
def test_batched_dpa_equals_single_prompts(rows, level):
    model = tiny_llama()
    assert len({len(model.to_str_tokens(model.to_tokens(r["prompt"]))) for r in rows}) > 1  # padding is used
    res = attribute_set(model, rows, method="dpa", level=level, batch_size=3)
    assert len(res.results) == len(rows)
    assert res.batch_size == 3 and res.seconds > 0
    for row, got in zip(rows, res.results, strict=True):
        want = attribute(model, row["prompt"], row["target"], row.get("foil"), method="dpa", level=level)
        assert got.tokens == want.tokens and got.prompt == row["prompt"]
        assert abs(got.target_logit - want.target_logit) < 1e-4
        assert torch.allclose(got.scores, want.scores, atol=1e-5, rtol=1e-4)


def test_other_methods_and_no_foil(rows):
    model = tiny_llama()
    res = attribute_set(model, rows[:2], method="ig", level="token", use_foil=False, steps=4)
    assert res.method == "integrated_gradients" and res.batch_size == 1
    assert all(r.foil is None for r in res.results)
    assert res.params == {"steps": 4}
    table = res.table()
    assert list(table["prompt"]) == [r["prompt"] for r in rows[:2]]
    assert res.plot().data  # the figure has a trace


def test_cli_json_and_run(monkeypatch, capsys, prompts, rows):
    code, out, err = cli(monkeypatch, capsys, *TINY, "--prompts", prompts, "--level", "head",
                         "--batch-size", "2", "--top", "3", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["n_prompts"] == len(rows) and data["batch_size"] == 2
    assert data["axes"] == ["layer", "head", "query"]
    first = data["prompts"][0]
    assert first["prompt"] == rows[0]["prompt"] and len(first["top"]) == 3
    assert abs(first["top"][0]["score"]) >= abs(first["top"][-1]["score"])
    code, out, err = cli(monkeypatch, capsys, "runs", "show", data["run"], "--json")
    assert code == 0 and json.loads(out)["meta"]["kind"] == "attribute_set"
    from core.store import RunStore

    tensors = RunStore().get(data["run"]).tensors()
    assert set(tensors) == {f"scores.{i}" for i in range(len(rows))}


@pytest.mark.parametrize("args,words", [
    (["--method", "bogus"], ["unknown method", "bogus"]),
    (["--method", "rollout", "--level", "head"], ["rollout", "no head level"]),
    (["--level", "layer"], ["unknown level"]),
    (["--batch-size", "0"], ["batch-size"]),
    (["--param", "w_z=1"], ["no parameter", "w_z"]),
])
def test_cli_bad_input(monkeypatch, capsys, prompts, args, words):
    code, _, err = cli(monkeypatch, capsys, *TINY, "--prompts", prompts, "--no-save", *args)
    assert_bad(code, err, *words)


def test_cli_bad_prompts(monkeypatch, capsys, tmp_path, prompts):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "a b", "target": " Paris Rome"}) + "\n")
    code, _, err = cli(monkeypatch, capsys, *TINY, "--prompts", str(bad), "--no-save")
    assert_bad(code, err, "bad.jsonl:1")
    code, _, err = cli(monkeypatch, capsys, *TINY, "--prompts", str(tmp_path / "none.jsonl"))
    assert_bad(code, err, "does not exist")


def test_notebook_entry_reads_a_file(prompts, rows):
    import workbench as wb

    res = wb.attribute_set(tiny_llama(), prompts, level="token", limit=2, batch_size=2)
    assert [r.prompt for r in res.results] == [r["prompt"] for r in rows[:2]]
    assert wb.attribute_set(tiny_llama(), rows, method="random", limit=3).method == "random"


def test_bad_row_is_named(rows):
    from core.errors import TokenError

    bad = [rows[0], {"prompt": rows[1]["prompt"], "target": rows[1]["target"], "foil": rows[1]["target"]}]
    with pytest.raises(TokenError, match="prompt 2: foil"):
        attribute_set(tiny_llama(), bad)
