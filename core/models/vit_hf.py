"""Local Hugging Face vision directories as HookedViT: ViT and DeiT classifiers, DINOv2 (bare or with its
classifier) and CLIP's vision tower.

The zoo routes a directory here by its config.json ``model_type`` (vit, deit, dinov2, clip_vision_model,
clip: ``core.models.zoo.VIT_MODEL_TYPES``). Weights are
read with safetensors only (``use_safetensors=True``); the HF module is converted weight by
weight into our hooked class (same math: pre-LN blocks, exact GELU, CLS classifier on the
final LayerNorm), so every method sees one interface. The image processor's mean/std (from
preprocessor_config.json, when present) move into the model: images are given in [0, 1].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float

from core.errors import ModelFileError
from core.models.vit import HookedViT, ViTConfig


def processor_stats(path: Path) -> tuple[list[float] | None, list[float] | None]:
    """(image_mean, image_std) from a model directory's preprocessor_config.json; (None, None) where the
    file is missing or unreadable or turns normalisation off."""
    f = path / "preprocessor_config.json"
    if not f.exists():
        return None, None
    try:
        d = json.loads(f.read_text())
    except (OSError, ValueError):
        return None, None
    if not d.get("do_normalize", True):
        return None, None
    return d.get("image_mean"), d.get("image_std")


def convert(hf, mean: list[float] | None = None, std: list[float] | None = None) -> HookedViT:
    """A HookedViT with the weights of an HF ViTForImageClassification or DeiTForImageClassification
    (DeiT: a distillation token after CLS, ``n_prefix=2``; its classifier reads CLS, as ViT's does)."""
    c = hf.config
    root = "deit." if c.model_type == "deit" else "vit."
    act = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}.get(c.hidden_act)
    if act is None:
        raise ModelFileError(f"HF ViT activation {c.hidden_act!r} is not supported (gelu, gelu_new)")
    labels = [c.id2label[i] for i in range(c.num_labels)] if getattr(c, "id2label", None) else []
    cfg = ViTConfig(image_size=c.image_size, patch_size=c.patch_size, in_channels=c.num_channels,
                    d_model=c.hidden_size, n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads,
                    d_mlp=c.intermediate_size, n_classes=c.num_labels, ln_eps=c.layer_norm_eps, act=act,
                    qkv_bias=c.qkv_bias, class_names=[str(x) for x in labels], pixel_mean=mean, pixel_std=std,
                    n_prefix=2 if root == "deit." else 1)
    m = HookedViT(cfg)
    h, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    sd = {k: v.detach().float() for k, v in hf.state_dict().items()}
    sd = {("vit." + k[len(root):] if k.startswith(root) else k): v for k, v in sd.items()}
    emb = "vit.embeddings."
    new: dict[str, torch.Tensor] = {
        "W_patch": sd[emb + "patch_embeddings.projection.weight"].reshape(d, -1),
        "b_patch": sd[emb + "patch_embeddings.projection.bias"],
        "cls_token": sd[emb + "cls_token"].reshape(d),
        "pos_embed": sd[emb + "position_embeddings"].reshape(-1, d),
        "ln_final.w": sd["vit.layernorm.weight"], "ln_final.b": sd["vit.layernorm.bias"],
        "W_head": sd["classifier.weight"].T, "b_head": sd["classifier.bias"],
    }
    if cfg.n_prefix == 2:
        new["dist_token"] = sd[emb + "distillation_token"].reshape(d)
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."

        def get(*keys: str, l: int = l) -> torch.Tensor | None:  # mixed shapes
            # transformers 5 names (vit.layers.N.attention.q_proj) first, then 4.x names
            for k in keys:
                for pre in (f"vit.layers.{l}.", f"vit.encoder.layer.{l}."):
                    if pre + k in sd:
                        return sd[pre + k]
            return None

        for ours, new5, old4 in (("Q", "q_proj", "query"), ("K", "k_proj", "key"), ("V", "v_proj", "value")):
            w = get(f"attention.{new5}.weight", f"attention.attention.{old4}.weight")  # (h*dh, d)
            new[b + f"attn.W_{ours}"] = w.reshape(h, dh, d).transpose(1, 2)
            bias = get(f"attention.{new5}.bias", f"attention.attention.{old4}.bias")
            new[b + f"attn.b_{ours}"] = bias.reshape(h, dh) if bias is not None else torch.zeros(h, dh)
        w_o = get("attention.o_proj.weight", "attention.output.dense.weight")
        new[b + "attn.W_O"] = w_o.T.reshape(h, dh, d)
        new[b + "attn.b_O"] = get("attention.o_proj.bias", "attention.output.dense.bias")
        new[b + "ln1.w"], new[b + "ln1.b"] = get("layernorm_before.weight"), get("layernorm_before.bias")
        new[b + "ln2.w"], new[b + "ln2.b"] = get("layernorm_after.weight"), get("layernorm_after.bias")
        new[b + "mlp.W_in"] = get("mlp.fc1.weight", "intermediate.dense.weight").T
        new[b + "mlp.b_in"] = get("mlp.fc1.bias", "intermediate.dense.bias")
        new[b + "mlp.W_out"] = get("mlp.fc2.weight", "output.dense.weight").T
        new[b + "mlp.b_out"] = get("mlp.fc2.bias", "output.dense.bias")
    missing = [k for k, v in new.items() if v is None]
    if missing:
        raise ModelFileError(f"HF ViT state dict lacks weights for {missing[:3]} (unknown layout)")
    m.load_state_dict({k: v.contiguous() for k, v in new.items()}, strict=True)
    return m.eval()


def load_hf_vit(entry: Any, device: str = "cpu", **_: Any) -> HookedViT:
    """Zoo loader for a local HF directory (safetensors weights): ViTForImageClassification,
    DeiTForImageClassification, or CLIP's vision tower (model_type clip_vision_model or clip; no classes:
    attach a head, core.models.vit_heads)."""
    path = Path(entry.path if hasattr(entry, "path") else entry)
    if not any(path.glob("*.safetensors")):
        raise ModelFileError(f"{path} has no .safetensors weights (only safetensors are loaded)")
    try:
        model_type = json.loads((path / "config.json").read_text()).get("model_type", "vit")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelFileError(f"cannot read {path / 'config.json'}: {exc}") from None
    try:
        import transformers

        cls = {"deit": "DeiTForImageClassification", "clip": "CLIPVisionModel",
               "clip_vision_model": "CLIPVisionModel"}.get(model_type, "ViTForImageClassification")
        hf = getattr(transformers, cls).from_pretrained(str(path), use_safetensors=True, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelFileError(f"cannot load HF ViT from {path}: {_first_line(exc)}") from None
    mean, std = processor_stats(path)
    if cls == "CLIPVisionModel":
        return convert_clip(hf.eval(), mean, std).to(device)
    return convert(hf, mean, std).to(device)


def convert_clip(hf, mean: list[float] | None = None, std: list[float] | None = None,
                 head: tuple[Float[torch.Tensor, "class features"], Float[torch.Tensor, " class"]] | None = None,
                 class_names: list[str] | None = None) -> HookedViT:
    """A HookedViT with the weights of CLIP's vision tower (transformers CLIPVisionModel): patch conv without
    bias, a LayerNorm on the embeddings (``ln_pre``), quick GELU, ``post_layernorm`` on CLS as the final
    LayerNorm (what its pooler output is). No classifier of its own: ``head`` (weight, bias) or no classes."""
    c = hf.config
    act = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_new": "gelu_new",
           "gelu_pytorch_tanh": "gelu_new"}.get(c.hidden_act)
    if act is None:
        raise ModelFileError(f"CLIP activation {c.hidden_act!r} is not supported")
    d = c.hidden_size
    weight, bias = head if head is not None else (torch.zeros(0, d), torch.zeros(0))
    cfg = ViTConfig(image_size=c.image_size, patch_size=c.patch_size, in_channels=c.num_channels, d_model=d,
                    n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads, d_mlp=c.intermediate_size,
                    n_classes=int(weight.shape[0]), ln_eps=c.layer_norm_eps, act=act,
                    class_names=list(class_names or []), pixel_mean=mean, pixel_std=std, ln_pre=True)
    m = HookedViT(cfg)
    h, dh = cfg.n_heads, cfg.d_head
    sd = {k.removeprefix("vision_model."): v.detach().float() for k, v in hf.state_dict().items()}
    new: dict[str, torch.Tensor] = {
        "W_patch": sd["embeddings.patch_embedding.weight"].reshape(d, -1), "b_patch": torch.zeros(d),
        "cls_token": sd["embeddings.class_embedding"].reshape(d),
        "pos_embed": sd["embeddings.position_embedding.weight"].reshape(-1, d),
        "ln_pre.w": sd["pre_layrnorm.weight"], "ln_pre.b": sd["pre_layrnorm.bias"],
        "ln_final.w": sd["post_layernorm.weight"], "ln_final.b": sd["post_layernorm.bias"],
        "W_head": weight.float().T.contiguous(), "b_head": bias.float(),
    }
    for l in range(cfg.n_layers):
        pre, b = f"encoder.layers.{l}.", f"blocks.{l}."
        for ours, name in (("Q", "q_proj"), ("K", "k_proj"), ("V", "v_proj")):
            new[b + f"attn.W_{ours}"] = sd[pre + f"self_attn.{name}.weight"].reshape(h, dh, d).transpose(1, 2)
            new[b + f"attn.b_{ours}"] = sd[pre + f"self_attn.{name}.bias"].reshape(h, dh)
        new[b + "attn.W_O"] = sd[pre + "self_attn.out_proj.weight"].T.reshape(h, dh, d)
        new[b + "attn.b_O"] = sd[pre + "self_attn.out_proj.bias"]
        new[b + "ln1.w"], new[b + "ln1.b"] = sd[pre + "layer_norm1.weight"], sd[pre + "layer_norm1.bias"]
        new[b + "ln2.w"], new[b + "ln2.b"] = sd[pre + "layer_norm2.weight"], sd[pre + "layer_norm2.bias"]
        new[b + "mlp.W_in"], new[b + "mlp.b_in"] = sd[pre + "mlp.fc1.weight"].T, sd[pre + "mlp.fc1.bias"]
        new[b + "mlp.W_out"], new[b + "mlp.b_out"] = sd[pre + "mlp.fc2.weight"].T, sd[pre + "mlp.fc2.bias"]
    m.load_state_dict({k: v.contiguous() for k, v in new.items()}, strict=True)
    return m.eval()


# --- DINOv2 (transformers Dinov2Model / Dinov2ForImageClassification) ------------------------------------

def load_dinov2_backbone(path: str | Path):
    """A transformers Dinov2Model from a local directory (safetensors only, never the hub)."""
    path = Path(path)
    if not any(path.glob("*.safetensors")):
        raise ModelFileError(f"{path} has no .safetensors weights (only safetensors are loaded)")
    try:
        from transformers import Dinov2Model
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the CLI's stderr is one line on error, nothing on success
        try:
            return Dinov2Model.from_pretrained(str(path), use_safetensors=True, local_files_only=True).eval()
        finally:
            hf_logging.enable_progress_bar()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelFileError(f"cannot load Dinov2 from {path}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def convert_dinov2(hf, image_size: int | None = None, mean: list[float] | None = None,
                   std: list[float] | None = None,
                   head: tuple[Float[torch.Tensor, "class features"], Float[torch.Tensor, " class"]] | None = None,
                   class_names: list[str] | None = None, head_pool: str = "cls") -> HookedViT:
    """A HookedViT with the weights of a transformers Dinov2Model (or the backbone of a
    Dinov2ForImageClassification, whose classifier reads [CLS, mean of patches]: ``head_pool="cls+mean"``).

    Layer scale is folded into the weights that write into the residual stream (W_O, b_O scaled by
    lambda1; W_out, b_out by lambda2): the same sums, so every hook downstream of a block sees what
    transformers computes. Position embeddings are those transformers uses at ``image_size`` (its own
    ``interpolate_pos_encoding``: bicubic, align_corners False), fixed at conversion. ``head``: (weight
    (class, features), bias (class,)); None gives a model with no classes (a backbone to attach heads to)."""
    c = hf.config
    if getattr(c, "use_swiglu_ffn", False):
        raise ModelFileError("Dinov2 with a SwiGLU MLP (giant) is not supported")
    if getattr(c, "num_register_tokens", 0):
        raise ModelFileError("Dinov2 with register tokens is not supported (one class token expected)")
    act = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}.get(c.hidden_act)
    if act is None:
        raise ModelFileError(f"Dinov2 activation {c.hidden_act!r} is not supported (gelu, gelu_new)")
    size = int(image_size or c.image_size)
    p = int(c.patch_size)
    if size % p:
        raise ModelFileError(f"image size {size} is not a multiple of the patch size {p}")
    d = c.hidden_size
    weight, bias = head if head is not None else (torch.zeros(0, d), torch.zeros(0))
    cfg = ViTConfig(image_size=size, patch_size=p, in_channels=c.num_channels, d_model=d,
                    n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads,
                    d_mlp=int(d * c.mlp_ratio), n_classes=int(weight.shape[0]), ln_eps=c.layer_norm_eps, act=act,
                    qkv_bias=c.qkv_bias, class_names=list(class_names or []), pixel_mean=mean, pixel_std=std,
                    head_pool=head_pool)
    m = HookedViT(cfg)
    h, dh = cfg.n_heads, cfg.d_head
    sd = {k: v.detach().float() for k, v in hf.state_dict().items()}
    emb = hf.embeddings
    with torch.no_grad():
        pos = emb.interpolate_pos_encoding(torch.zeros(1, cfg.n_tokens, d), size, size)[0].float()
    new: dict[str, torch.Tensor] = {
        "W_patch": sd["embeddings.patch_embeddings.projection.weight"].reshape(d, -1),
        "b_patch": sd["embeddings.patch_embeddings.projection.bias"],
        "cls_token": sd["embeddings.cls_token"].reshape(d),
        "pos_embed": pos.reshape(-1, d),
        "ln_final.w": sd["layernorm.weight"], "ln_final.b": sd["layernorm.bias"],
        "W_head": weight.float().T.contiguous(), "b_head": bias.float(),
    }
    for l in range(cfg.n_layers):
        pre, b = f"encoder.layer.{l}.", f"blocks.{l}."
        ls1, ls2 = sd[pre + "layer_scale1.lambda1"], sd[pre + "layer_scale2.lambda1"]
        for ours, name in (("Q", "q_proj"), ("K", "k_proj"), ("V", "v_proj")):
            new[b + f"attn.W_{ours}"] = sd[pre + f"attention.{name}.weight"].reshape(h, dh, d).transpose(1, 2)
            new[b + f"attn.b_{ours}"] = sd[pre + f"attention.{name}.bias"].reshape(h, dh)
        new[b + "attn.W_O"] = (sd[pre + "attention.o_proj.weight"] * ls1[:, None]).T.reshape(h, dh, d)
        new[b + "attn.b_O"] = sd[pre + "attention.o_proj.bias"] * ls1
        new[b + "ln1.w"], new[b + "ln1.b"] = sd[pre + "norm1.weight"], sd[pre + "norm1.bias"]
        new[b + "ln2.w"], new[b + "ln2.b"] = sd[pre + "norm2.weight"], sd[pre + "norm2.bias"]
        new[b + "mlp.W_in"] = sd[pre + "mlp.fc1.weight"].T
        new[b + "mlp.b_in"] = sd[pre + "mlp.fc1.bias"]
        new[b + "mlp.W_out"] = (sd[pre + "mlp.fc2.weight"] * ls2[:, None]).T
        new[b + "mlp.b_out"] = sd[pre + "mlp.fc2.bias"] * ls2
    m.load_state_dict({k: v.contiguous() for k, v in new.items()}, strict=True)
    return m.eval()


def load_hf_dinov2(entry: Any, device: str = "cpu", image_size: int | None = None, **_: Any) -> HookedViT:
    """Zoo loader for a local Dinov2 directory: Dinov2ForImageClassification (its own classifier on [CLS,
    mean of patches]) or a bare Dinov2Model (no classes: attach a head, core.models.vit_heads)."""
    path = Path(entry.path if hasattr(entry, "path") else entry)
    if not any(path.glob("*.safetensors")):
        raise ModelFileError(f"{path} has no .safetensors weights (only safetensors are loaded)")
    mean, std = processor_stats(path)
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read {path / 'config.json'}: {exc}") from None
    if "Dinov2ForImageClassification" in (cfg.get("architectures") or []):
        try:
            from transformers import Dinov2ForImageClassification

            hf = Dinov2ForImageClassification.from_pretrained(str(path), use_safetensors=True,
                                                              local_files_only=True).eval()
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ModelFileError(f"cannot load Dinov2 from {path}: {_first_line(exc)}") from None
        c = hf.config
        labels = [str(c.id2label[i]) for i in range(c.num_labels)] if getattr(c, "id2label", None) else []
        head = (hf.classifier.weight.detach(), hf.classifier.bias.detach())
        return convert_dinov2(hf.dinov2, image_size, mean, std, head, labels, "cls+mean").to(device)
    return convert_dinov2(load_dinov2_backbone(path), image_size, mean, std).to(device)
