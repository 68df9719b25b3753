"""`workbench circuit discover|evaluate`: the JSON contract, saved runs, and one-line errors with exit 2."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import assert_bad, run_cli

TOY = "ioi-attn-2l1h"


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.returncode, self.stdout, self.stderr = code, out, err


@pytest.fixture
def cli(monkeypatch, capsys):
    return lambda args: Result(*run_cli(monkeypatch, capsys, *args))


@pytest.fixture
def toy_prompts(tmp_path):
    rows = [{"prompt": "N3 and N7 then N7", "target": "N3", "foil": "N7", "corrupt": "N7 and N3 then N3"},
            {"prompt": "N1 and N5 then N1", "target": "N5", "foil": "N1", "corrupt": "N5 and N1 then N5"}]
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_discover_contract_and_evaluate(cli, toy_prompts):
    r = cli(["circuit", "discover", "--model", TOY, "--prompts", str(toy_prompts), "--method", "dpa",
                 "--edges", "5", "--grid", "2,4,8,100", "--json"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"model", "method", "n_prompts", "n_nodes", "n_edges_total", "edges", "seconds", "faithfulness",
            "run"} <= set(out)
    assert (out["model"], out["method"], out["n_prompts"], out["n_nodes"], out["n_edges_total"]) == \
        (TOY, "dpa", 2, 4, 12)
    assert len(out["edges"]) == 5 and set(out["edges"][0]) == {"src", "dst", "score"}
    scores = [abs(e["score"]) for e in out["edges"]]
    assert scores == sorted(scores, reverse=True)
    f = out["faithfulness"]
    assert f["k"] == [2, 4, 8, 12] and len(f["normalized"]) == 4 and f["normalized"][-1] == pytest.approx(1.0)
    assert 0.0 <= f["auc"] <= 1.2

    again = cli(["circuit", "evaluate", "--run", out["run"][:-2], "--grid", "2,4,8,12", "--json"])  # a prefix
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["faithfulness"]["normalized"] == pytest.approx(f["normalized"], abs=1e-5)

    keep = cli(["circuit", "evaluate", "--run", out["run"], "--keep", "L1.H0->logits", "--keep",
                    "embed->L1.H0.q", "--json"])
    assert keep.returncode == 0, keep.stderr
    assert 0.0 < json.loads(keep.stdout)["normalized"] < 1.0


def test_toy_task_prompts(cli):
    r = cli(["circuit", "discover", "--model", TOY, "--prompts", "task", "--method", "activation_patching",
                 "--edges", "3", "--limit", "20", "--no-save", "--json"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_prompts"] == 20 and out["edges"][0]["src"] == "L1.H0" and "run" not in out


@pytest.mark.parametrize("args, message", [
    (["--method", "acdc"], "unknown edge method"),
    (["--edges", "0"], "--edges"),
    (["--edges", "-3"], "--edges"),
    (["--limit", "0"], "--limit"),
    (["--ablation", "resample"], "unknown ablation"),
    (["--grid", "10,0"], "--grid"),
    (["--param", "stepz=3", "--method", "eap_ig"], "no parameter"),
    (["--param", "steps=0", "--method", "eap_ig"], "steps"),
])
def test_discover_bad_options(cli, toy_prompts, args, message):
    r = cli(["circuit", "discover", "--model", TOY, "--prompts", str(toy_prompts), "--json", *args])
    assert_bad(r.returncode, r.stderr, message)
    assert r.stdout == ""


@pytest.mark.parametrize("row, message", [
    ({"prompt": "N3 and N7 then N7", "target": "N3", "foil": "N7", "corrupt": "N7 and N3"}, "same number of tokens"),
    ({"prompt": "N3 and N7 then N7", "target": "N3", "corrupt": "N7 and N3 then N3"}, "foil"),
    ({"prompt": "N3 and N7 then N7", "target": "N3", "foil": "N3", "corrupt": "N7 and N3 then N3"}, "same token"),
])
def test_discover_bad_rows(cli, tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    extra = ["--metric", "logit_diff"] if "foil" not in row else []
    r = cli(["circuit", "discover", "--model", TOY, "--prompts", str(path), *extra])
    assert_bad(r.returncode, r.stderr, message)


def test_empty_set_and_bad_edge_names(cli, tmp_path, toy_prompts):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    r = cli(["circuit", "discover", "--model", TOY, "--prompts", str(empty)])
    assert_bad(r.returncode, r.stderr, "no prompts")
    saved = json.loads(cli(["circuit", "discover", "--model", TOY, "--prompts", str(toy_prompts),
                                "--grid", "4", "--json"]).stdout)["run"]
    for keep, message in [("L1.H0->L0.H0.q", "no edge"), ("L7.H0->logits", "no sender"),
                          ("embed->L0.H0.z", "no receiver"), ("embed", "SRC->DST")]:
        r = cli(["circuit", "evaluate", "--run", saved, "--keep", keep])
        assert_bad(r.returncode, r.stderr, message)
    r = cli(["circuit", "evaluate", "--run", "no-such-run"])
    assert_bad(r.returncode, r.stderr, "no-such-run")
