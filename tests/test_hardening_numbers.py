"""Hardening of numbers: NaN and Infinity never leave a command or the API, never get saved; numeric
options are range-checked at parse time; images are capped before decoding."""

from __future__ import annotations

import json
import math

import pytest
import torch

from core.errors import NonFiniteError
from tests.cli_helpers import assert_bad, run_cli

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


# -- non-finite inputs: weights, parameters, options ------------------------------------------------------

def _nan_model(tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from core.models.zoo import DATA_DIR

    dst = tmp_path / "nan-model"
    shutil.copytree(DATA_DIR / "models" / "ioi-attn-1l2h", dst)
    tensors = load_file(str(dst / "model.safetensors"))
    key = next(k for k, v in tensors.items() if v.is_floating_point() and v.numel() > 1)
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] = float("nan")
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_nan_weights_refused(tmp_path, monkeypatch, capsys):
    import workbench as wb
    from core.errors import ModelFileError

    d = _nan_model(tmp_path)
    with pytest.raises(ModelFileError, match="non-finite weights"):
        wb.load(str(d))
    code, out, err = run_cli(monkeypatch, capsys, "attribute", str(d), PROMPT, "--target", "N1", "--json")
    assert_bad(code, err, "non-finite weights")
    assert out == "" and not _stored(tmp_path)


@pytest.mark.parametrize("args, words", [
    (["attribute", "ioi-attn-1l2h", PROMPT, "--target", "N1", "--param", "w_q=nan"], ["w_q=nan", "finite"]),
    (["attribute", "ioi-attn-1l2h", PROMPT, "--target", "N1", "--param", "w_v=-inf"], ["finite"]),
    (["attribute", "ioi-attn-1l2h", PROMPT, "--target", "N1", "--method", "ig", "--param", "steps=inf"],
     ["steps=inf"]),
    (["attribute", "ioi-attn-1l2h", PROMPT, "--target", "N1", "--param", "w_q=1e999"], ["finite"]),
    (["faithfulness", "--model", "ioi-attn-1l2h", "--prompts", "x.jsonl", "--methods", "ig", "--param",
      "ig.steps=NaN"], ["ig.steps=nan"]),
    (["concepts", "--model", "ioi-attn-1l2h", "--dataset", "x.jsonl", "--scale", "nan"], ["--scale", "finite"]),
    (["train", "ioi", "--out", "x", "--lr", "inf"], ["--lr", "finite"]),
    (["train", "ioi", "--out", "x", "--weight-decay", "nan"], ["--weight-decay"]),
    (["train-vit", "--lr", "nan"], ["--lr"]),
    (["sae", "train", "--model", "m", "--hook", "h", "--epochs", "inf"], ["--epochs"]),
    (["recover-heads", "--d", "3", "--heads", "2", "--noise", "nan"], ["--noise"]),
    (["icl-readout", "--lam", "inf"], ["--lam"]),
])
def test_non_finite_parameters(monkeypatch, capsys, tmp_path, args, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert_bad(code, err, *words)
    assert out == "" and not _stored(tmp_path)


def test_emit_is_strict_json(capsys):
    from workbench.commands.common import emit

    with pytest.raises(NonFiniteError, match=r"scores\[1\]"):
        emit({"scores": [1.0, float("nan")]}, True)
    with pytest.raises(NonFiniteError):
        emit({"x": float("inf")}, False)
    assert capsys.readouterr().out == ""
    emit({"x": 1.5}, True)
    assert json.loads(capsys.readouterr().out) == {"x": 1.5}


def test_store_refuses_non_finite(tmp_path):
    from core.store import RunDraft, RunStore

    store = RunStore(tmp_path / "runs")
    for draft in (RunDraft(kind="t", result={"a": [1.0, float("inf")]}),
                  RunDraft(kind="t", tensors={"s": torch.tensor([0.0, float("nan")])}),
                  RunDraft(kind="t", args={"scale": float("nan")}),
                  RunDraft(kind="t", timings={"s": float("inf")})):
        with pytest.raises(NonFiniteError, match="not saved"):
            store.save(draft)
    assert store.list() == [] and not _stored(tmp_path)
    store.save(RunDraft(kind="t", result={"a": 1.0}, tensors={"s": torch.ones(2)}))
    assert len(store.list()) == 1


def test_api_attribute_checks_numbers(monkeypatch):
    import workbench as wb

    m = wb.load("ioi-attn-1l2h")
    with pytest.raises(NonFiniteError, match="w_q"):
        wb.attribute(m, PROMPT, "N1", w_q=float("nan"))
    with torch.no_grad():
        m.tl.blocks[0].attn.W_V.view(-1)[0] = float("nan")  # weights spoiled after loading
    with pytest.raises(NonFiniteError, match="scores"):
        wb.attribute(m, PROMPT, "N1")


# -- images: pixel cap before decoding, finite values in [0, 1] -----------------------------------------

def bomb_png(w: int, h: int) -> bytes:
    """A real 1-bit PNG of w x h black pixels (a few hundred KB for 20000 x 20000): the catalogue's builder."""
    from scripts.bad_inputs import png

    return png(w, h)


def test_bomb_png_refused_before_decoding(tmp_path, monkeypatch, capsys):
    import tracemalloc

    from attribution.vit.images import open_image, read_image
    from core.models.vit import ImageError

    data = bomb_png(20000, 20000)
    assert len(data) < 2_000_000
    f = tmp_path / "bomb.png"
    f.write_bytes(data)
    tracemalloc.start()
    with pytest.raises(ImageError, match="400,000,000 pixels; the limit"):
        read_image(f)
    with pytest.raises(ImageError, match="limit"):
        open_image(data, "bomb.png")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20_000_000  # nothing decoded
    code, out, err = run_cli(monkeypatch, capsys, "vit-explain", str(f), "--json")
    assert_bad(code, err, "400,000,000 pixels", "limit")
    just_over = tmp_path / "big.png"  # above our limit, below PIL's own error: our check, from the header
    just_over.write_bytes(bomb_png(5000, 5000))
    with pytest.raises(ImageError, match="5000 x 5000"):
        read_image(just_over)
    code, out, err = run_cli(monkeypatch, capsys, "vit-explain", str(just_over), "--json")
    assert_bad(code, err, "5000 x 5000", "limit")  # one line: no PIL warning


@pytest.mark.parametrize("values, words", [
    ("nan", ["NaN or Infinity"]), ("inf", ["NaN or Infinity"]), (1e30, ["[0, 1]"]), (-1.0, ["[0, 1]"]),
])
def test_bad_pixel_values(tmp_path, monkeypatch, capsys, values, words):
    import numpy as np

    arr = np.full((3, 32, 32), 0.5, dtype=np.float32)
    arr[0, 0, 0] = float(values)
    f = tmp_path / "img.npy"
    np.save(f, arr)
    code, out, err = run_cli(monkeypatch, capsys, "vit-explain", str(f), "--json")
    assert_bad(code, err, *words)
    assert out == ""


def test_vit_model_refuses_nan_images():
    import workbench as wb
    from core.models.vit import ImageError

    vit = wb.load("vit-synth")
    img = torch.full((1, vit.cfg.in_channels, vit.cfg.image_size, vit.cfg.image_size), 0.5)
    img[0, 0, 0, 0] = float("nan")
    with pytest.raises(ImageError, match="NaN"):
        vit(img)


def test_app_vision_bomb_upload(tmp_path):
    from app.testing import open_page

    at = open_page("vision", {"vit_model": "vit-synth", "vit_source": "upload"})
    at.file_uploader(key="vit_upload").upload("bomb.png", bomb_png(20000, 20000), "image/png").run()
    assert not at.exception
    assert any("400,000,000 pixels" in e.value and "limit" in e.value for e in at.error), at.error


def test_train_vit_out_file_checked_first(tmp_path, monkeypatch, capsys):
    import attribution.vit.train as vt

    f = tmp_path / "existing.txt"
    f.write_text("x")
    monkeypatch.setattr(vt, "train_vit", lambda *a, **k: pytest.fail("trained before checking --out"))
    code, out, err = run_cli(monkeypatch, capsys, "train-vit", "--steps", "1", "--out", str(f))
    assert_bad(code, err, "not a directory")


def test_diverged_training_saves_nothing(tmp_path, monkeypatch, capsys):
    out_dir = tmp_path / "toy"
    code, out, err = run_cli(monkeypatch, capsys, "train", "ioi", "--out", str(out_dir), "--lr", "1e30",
                             "--steps", "3", "--json")
    assert_bad(code, err, "training diverged", "nothing saved")
    assert out == "" and not (out_dir / "config.json").exists()
