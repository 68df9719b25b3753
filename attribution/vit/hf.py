"""Local Hugging Face ``ViTForImageClassification`` directories as HookedViT.

The zoo routes any directory whose config.json says ``model_type: "vit"`` here. Weights are
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

from attribution.vit.model import HookedViT, ViTConfig
from workbench.errors import ModelFileError


def _processor_stats(path: Path) -> tuple[list[float] | None, list[float] | None]:
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
    """A HookedViT with the weights of an HF ViTForImageClassification."""
    c = hf.config
    act = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}.get(c.hidden_act)
    if act is None:
        raise ModelFileError(f"HF ViT activation {c.hidden_act!r} is not supported (gelu, gelu_new)")
    labels = [c.id2label[i] for i in range(c.num_labels)] if getattr(c, "id2label", None) else []
    cfg = ViTConfig(image_size=c.image_size, patch_size=c.patch_size, in_channels=c.num_channels,
                    d_model=c.hidden_size, n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads,
                    d_mlp=c.intermediate_size, n_classes=c.num_labels, ln_eps=c.layer_norm_eps, act=act,
                    qkv_bias=c.qkv_bias, class_names=[str(x) for x in labels], pixel_mean=mean, pixel_std=std)
    m = HookedViT(cfg)
    h, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    sd = {k: v.detach().float() for k, v in hf.state_dict().items()}
    emb = "vit.embeddings."
    new: dict[str, torch.Tensor] = {
        "W_patch": sd[emb + "patch_embeddings.projection.weight"].reshape(d, -1),
        "b_patch": sd[emb + "patch_embeddings.projection.bias"],
        "cls_token": sd[emb + "cls_token"].reshape(d),
        "pos_embed": sd[emb + "position_embeddings"].reshape(-1, d),
        "ln_final.w": sd["vit.layernorm.weight"], "ln_final.b": sd["vit.layernorm.bias"],
        "W_head": sd["classifier.weight"].T, "b_head": sd["classifier.bias"],
    }
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."

        def get(*keys: str, l: int = l) -> torch.Tensor | None:
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
    """Zoo loader for a local HF ViTForImageClassification directory (safetensors weights)."""
    path = Path(entry.path if hasattr(entry, "path") else entry)
    if not any(path.glob("*.safetensors")):
        raise ModelFileError(f"{path} has no .safetensors weights (only safetensors are loaded)")
    try:
        from transformers import ViTForImageClassification

        hf = ViTForImageClassification.from_pretrained(str(path), use_safetensors=True, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelFileError(f"cannot load HF ViT from {path}: {str(exc).splitlines()[0][:200]}") from None
    mean, std = _processor_stats(path)
    return convert(hf, mean, std).to(device)
