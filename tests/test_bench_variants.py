"""Method variants (NAME:key=value) and the evaluation split of ``workbench bench circuits``: parsed to the
table's types, bad ones refused; a validation split too small for the bootstrap is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_bad, run_cli

from circuits.bench.runner import BenchConfig, check_config, total_steps
from circuits.bench.variants import split_variant
from core.errors import MethodError

ROWS = [{"prompt": f"The cat number {i} sat on the mat", "corrupt": f"The dog number {i} sat on the mat",
         "target": " and", "foil": " or"} for i in range(16)]  # split 6 / 2 / 8: validation too small


def test_split_variant_types_and_refusals():
    assert split_variant("dpa") == ("dpa", {})
    assert split_variant("dpa:w_v=0.7:act_mode=derivative") == ("dpa", {"w_v": 0.7, "act_mode": "derivative"})
    name, params = split_variant("eap_ig:steps=3")
    assert name == "eap_ig" and params == {"steps": 3} and isinstance(params["steps"], int)
    for bad, why in [("dpa:w_z=1", "no parameter w_z"), ("dpa:w_v", "key=value"), ("dpa:w_v=much", "not a"),
                     ("eap_ig:steps=0", "whole number"), ("random:seed=1", "not an edge method")]:
        with pytest.raises(MethodError, match=why):
            split_variant(bad)
    cfg = BenchConfig(model="m", tasks=["ioi"], methods=["dpa:w_q=0", "activation_patching:copies=2"])
    check_config(cfg)
    assert total_steps(cfg) == 2 + 2  # edge and node; activation patching: node level and its edge sample
    assert total_steps(BenchConfig(model="m", tasks=["ioi"], methods=["activation_patching"], patch_sample=0)) == 1
    with pytest.raises(MethodError, match="patch-sample"):
        check_config(BenchConfig(model="m", tasks=["ioi"], patch_sample=-1))
    with pytest.raises(MethodError, match="evaluation split"):
        check_config(BenchConfig(model="m", tasks=["ioi"], eval_split="train"))


@pytest.mark.parametrize("case", ["small_validation", "bad_split", "bad_variant"])
def test_cli_refuses_in_one_line(monkeypatch, capsys, tmp_path, case):
    out = tmp_path / "doc.md"
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    args = ["bench", "circuits", "--model", "smollm2-135m", "--out", str(out), "--n-train", "4", "--n-test", "4",
            "--tasks", str(path)]
    if case == "small_validation":
        code, _, err = run_cli(monkeypatch, capsys, *args, "--eval-split", "validation")
        assert_bad(code, err, "validation split has 2 prompts", "at least 4")
    elif case == "bad_split":
        code, _, err = run_cli(monkeypatch, capsys, *args, "--eval-split", "train")
        assert_bad(code, err, "unknown evaluation split", "validation")
    else:
        code, _, err = run_cli(monkeypatch, capsys, *args, "--methods", "dpa:w_v=0.5:w_z=1")
        assert_bad(code, err, "no parameter w_z")
    assert not out.exists() and not out.with_suffix(".json").exists()
