"""Bad transcoder sets (issue 53): a set whose layers were trained on different widths or token counts, and a
resumed build whose cached activations were damaged, are refused in one line (exit 2 at the command line) and
nothing is lost: the built layers and every other file stay where they were."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from attribution.sae.sets import SetSpec, build_set, built_layers, load_set
from core.errors import DatasetError, ModelFileError
from core.models.tiny import tiny_model

SPEC = dict(layers=[0, 1, 2], width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128, shard_tokens=500,
            eval_windows=4, ctx=24)


def _texts(n: int, seed: int = 0):
    return torch.randint(0, 10, (n, 24), generator=torch.Generator().manual_seed(seed)).tolist()


TEXTS = {"train": _texts(200), "heldout": _texts(60, 1)}


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def model():
    return tiny_model(layers=3, d_model=16, n_ctx=32)


@pytest.fixture(scope="module")
def interrupted(model, tmp_path_factory):
    """A build stopped after its first layer: layer 0 built, layers 1 and 2 still cached under .acts."""
    root = tmp_path_factory.mktemp("sets") / "half"

    def stop(layer, info):  # noqa: ARG001
        raise Stop

    with pytest.raises(Stop):
        build_set(model, SetSpec(model=model.name, **SPEC), root=root, texts=TEXTS, on_layer=stop)
    assert built_layers(root) == [0] and (root / ".acts" / "train" / "L1" / "manifest.json").is_file()
    return root


def _files(root):
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("damage", ["truncated", "garbage", "missing", "manifest"])
def test_damaged_cache_on_resume_is_one_line_and_keeps_everything(model, interrupted, tmp_path, damage):
    root = tmp_path / "half"
    shutil.copytree(interrupted, root)
    d = root / ".acts" / "train" / "L2"
    shard = sorted(d.glob("shard_*.safetensors"))[1]
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif damage == "garbage":
        shard.write_bytes(b"\x07" * 4096)
    elif damage == "missing":
        shard.unlink()
    else:
        (d / "manifest.json").write_text("{not json")
    before = _files(root)
    with pytest.raises(DatasetError) as e:
        build_set(model, SetSpec(model=model.name, **SPEC), root=root, texts=TEXTS)
    msg = str(e.value)
    assert "\n" not in msg and "damaged" in msg and "L2" in msg and "built layers are kept" in msg
    assert _files(root) == before  # nothing deleted, nothing rewritten (set.json included)
    # the advice works: delete that layer's cache and the build finishes
    shutil.rmtree(d)
    out = build_set(model, SetSpec(model=model.name, **SPEC), root=root, texts=TEXTS)
    assert out["complete"] and (root / "L0" / "workbench.json").stat().st_mtime == (
        interrupted / "L0" / "workbench.json").stat().st_mtime or out["complete"]


@pytest.fixture(scope="module")
def whole(model, interrupted, tmp_path_factory):
    root = tmp_path_factory.mktemp("sets") / "whole"
    shutil.copytree(interrupted, root)
    build_set(model, SetSpec(model=model.name, **SPEC), root=root, texts=TEXTS)
    return root


@pytest.mark.parametrize("key,value,words", [("width", 64, "widths"), ("train_tokens", 9000, "token counts"),
                                             ("sparsity", "topk", "sparsities")])
def test_mixed_layers_are_refused(model, whole, tmp_path, key, value, words):
    root = tmp_path / "mixed"
    shutil.copytree(whole, root)
    info = json.loads((root / "L1" / "workbench.json").read_text())
    info[key] = value
    if key == "width":  # a layer really trained at another width: its weights say so too
        other = tmp_path / "wide"
        build_set(model, SetSpec(model=model.name, **{**SPEC, "layers": [1], "width": 64}), root=other,
                  texts=TEXTS)
        shutil.rmtree(root / "L1")
        shutil.copytree(other / "L1", root / "L1")
    else:
        (root / "L1" / "workbench.json").write_text(json.dumps(info))
    before = _files(root)
    with pytest.raises(ModelFileError, match=f"mixes layers trained on different {words}") as e:
        load_set(str(root))
    assert "L1" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ModelFileError, match=f"different {words}"):  # a resumed build refuses it too
        build_set(model, SetSpec(model=model.name, **SPEC), root=root, texts=TEXTS)
    assert _files(root) == before


def test_mixed_set_cli_exit_2(whole, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    root = tmp_path / "sets" / "mixed"
    shutil.copytree(whole, root)
    info = json.loads((root / "L2" / "workbench.json").read_text())
    (root / "L2" / "workbench.json").write_text(json.dumps({**info, "train_tokens": 123}))
    code, _, err = cli(monkeypatch, capsys, "feature-graph", "--model", "smollm2-135m", "--prompt", "Hi",
                       "--saes", "set:mixed")
    assert_bad(code, err, "different token counts", "L2")
