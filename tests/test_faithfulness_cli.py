"""``workbench faithfulness`` through the CLI: JSON contract, stored run, bad input -> one line, exit 2."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli
from test_baselines_tiny import make_examples, tiny_llama

from core.models import zoo

TINY = ("faithfulness", "--model", "tiny-llama-faith")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    zoo.register(zoo.ModelEntry(name="tiny-llama-faith", kind="toy", params=0, source="test",
                                loader="test_baselines_tiny:load_tiny"))
    path = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_examples(tiny_llama(), 5, seed=2)))
    return str(path)


def test_json_contract_and_run(monkeypatch, capsys, prompts):
    code, out, err = cli(monkeypatch, capsys, *TINY, "--prompts", prompts,
                         "--methods", "random,ig,activation_patching,atp", "--level", "token", "--limit", "3",
                         "--param", "ig.steps=4", "--rank", "abs", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["level"] == "token" and data["n_examples"] == 3 and data["rank"] == "abs"
    assert set(data["methods"]) == {"random", "integrated_gradients", "activation_patching", "atp"}
    for m in data["methods"].values():
        assert {"disrupt_auc", "recover_auc", "total", "attribution_seconds"} <= set(m)
    assert "spearman" in data["methods"]["atp"] and data["run_id"]
    code, out, err = cli(monkeypatch, capsys, "runs", "show", data["run_id"], "--json")
    assert code == 0 and json.loads(out)["meta"]["kind"] == "faithfulness"


def test_grid_option(monkeypatch, capsys, prompts):
    """The paper scripts' grid 0.1..1 leaves out p=0, where disrupt ablates nothing (ratio 100): the disrupt
    AUC loses that first trapezoid and random's total moves off 0, as metrics.md warns."""
    paper = ",".join(str(round(i / 10, 1)) for i in range(1, 11))
    got = {}
    for name, extra in (("default", []), ("paper", ["--grid", paper])):
        code, out, err = cli(monkeypatch, capsys, *TINY, "--prompts", prompts, "--methods", "random",
                             "--limit", "3", "--no-save", "--json", *extra)
        assert code == 0, err
        got[name] = json.loads(out)
    assert got["default"]["grid"][0] == 0.0 and got["paper"]["grid"] == [round(i / 10, 1) for i in range(1, 11)]
    d, p = got["default"]["methods"]["random"], got["paper"]["methods"]["random"]
    assert p["disrupt_auc"] < d["disrupt_auc"]


def test_head_level_with_attention(monkeypatch, capsys, prompts):
    code, out, err = cli(monkeypatch, capsys, *TINY, "--prompts", prompts,
                         "--methods", "attention_last,gradient", "--level", "head", "--limit", "2",
                         "--no-save", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["methods"]["attention_last"]["ranked_from"] == "qk" and "run_id" not in data


@pytest.mark.parametrize("args,words", [
    (["--methods", "random,bogus"], ["unknown method", "bogus"]),
    (["--methods", "rollout", "--level", "head"], ["rollout", "no head level"]),
    (["--methods", "ig", "--level", "neuron"], ["integrated_gradients", "no neuron level"]),
    (["--methods", "random", "--level", "edge"], ["unknown level"]),
    (["--methods", "random", "--ablation", "blur"], ["ablation"]),
    (["--methods", "random", "--rank", "sideways"], ["unknown rank", "signed or abs"]),
    (["--methods", "random", "--param", "ig.steps"], ["METHOD.NAME=VALUE"]),
    (["--methods", "random", "--grid", "0.5,0.1"], ["grid", "increasing"]),
    (["--methods", "random", "--grid", "0,1.5"], ["grid", "[0, 1]"]),
    (["--methods", "random", "--grid", "half,1"], ["--grid", "comma-separated"]),
])
def test_bad_methods_and_levels(monkeypatch, capsys, prompts, args, words):
    code, _, err = cli(monkeypatch, capsys, *TINY, "--prompts", prompts,
                       *args)
    assert_bad(code, err, *words)


@pytest.mark.parametrize("content,words", [
    (None, ["does not exist"]),
    ("", ["no prompts"]),
    ("{not json\n", ["not a JSON object", ":1:"]),
    ('{"prompt": "A B"}\n', ["target"]),
    ('{"prompt": "A B", "target": "C", "foil": 3}\n', ["foil"]),
    ('{"prompt": "A B", "target": "C C"}\n', ["target", "2 tokens"]),
    ('{"prompt": "A B", "target": "C", "foil": "C"}\n', ["same token"]),
])
def test_bad_prompt_files(monkeypatch, capsys, tmp_path, prompts, content, words):
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_text(content)
    code, _, err = cli(monkeypatch, capsys, *TINY, "--prompts", str(path),
                       "--methods", "random")
    assert_bad(code, err, *words)


@pytest.mark.real
def test_real_smollm2_ioi_two_prompts(monkeypatch, capsys):
    from pathlib import Path

    ioi = Path(__file__).resolve().parent.parent / "data" / "prompts" / "ioi.jsonl"
    code, out, err = cli(monkeypatch, capsys, "faithfulness", "--model", "smollm2-135m", "--prompts",
                         str(ioi),
                         "--methods", "gradient,random", "--level", "token", "--limit", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["n_examples"] == 2 and data["methods"]["gradient"]["attribution_seconds"] > 0
