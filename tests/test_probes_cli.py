"""`workbench probe` and `workbench concepts` through the CLI on a tiny random model."""

from __future__ import annotations

import json
import random

import pytest
from cli_helpers import run_cli as cli

from core.models.tiny import save_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(save_tiny(tmp_path_factory.mktemp("models") / "tiny", layers=2))


def _dataset(path, n=48, classes=("negative", "positive")):
    rng = random.Random(0)
    words = {"negative": ["bad", "awful", "poor", "dull"], "positive": ["good", "great", "fine", "nice"]}
    with open(path, "w") as fh:
        for i in range(n):
            lab = classes[i % len(classes)]
            w = rng.choice(words[lab])
            fh.write(
                json.dumps(
                    {
                        "text": f"the {rng.choice(['movie', 'meal', 'book'])} was {w} .",
                        "label": lab,
                        "word": w,
                    }
                )
                + "\n"
            )
    return str(path)


def _json_run(monkeypatch, capsys, tmp_path, command: str, tiny: str, *args: str) -> tuple[dict, str]:
    """``workbench COMMAND --model TINY --dataset D ARGS --json`` into a fresh run store: its JSON, and D."""
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    data = _dataset(tmp_path / "d.jsonl")
    code, out, err = cli(monkeypatch, capsys, command, "--model", tiny, "--dataset", data, *args, "--json")
    assert code == 0, err
    return json.loads(out), data


def test_probe_json_and_run(tiny, tmp_path, monkeypatch, capsys):
    res, _ = _json_run(monkeypatch, capsys, tmp_path, "probe", tiny, "--pooling", "marked")
    assert [r["layer"] for r in res["layers"]] == [0, 1]
    for r in res["layers"]:
        assert {"layer", "accuracy", "control_accuracy", "selectivity", "gdv", "ci_low", "ci_high"} <= set(r)
        assert r["selectivity"] == pytest.approx(r["accuracy"] - r["control_accuracy"])
    assert res["best_layer"] in (0, 1)
    from core.store import RunStore

    run = RunStore().get(res["run"])
    assert (run.path / "curve.plotly.json").exists() and "rsa" in run.tables()


def test_probe_single_hook(tiny, tmp_path, monkeypatch, capsys):
    data = _dataset(tmp_path / "d.jsonl")
    code, out, err = cli(
        monkeypatch,
        capsys,
        "probe",
        "--model",
        tiny,
        "--dataset",
        data,
        "--hook",
        "blocks.0.mlp.hook_post",
        "--pooling",
        "mean",
        "--no-save",
        "--json",
    )
    assert code == 0, err
    assert [r["layer"] for r in json.loads(out)["layers"]] == [0]


@pytest.mark.parametrize("case", ["one_class", "empty", "bad_hook", "missing", "bad_layers", "bad_pooling"])
def test_probe_bad_input_exit_2(case, tiny, tmp_path, monkeypatch, capsys):
    data = _dataset(tmp_path / "d.jsonl")
    args = ["probe", "--model", tiny, "--dataset", data, "--no-save"]
    if case == "one_class":
        args[4] = _dataset(tmp_path / "one.jsonl", classes=("positive",))
    elif case == "empty":
        (tmp_path / "empty.jsonl").write_text("")
        args[4] = str(tmp_path / "empty.jsonl")
    elif case == "bad_hook":
        args += ["--hook", "blocks.7.hook_nothing"]
    elif case == "missing":
        args[4] = str(tmp_path / "nope.jsonl")
    elif case == "bad_layers":
        args += ["--layers", "9"]
    else:
        args += ["--pooling", "max"]
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_concepts_json(tiny, tmp_path, monkeypatch, capsys):
    res, data = _json_run(monkeypatch, capsys, tmp_path, "concepts", tiny, "--n-steer", "8")
    assert res["concept"] == "positive" and res["other"] == "negative"
    for r in res["layers"]:
        assert -1 <= r["cos_mean_probe"] <= 1
        assert set(r["steering"]) == {"mean", "probe", "random"}
    code, _, err = cli(
        monkeypatch, capsys, "concepts", "--model", tiny, "--dataset", data, "--concept", "meh"
    )
    assert code == 2 and "not a label" in err


@pytest.mark.real
def test_smollm2_sentiment_probe_is_selective(tmp_path, monkeypatch, capsys):
    """A short real-model check: 80 sentiment lines, two middle layers."""
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "data" / "concepts" / "sentiment.jsonl"
    small = tmp_path / "s.jsonl"
    small.write_text("\n".join(src.read_text().splitlines()[:80]) + "\n")
    code, out, err = cli(
        monkeypatch,
        capsys,
        "probe",
        "--model",
        "smollm2-135m",
        "--dataset",
        str(small),
        "--layers",
        "10,15",
        "--no-save",
        "--json",
    )
    assert code == 0, err
    best = max(json.loads(out)["layers"], key=lambda r: r["accuracy"])
    assert best["accuracy"] >= 0.85 and best["selectivity"] > 0
