"""The CLI for toy models: zoo listing, train, ablate, patch; bad input -> exit 2, one line."""

import json
import subprocess
import sys

import pytest


def run(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=600, env=env
    )


def run_inproc(args, capsys, monkeypatch):
    """workbench.cli.main in this process (no interpreter start-up): (exit code, stdout, stderr)."""
    from workbench.cli import main

    monkeypatch.setattr(sys, "argv", ["workbench", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_models_lists_toys_and_loads_them():
    r = run("models", "--json")
    assert r.returncode == 0, r.stderr
    rows = {m["name"]: m for m in json.loads(r.stdout)}
    for name in ("ioi-attn-1l2h", "ioi-attn-2l1h"):
        assert rows[name]["kind"] == "toy" and rows[name]["params"] > 0
    import workbench as wb
    from core.models.hooked import HookedModel

    m = wb.load("ioi-attn-1l2h")
    assert isinstance(m, HookedModel) and m.kind == "toy" and m.arch.mlp == "none" and m.arch.norm == "none"
    assert m.top_predictions("N3 and N7 then N7", k=1)[0][0] == "N3"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "nope", "--out", "{tmp}/x"], "unknown task"),
        (["train", "ioi", "--heads", "5", "--out", "{tmp}/x"], "must divide d_model"),
        (["train", "carry", "--ffn", "moe", "--top-k", "7", "--out", "{tmp}/x"], "top_k"),
        (["train", "ioi", "--ffn", "sparse", "--out", "{tmp}/x"], "unknown ffn"),
        (["ablate", "no-such-model"], "unknown model"),
        (["ablate", "{tmp}/missing-checkpoint"], "does not exist"),
        (["ablate", "ioi-attn-1l2h", "-c", "head:0.7"], "out of range"),
        (["ablate", "ioi-attn-1l2h", "-c", "expert:0.0"], "no MLP"),
        (
            ["patch", "ioi-attn-1l2h", "N1 and N2 then N2", "N1 and N2", "--target", "N1"],
            "same number of tokens",
        ),
    ],
)
def test_bad_input_exit_2(tmp_path, capsys, monkeypatch, args, needle):
    code, out, err = run_inproc([a.replace("{tmp}", str(tmp_path)) for a in args], capsys, monkeypatch)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err


def test_missing_weights_is_a_model_file_error(tmp_path, capsys, monkeypatch):
    import shutil

    from core.models.zoo import DATA_DIR

    dst = tmp_path / "broken"
    shutil.copytree(DATA_DIR / "models" / "ioi-attn-1l2h", dst)
    (dst / "model.safetensors").unlink()
    code, _, err = run_inproc(["ablate", str(dst)], capsys, monkeypatch)
    assert code == 2 and "model.safetensors" in err


def test_train_json_and_checkpoint(tmp_path):
    out = tmp_path / "tiny"
    r = run("train", "ioi", "--steps", "5", "--d-model", "16", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["spec"]["d_model"] == 16 and "--steps 5" in summary["command"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["workbench"]["loader"] == "core.models.toy_checkpoint:load" and cfg["workbench"]["kind"] == "toy"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["seed"] == 0 and metrics["loss_curve"] and "test_accuracy" in metrics
    assert (out / "snapshots.safetensors").exists()
    again = run("train", "ioi", "--steps", "5", "--out", str(out))
    assert again.returncode == 2 and "--force" in again.stderr


def test_ablate_and_patch_json():
    r = run("ablate", "ioi-attn-1l2h", "--method", "zero", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["base"]["accuracy"] == 1.0 and len(res["scores"]) == 2
    r = run(
        "patch",
        "ioi-attn-1l2h",
        "N1 and N2 then N2",
        "N2 and N1 then N1",
        "--target",
        "N1",
        "--foil",
        "N2",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["clean"] > 0 > res["corrupted"] and len(res["effect"]) == 1 and len(res["effect"][0]) == 5
