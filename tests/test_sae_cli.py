"""`workbench sae train|eval` on a tiny random model, and the shipped SAEs (features: test_sae_dashboards.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli as cli

from core.models.tiny import save_tiny

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(save_tiny(tmp_path_factory.mktemp("models") / "tiny", layers=2))


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory):
    """One small SAE trained through the CLI, shared by the tests below."""
    import os

    root = tmp_path_factory.mktemp("sae")
    mp = pytest.MonkeyPatch()
    previous = os.environ.get("WORKBENCH_RUNS")
    os.environ["WORKBENCH_RUNS"] = str(root / "runs")
    from workbench.cli import main

    mp.setattr(
        sys,
        "argv",
        [
            "workbench",
            "sae",
            "train",
            "--model",
            tiny,
            "--hook",
            "blocks.1.hook_resid_post",
            "--tokens",
            "1500",
            "--width",
            "32",
            "--k",
            "4",
            "--epochs",
            "2",
            "--out",
            str(root / "sae"),
            "--json",
        ],
    )
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main()
        except SystemExit as exc:
            assert exc.code == 0
    mp.undo()
    if previous is None:
        os.environ.pop("WORKBENCH_RUNS", None)
    else:
        os.environ["WORKBENCH_RUNS"] = previous
    return json.loads(buf.getvalue()), root / "sae"


def test_train_reports_metrics_and_saves_saelens_format(trained):
    res, path = trained
    for key in ("explained_variance", "l0", "dead_fraction", "ce_loss_delta", "path", "mse"):
        assert key in res
    assert res["l0"] == pytest.approx(4.0) and 0 <= res["dead_fraction"] <= 1
    assert (
        res["path"] == str(path)
        and (path / "cfg.json").exists()
        and (path / "sae_weights.safetensors").exists()
    )
    cfg = json.loads((path / "cfg.json").read_text())
    assert cfg["d_sae"] == 32 and cfg["metadata"]["hook_name"] == "blocks.1.hook_resid_post"


def test_eval_width_mismatch_exit_2(trained, monkeypatch, capsys):
    _, path = trained
    code, _, err = cli(
        monkeypatch, capsys, "sae", "eval", "--sae", str(path), "--hook", "blocks.0.mlp.hook_pre"
    )
    assert code == 2 and "does not match" in err


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--kind", "relu6"], "unknown SAE kind"),
        (["--width", "0"], "width"),
        (["--width", "8", "--k", "9"], "--k 9"),
        (["--hook", "blocks.5.hook_resid_post"], "does not exist"),
        (["--tokens", "10"], "too few"),
    ],
)
def test_train_bad_input_exit_2(tiny, tmp_path, monkeypatch, capsys, args, msg):
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    base = ["sae", "train", "--model", tiny, "--hook", "blocks.1.hook_resid_post", "--tokens", "600"]
    code, out, err = cli(monkeypatch, capsys, *base, *args)
    assert code == 2 and out == "" and msg in err and len(err.strip().splitlines()) == 1


def test_missing_sae_dir_exit_2(tmp_path, monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "sae", "features", "--sae", str(tmp_path), "--token", " the")
    assert code == 2 and "not a dictionary directory" in err


def test_shipped_smollm2_dictionaries_are_saelens_format():
    """The shipped dictionaries' files (no model needed): SAELens config, four depths of residual
    SAEs and transcoders, recorded held-out metrics within the goals they were built to meet."""
    dirs = [
        p.parent
        for p in (REPO / "data" / "saes").glob("*/cfg.json")
        if json.loads(p.read_text())["metadata"].get("model_name") == "smollm2-135m"
    ]
    if not dirs:
        pytest.skip("no shipped smollm2 dictionaries in data/saes")
    kinds: dict[str, set[int]] = {}
    for d in dirs:
        cfg = json.loads((d / "cfg.json").read_text())
        assert cfg["d_in"] == 576 and cfg["metadata"]["hook_name"].startswith("blocks.")
        info = json.loads((d / "workbench.json").read_text())
        m = info["metrics"]
        assert m["l0"] <= 64.5 and m["dead_fraction"] < 0.05 and m["ce_loss_delta"] <= 0.3
        if info["kind"] == "topk":
            assert m["explained_variance"] >= 0.8 and cfg["metadata"]["hook_name"].endswith("hook_resid_post")
        else:
            assert cfg["metadata"]["hook_name_out"].endswith("hook_mlp_out") and m["explained_variance"] > 0.3
        assert (d / "sae_weights.safetensors").stat().st_size < 8_000_000
        kinds.setdefault(info["kind"], set()).add(info["layer"])
    if len(dirs) >= 8:  # the full shipped set: four depths of each kind
        assert kinds["topk"] == kinds["transcoder"] and len(kinds["topk"]) >= 4


@pytest.mark.real
def test_shipped_smollm2_sae_loads_and_fits_the_model():
    from attribution.sae.train import check_fits, load_sae
    from workbench.commands.concepts import find_saes

    saes = find_saes("smollm2-135m")
    assert saes, "no shipped smollm2 SAE"
    hook, path = next(iter(saes.items()))
    sae = load_sae(path)
    check_fits(sae, 576, hook)
    assert sae.cfg.d_sae * 576 * 2 * 4 < 20_000_000
