"""vit-eval / vit-explain through the CLI: JSON contract, stored run, bad input -> one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

torch.set_num_threads(1)
KEYS = {"pointing_game", "energy_pointing_game", "mask_iou", "deletion_auc", "insertion_auc",
        "positive_perturbation_auc", "negative_perturbation_auc", "class_sensitivity", "seconds_per_image"}


def test_vit_eval_json_and_run(monkeypatch, capsys, vit_dir):
    code, out, err = cli(monkeypatch, capsys, "vit-eval", "--model", vit_dir,
                         "--methods", "dap,rollout,random", "--n", "4", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert set(res["methods"]) == {"dap", "rollout", "random"}
    for row in res["methods"].values():
        assert KEYS <= set(row)
    assert res["methods"]["rollout"]["class_sensitivity"] == 1.0  # rollout ignores the class
    assert res["cost"]["dap_over_forward_backward"] > 0
    assert "| dap |" in res["markdown"]
    from core.store import RunStore

    run = RunStore().get(res["run"])
    assert run.kind == "vit_eval"
    assert (run.path / "overlay.plotly.json").exists() and (run.path / "table.md").exists()
    assert run.tensors()["map_dap"].shape == (4, 8, 8)


def test_shipped_model_is_listed_and_default(monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "models", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["vit-synth"]["kind"] == "vit" and rows["vit-synth"]["params"] > 0
    metrics = json.loads(open(os.path.join(rows["vit-synth"]["path"], "metrics.json")).read())
    assert metrics["test_accuracy"] >= 0.95


def test_unknown_method(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "vit-eval", "--methods", "dap,lime", "--n", "2")
    assert_bad(code, err, "unknown ViT method", "lime")


def test_non_vit_model(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "vit-eval", "--model", "smollm2-135m", "--methods", "dap")
    assert_bad(code, err, "smollm2-135m", "not a vision transformer")
    code, _, err = cli(monkeypatch, capsys, "vit-explain", "x.png", "--model", "smollm2-135m")
    assert_bad(code, err, "not a vision transformer")


def _png(path, array: np.ndarray) -> str:
    from PIL import Image

    Image.fromarray(array).save(path)
    return str(path)


def test_image_of_wrong_size(monkeypatch, capsys, tmp_path, vit_dir):
    img = _png(tmp_path / "big.png", np.zeros((40, 40, 3), dtype=np.uint8))
    code, _, err = cli(monkeypatch, capsys, "vit-explain", img, "--model", vit_dir)
    assert_bad(code, err, "40x40", "32x32", "--model dinov2-small")  # says which model takes a photograph


def test_image_of_wrong_channels(monkeypatch, capsys, tmp_path, vit_dir):
    img = _png(tmp_path / "gray.png", np.zeros((32, 32), dtype=np.uint8))
    code, _, err = cli(monkeypatch, capsys, "vit-explain", img, "--model", vit_dir)
    assert_bad(code, err, "channels")
    np.save(tmp_path / "four.npy", np.zeros((4, 32, 32), dtype=np.float32))
    code, _, err = cli(monkeypatch, capsys, "vit-explain", str(tmp_path / "four.npy"), "--model", vit_dir)
    assert_bad(code, err, "channels")


def test_vit_explain_good_image(monkeypatch, capsys, tmp_path, vit_dir):
    from attribution.vit import data

    img = data.synthetic(1, seed=3).images[0]
    np.save(tmp_path / "ok.npy", img.numpy())
    code, out, err = cli(monkeypatch, capsys, "vit-explain", str(tmp_path / "ok.npy"), "--model", vit_dir,
                         "--method", "gae", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert np.array(res["map"]).shape == (8, 8) and res["predicted"] in ("plus", "ring", "triangle", "x")


def test_subprocess_exit_code_for_unknown_method():
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "vit-eval", "--methods", "nope", "--json"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
