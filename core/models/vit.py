"""A hooked vision transformer (patch embedding, CLS token, pre-LayerNorm blocks, GELU MLP).

Built on TransformerLens' HookPoint/HookedRootModule, so ``run_with_cache``, ``run_with_hooks``
and ``hooks()`` work as for the LLMs, with the same hook names::

    hook_embed, hook_pos_embed                       (batch, token, d_model); token 0 is CLS
    blocks.{l}.hook_resid_pre / hook_resid_mid / hook_resid_post
    blocks.{l}.ln1.hook_scale, ln1.hook_normalized   (and ln2, ln_final)
    blocks.{l}.attn.hook_q / hook_k / hook_v / hook_z    (batch, token, head, d_head)
    blocks.{l}.attn.hook_attn_scores / hook_pattern      (batch, head, query, key)
    blocks.{l}.attn.hook_result                      (batch, token, head, d_model): each head's write
    blocks.{l}.hook_attn_out, blocks.{l}.mlp.hook_pre / hook_post, blocks.{l}.hook_mlp_out

Weights use TransformerLens layouts (W_Q: head, d_model, d_head; W_O: head, d_head, d_model),
so engines written for the LLM side read them the same way. Local HF ViTs are converted into
this class by ``core.models.vit_hf``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Shaped
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from core.errors import ModelFileError, WorkbenchError


class ImageError(WorkbenchError):
    """An image of the wrong size, channel count or type for the model."""


@dataclass
class ViTConfig:
    image_size: int = 32
    patch_size: int = 4
    in_channels: int = 3
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4
    d_mlp: int = 128
    n_classes: int = 4
    ln_eps: float = 1e-5
    act: str = "gelu"  # "gelu" (exact, erf) or "gelu_new" (tanh approximation)
    qkv_bias: bool = True
    class_names: list[str] = field(default_factory=list)
    pixel_mean: list[float] | None = None  # applied inside forward: images are given in [0, 1]
    pixel_std: list[float] | None = None
    # What the classifier reads after the final LayerNorm: "cls" (ViT, DeiT's class head, the DINOv2 linear
    # heads trained here), "cls+mean" ([CLS, mean of patches]: Dinov2ForImageClassification), "mean" (patches)
    head_pool: str = "cls"
    n_prefix: int = 1  # tokens before the patches: CLS (1), or CLS + DeiT's distillation token (2)
    ln_pre: bool = False  # a LayerNorm on the embeddings before block 0 (CLIP's pre_layrnorm)

    @property
    def head_features(self) -> int:
        return self.d_model * (2 if self.head_pool == "cls+mean" else 1)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    @property
    def n_patches(self) -> int:
        return self.grid ** 2

    @property
    def n_tokens(self) -> int:
        return self.n_patches + self.n_prefix

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ViTConfig:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def gelu(x: Float[torch.Tensor, "*batch d_mlp"], kind: str) -> Float[torch.Tensor, "*batch d_mlp"]:
    """The MLP activation: "gelu" (exact), "gelu_new" (tanh approximation) or "quick_gelu" (CLIP)."""
    if kind == "quick_gelu":
        return x * torch.sigmoid(1.702 * x)
    return F.gelu(x, approximate="tanh" if kind == "gelu_new" else "none")


class LayerNorm(nn.Module):
    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.hook_scale = HookPoint()  # (batch, token, 1): the std that DPA freezes
        self.hook_normalized = HookPoint()

    def forward(self, x: Float[torch.Tensor, "*batch d_model"]) -> Float[torch.Tensor, "*batch d_model"]:
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale) * self.w + self.b


class Attention(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        h, d, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        self.cfg = cfg
        self.W_Q = nn.Parameter(torch.empty(h, d, dh))
        self.W_K = nn.Parameter(torch.empty(h, d, dh))
        self.W_V = nn.Parameter(torch.empty(h, d, dh))
        self.W_O = nn.Parameter(torch.empty(h, dh, d))
        self.b_Q = nn.Parameter(torch.zeros(h, dh))
        self.b_K = nn.Parameter(torch.zeros(h, dh))
        self.b_V = nn.Parameter(torch.zeros(h, dh))
        self.b_O = nn.Parameter(torch.zeros(d))
        for w in (self.W_Q, self.W_K, self.W_V, self.W_O):
            nn.init.normal_(w, std=1 / math.sqrt(d))
        for name in ("q", "k", "v", "attn_scores", "pattern", "z", "result"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, x: Float[torch.Tensor, "image token d_model"]) -> Float[torch.Tensor, "image token d_model"]:
        # One matmul for q, k and v (einsum over 4-d tensors is several times slower on CPU).
        h, dh = self.cfg.n_heads, self.cfg.d_head
        w = torch.cat([self.W_Q, self.W_K, self.W_V], 0).permute(1, 0, 2).reshape(x.shape[-1], 3 * h * dh)
        b = torch.cat([self.b_Q, self.b_K, self.b_V], 0).reshape(-1)
        qkv = (x @ w + b).view(*x.shape[:2], 3, h, dh)
        q = self.hook_q(qkv[:, :, 0])
        k = self.hook_k(qkv[:, :, 1])
        v = self.hook_v(qkv[:, :, 2])
        scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) / math.sqrt(dh)
        pattern = self.hook_pattern(self.hook_attn_scores(scores).softmax(-1))
        z = self.hook_z((pattern @ v.transpose(1, 2)).transpose(1, 2))  # (batch, token, head, d_head)
        if self.hook_result.has_hooks():
            result = self.hook_result(torch.einsum("bqhe,hed->bqhd", z, self.W_O))
            return result.sum(2) + self.b_O
        return z.flatten(2) @ self.W_O.reshape(h * dh, -1) + self.b_O


class MLP(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.act = cfg.act
        self.W_in = nn.Parameter(torch.randn(cfg.d_model, cfg.d_mlp) / math.sqrt(cfg.d_model))
        self.b_in = nn.Parameter(torch.zeros(cfg.d_mlp))
        self.W_out = nn.Parameter(torch.randn(cfg.d_mlp, cfg.d_model) / math.sqrt(cfg.d_mlp))
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model))
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: Float[torch.Tensor, "image token d_model"]) -> Float[torch.Tensor, "image token d_model"]:
        pre = self.hook_pre(x @ self.W_in + self.b_in)
        return self.hook_post(gelu(pre, self.act)) @ self.W_out + self.b_out


class Block(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.ln1 = LayerNorm(cfg.d_model, cfg.ln_eps)
        self.attn = Attention(cfg)
        self.ln2 = LayerNorm(cfg.d_model, cfg.ln_eps)
        self.mlp = MLP(cfg)
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, x: Float[torch.Tensor, "image token d_model"]) -> Float[torch.Tensor, "image token d_model"]:
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln1(x))))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))


class HookedViT(HookedRootModule):
    """Classifier over images (batch, channel, height, width) in [0, 1]; returns logits (batch, class)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, c, p = cfg.d_model, cfg.in_channels, cfg.patch_size
        self.W_patch = nn.Parameter(torch.randn(d, c * p * p) / math.sqrt(c * p * p))
        self.b_patch = nn.Parameter(torch.zeros(d))
        self.cls_token = nn.Parameter(torch.randn(d) * 0.02)
        if cfg.n_prefix == 2:
            self.dist_token = nn.Parameter(torch.randn(d) * 0.02)
        elif cfg.n_prefix != 1:
            raise ModelFileError(f"n_prefix {cfg.n_prefix}: one class token (1) or class + distillation (2)")
        if cfg.ln_pre:
            self.ln_pre = LayerNorm(d, cfg.ln_eps)
        self.pos_embed = nn.Parameter(torch.randn(cfg.n_tokens, d) * 0.02)
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_final = LayerNorm(d, cfg.ln_eps)
        if cfg.head_pool not in ("cls", "cls+mean", "mean"):
            raise ModelFileError(f"unknown head_pool {cfg.head_pool!r}: use cls, cls+mean or mean")
        self.W_head = nn.Parameter(torch.randn(cfg.head_features, cfg.n_classes) / math.sqrt(d))
        self.b_head = nn.Parameter(torch.zeros(cfg.n_classes))
        mean = torch.tensor(cfg.pixel_mean or [0.0] * c).view(1, c, 1, 1)
        std = torch.tensor(cfg.pixel_std or [1.0] * c).view(1, c, 1, 1)
        self.register_buffer("pixel_mean", mean, persistent=False)
        self.register_buffer("pixel_std", std, persistent=False)
        self.setup()

    @property
    def device(self) -> torch.device:
        return self.W_patch.device

    def check_images(self, images: Any) -> Float[torch.Tensor, "image channel height width"]:
        """A float batch (image, channel, height, width) on the model's device, or ImageError."""
        cfg = self.cfg
        if not isinstance(images, torch.Tensor):
            raise ImageError(f"images must be a tensor, got {type(images).__name__}")
        if images.ndim == 3:
            images = images[None]
        want = (cfg.in_channels, cfg.image_size, cfg.image_size)
        if images.ndim != 4 or tuple(images.shape[1:]) != want:
            raise ImageError(f"image of shape {tuple(images.shape)}: this model expects "
                             f"(batch, {want[0]}, {want[1]}, {want[2]}), i.e. {want[0]} channels of "
                             f"{want[1]}x{want[2]} pixels")
        if images.shape[0] == 0:
            raise ImageError("empty image batch")
        if images.is_floating_point() and not bool(torch.isfinite(images).all()):
            raise ImageError("images hold NaN or Infinity: pixel values must be finite")
        return images.to(self.device, torch.float32)

    def patchify(self, images: Float[torch.Tensor, "image channel height width"]
                 ) -> Float[torch.Tensor, "image patch pixel"]:
        """(batch, C, H, W) -> (batch, patch, C*p*p), patches row-major like a stride-p conv."""
        b, c, _, _ = images.shape
        g, p = self.cfg.grid, self.cfg.patch_size
        x = images.reshape(b, c, g, p, g, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, g * g, c * p * p)

    def embed(self, images: Float[torch.Tensor, "image channel height width"]
              ) -> Float[torch.Tensor, "image token d_model"]:
        x = (images - self.pixel_mean) / self.pixel_std
        patches = self.patchify(x) @ self.W_patch.T + self.b_patch
        prefix = [self.cls_token.expand(x.shape[0], 1, -1)]
        if self.cfg.n_prefix == 2:
            prefix.append(self.dist_token.expand(x.shape[0], 1, -1))
        tokens = self.hook_embed(torch.cat([*prefix, patches], 1))
        out = tokens + self.hook_pos_embed(self.pos_embed.expand(x.shape[0], -1, -1))
        return self.ln_pre(out) if self.cfg.ln_pre else out

    def forward(self, images: Shaped[torch.Tensor, "*image channel height width"]  # any dtype: check_images
                ) -> Float[torch.Tensor, "image class"]:
        x = self.embed(self.check_images(images))
        for block in self.blocks:
            x = block(x)
        return self.readout(x)

    def readout(self, x: Float[torch.Tensor, "image token d_model"]) -> Float[torch.Tensor, "image class"]:
        """Logits (batch, class) from the last residual stream (batch, token, d_model)."""
        pool = self.cfg.head_pool
        if pool == "cls":
            return self.ln_final(x[:, 0]) @ self.W_head + self.b_head
        normed = self.ln_final(x)
        patches = normed[:, self.cfg.n_prefix:].mean(1)
        feats = patches if pool == "mean" else torch.cat([normed[:, 0], patches], -1)
        return feats @ self.W_head + self.b_head

    def architecture(self) -> dict[str, Any]:
        cfg = self.cfg
        return {"kind": "vit", "layers": cfg.n_layers, "heads": cfg.n_heads, "d_model": cfg.d_model,
                "d_head": cfg.d_head, "d_mlp": cfg.d_mlp, "norm": "layernorm", "mlp": cfg.act,
                "positional": "learned", "grid": cfg.grid, "patch_size": cfg.patch_size,
                "image_size": cfg.image_size, "classes": cfg.n_classes}


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_checkpoint(model: HookedViT, directory: str | Path, workbench: dict[str, Any],
                    metrics: dict[str, Any] | None = None) -> Path:
    """config.json (model config + workbench section), model.safetensors, metrics.json."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    cfg = asdict(model.cfg)
    (out / "config.json").write_text(json.dumps({"model_type": "workbench-vit", "model": cfg,
                                                 "workbench": workbench}, indent=2) + "\n")
    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
              str(out / "model.safetensors"))
    if metrics is not None:
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return out


def load_checkpoint(entry: Any, device: str = "cpu", **_: Any) -> HookedViT:
    """Zoo loader: ``entry.path`` holds config.json and model.safetensors (safetensors only)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(entry.path if hasattr(entry, "path") else entry)
    try:
        cfg = ViTConfig.from_dict(json.loads((path / "config.json").read_text())["model"])
        state = load_file(str(path / "model.safetensors"))
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
        raise ModelFileError(f"cannot load ViT checkpoint {path}: {exc}") from None
    model = HookedViT(cfg)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelFileError(f"ViT checkpoint {path} does not match its config: {str(exc)[:200]}") from None
    return model.to(device).eval()
