"""Hardening of numbers: NaN and Infinity never leave a command or the API, never get saved; numeric
options are range-checked at parse time; images are capped before decoding."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.cli_helpers import assert_bad, run_cli
from workbench.errors import NonFiniteError

PROMPT = "N1 and N2 then N2"


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))


def _stored(tmp_path) -> list:
    root = tmp_path / "runs"
    return [p for p in root.iterdir() if not p.name.startswith(".") and p.is_dir()] if root.exists() else []


# -- faithfulness: an undefined ratio is said so, left out of the means and counted -------------------------

def test_faithfulness_zero_clean_probability_left_out(tmp_path):
    import workbench as wb
    from attribution.faithfulness import evaluate

    m = wb.load("ioi-attn-1l2h")
    with torch.no_grad():
        m.tl.unembed.W_U.mul_(4.0)  # the wrong name's log-probability drops far below float32's range
    rows = [{"prompt": PROMPT, "target": "N2"}, {"prompt": PROMPT, "target": "N1"},
            {"prompt": "N3 and N4 then N4", "target": "N3"}]
    res = evaluate(m, rows, ["dpa", "random"], level="token")
    out = res.to_json()
    text = json.dumps(out, allow_nan=False)  # strict JSON: no NaN, no Infinity
    assert "NaN" not in text and "Infinity" not in text
    assert out["n_left_out"] == 1 and out["left_out"][0]["example"] == 0
    assert "undefined" in out["left_out"][0]["why"]
    assert all(m.n_examples == 2 for m in res.methods.values())
    assert all(math.isfinite(v) for m in out["methods"].values() for v in m.values() if isinstance(v, float))
    assert "1 left out" in res.markdown()
    res.save()  # the store accepts it: everything is finite


def test_faithfulness_all_undefined_is_an_error(tmp_path, monkeypatch, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": PROMPT, "target": "N2"}) + "\n")
    import attribution.faithfulness as fa

    monkeypatch.setattr(fa, "P_CLEAN_MIN", 1e-20)  # this toy's p(N2) is about 1e-30
    code, out, err = run_cli(monkeypatch, capsys, "faithfulness", "--model", "ioi-attn-1l2h", "--prompts",
                             str(f), "--methods", "dpa", "--json")
    assert_bad(code, err, "no example has a defined faithfulness ratio")
    assert out == "" and not _stored(tmp_path)
