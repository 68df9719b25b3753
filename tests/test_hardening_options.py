"""Numeric options are range-checked at parse time (core/options.py): one line, exit 2, before any
model is loaded or any work is done."""

from __future__ import annotations

import pytest

from tests.cli_helpers import assert_bad, run_cli

P = "N1 and N2 then N2"
ATTR = ["attribute", "ioi-attn-1l2h", P, "--target", "N1"]

CASES = [
    (ATTR + ["--top", "-5"], "--top"),
    (ATTR + ["--top", "0"], "--top"),
    (ATTR + ["--method", "ig", "--param", "steps=inf"], "steps=inf"),
    (ATTR + ["--method", "ig", "--param", "steps=1.5"], "whole number"),
    (ATTR + ["--method", "ig", "--param", "steps=0"], "whole number"),
    (["probe", "--model", "ioi-attn-1l2h", "--dataset", "d.jsonl", "--layers", "5-2"], "backwards"),
    (["probe", "--model", "ioi-attn-1l2h", "--dataset", "d.jsonl", "--layers", "-1"], "--layers"),
    (["probe", "--model", "ioi-attn-1l2h", "--dataset", "d.jsonl", "--test-frac", "nan"], "--test-frac"),
    (["probe", "--model", "ioi-attn-1l2h", "--dataset", "d.jsonl", "--seed", "-1"], "--seed"),
    (["concepts", "--model", "ioi-attn-1l2h", "--dataset", "d.jsonl", "--n-steer", "-1"], "--n-steer"),
    (["concepts", "--model", "ioi-attn-1l2h", "--dataset", "d.jsonl", "--steer-layers", "3-1"], "backwards"),
    (["vit-eval", "--batch-size", "0"], "--batch-size"),
    (["vit-eval", "--batch-size", "-1"], "--batch-size"),
    (["vit-eval", "--seed", "-1"], "--seed"),
    (["vit-eval", "--n", "0"], "--n"),
    (["vit-explain", "img.png", "--target", "-1"], "--target"),
    (["faithfulness", "--model", "ioi-attn-1l2h", "--prompts", "p.jsonl", "--methods", "ig", "--param",
      "ig.steps=NaN"], "ig.steps=nan"),
    (["faithfulness", "--model", "ioi-attn-1l2h", "--prompts", "p.jsonl", "--methods", "dpa",
      "--batch-size", "-3"], "--batch-size"),
    (["attribute-set", "--model", "ioi-attn-1l2h", "--prompts", "p.jsonl", "--batch-size", "-3"], "--batch-size"),
    (["circuit", "discover", "--model", "ioi-attn-1l2h", "--prompts", "task", "--batch-size", "-3"],
     "--batch-size"),
    (["circuit", "discover", "--model", "ioi-attn-1l2h", "--prompts", "task", "--edges", "0"], "--edges"),
    (["sae", "features", "--sae", "s", "--tokens", "0"], "--tokens"),
    (["sae", "features", "--sae", "s", "--contexts", "-2"], "--contexts"),
    (["sae", "corpus", "--chars", "-1"], "--chars"),
    (["sae", "corpus", "--samples", "-1"], "--samples"),
    (["sae", "train", "--model", "m", "--hook", "h", "--k", "0"], "--k"),
    (["sae", "train", "--model", "m", "--hook", "h", "--lr", "0"], "--lr"),
    (["sae", "eval", "--sae", "s", "--windows", "0"], "--windows"),
    (["train", "ioi", "--out", "o", "--steps", "0"], "--steps"),
    (["train", "ioi", "--out", "o", "--layers", "0"], "--layers"),
    (["train", "ioi", "--out", "o", "--batch-size", "-1"], "--batch-size"),
    (["train", "ioi", "--out", "o", "--threads", "0"], "--threads"),
    (["train-vit", "--steps", "-5"], "--steps"),
    (["train-vit", "--seed", "-1"], "--seed"),
    (["icl-readout", "--n", "0"], "--n"),
    (["icl-readout", "--iters", "-1"], "--iters"),
    (["recover-heads", "--d", "0", "--heads", "2"], "--d"),
    (["recover-heads", "--d", "3", "--heads", "-2"], "--heads"),
    (["recover-heads", "--d", "3", "--heads", "2", "--noise", "-1e-3"], "--noise"),
    (["recover-heads", "--d", "3", "--heads", "2", "--dps", "5"], "--dps"),
    (["recover-heads", "--d", "3", "--heads", "2", "--seed", "-1"], "--seed"),
    (["generate", "ioi-attn-1l2h", P, "--max-new-tokens", "0"], "--max-new-tokens"),
]


@pytest.fixture
def no_work(monkeypatch, tmp_path):
    """Loading a model, or training, is a test failure: every case must stop at the options."""
    import core.models.zoo as zoo
    import workbench

    def boom(*a, **k):
        raise AssertionError("work started before the options were checked")

    monkeypatch.setattr(zoo, "load", boom)
    monkeypatch.setattr(workbench, "load", boom)
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("args, word", CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CASES])
def test_refused_at_parse_time(no_work, monkeypatch, capsys, args, word):
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert_bad(code, err, word)
    assert out == ""


def test_non_utf8_argument(no_work, monkeypatch, capsys):
    bad = b"N1 \xff\xfe".decode("utf-8", "surrogateescape")  # what Python makes of a non-UTF-8 argv
    code, out, err = run_cli(monkeypatch, capsys, "attribute", "ioi-attn-1l2h", bad, "--target", "N1")
    assert_bad(code, err, "not valid UTF-8")


def test_layer_spec():
    from core.errors import RangeError
    from core.options import parse_layer_spec

    assert parse_layer_spec("all") is None
    assert parse_layer_spec("0,2-4, 3") == [0, 2, 3, 4]
    for bad in ("5-2", "-1", "1-", "a", "", "1,,2"):
        with pytest.raises(RangeError):
            parse_layer_spec(bad)


def test_number_checks():
    from core.errors import NonFiniteError, WorkbenchError
    from core.options import check_number

    assert check_number("x", 3, integer=True, lo=1) == 3
    with pytest.raises(NonFiniteError):
        check_number("x", float("nan"))
    with pytest.raises(WorkbenchError, match=">= 1"):
        check_number("x", 0, lo=1)
    with pytest.raises(WorkbenchError, match="whole"):
        check_number("x", 1.5, integer=True)
