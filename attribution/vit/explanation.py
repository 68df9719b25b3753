"""One image, one method, one decision: what ``workbench vit-explain`` and ``wb.vit_explain`` return.

    from attribution.vit.explanation import explain_image
    ex = explain_image("dinov2-small", "photo.jpg", "dap", head="saliency", region=(150, 20, 350, 220))
    ex.predicted, ex.saliency_in_region, ex.map.scores, ex.plot(), ex.to_json()

A model with a classifier (vit-synth, a local HF ViT) takes the image at its own input size (a wrong size
is refused). dinov2-small takes any RGB photograph, resized to its 224 px input (aspect ratio not kept, so a
region maps by scaling), and explains a linear head's class or the saliency decoder's mean inside ``region``
(a box x0, y0, x1, y1 on the original image, x1 and y1 exclusive; None: the whole image).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float

from attribution.vit.maps import PatchMap, overlay_figure
from attribution.vit.methods import explain, method_module
from core.models import dinov2 as DV
from core.models import zoo


@dataclass
class ImageExplanation:
    model: str
    method: str
    predicted: str
    target: str
    probs: dict[str, float]
    map: PatchMap  # (1, row, col)
    image: Float[torch.Tensor, "1 channel height width"]  # as the model saw it
    head: str | None = None
    region: tuple[int, int, int, int] | None = None  # on the model's input
    saliency_in_region: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"model": self.model, "method": self.method, "predicted": self.predicted, "target": self.target,
               "probs": self.probs, "map": self.map.scores[0].tolist(), "seconds": self.map.seconds, **self.extra}
        if self.head is not None:
            out["head"] = self.head
        if self.region is not None:
            out["region_at_input"] = list(self.region)
        if self.saliency_in_region is not None:
            out["saliency_in_region"] = self.saliency_in_region
        return out

    def plot(self):
        masks = None
        if self.region is not None:
            from core.models.vit_heads import region_mask  # lazy here and below: TransformerLens (8 s)

            s = self.image.shape[-1]
            masks = region_mask(self.region, s, s)[None] > 0.5
        return overlay_figure(self.image.cpu(), {self.method: self.map}, [0], masks=masks, panel_px=240,
                              colorbar=True)


def _as_image(image: Any, label: str) -> torch.Tensor:
    """A path, a PIL image or a tensor (C, H, W) / (1, C, H, W) -> (C, H, W) float in [0, 1]."""
    from attribution.vit.images import check_pixels, read_image
    from core.models.vit import ImageError

    if isinstance(image, (str, Path)):
        return read_image(image)
    if isinstance(image, torch.Tensor):
        x = image[0] if image.ndim == 4 and image.shape[0] == 1 else image
        if x.ndim != 3:
            raise ImageError(f"{label} of shape {tuple(image.shape)}: give one (channel, height, width) image")
        check_pixels(x.detach().float().cpu().numpy(), label)
        return x.detach().float().cpu()
    if hasattr(image, "getbands") and hasattr(image, "size"):  # a PIL image
        import numpy as np

        arr = np.asarray(image).astype("float32") / 255.0
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(arr))
    raise ImageError(f"{label} must be a path, a PIL image or a tensor, got {type(image).__name__}")


def explain_image(model: Any, image: Any, method: str = "dap", head: str | None = None, region: Any = None,
                  target: int | None = None, label: str = "image") -> ImageExplanation:
    """``model``: a zoo name / local path, or a loaded HookedViT. See the module docstring."""
    method_module(method)  # an unknown method is refused before anything is loaded
    name = model if isinstance(model, str) else getattr(model, "backbone_name", type(model).__name__)
    is_dino = _is_dino(model)
    if head is None and is_dino:
        head = "saliency" if region is not None else None
    if (head is not None or region is not None) and not is_dino:
        from core.models.vit_heads import HeadError

        raise HeadError(f"heads and regions are for dinov2-small (a backbone without a classifier), not {name!r}")
    raw = _as_image(image, label)
    extra: dict[str, Any] = {}
    box = None
    if is_dino:
        from attribution.vit.images import fit_image, scale_region

        size = model.cfg.image_size if not isinstance(model, str) else 224
        x = fit_image(raw, size, DV.PATCH_SIZE, label)
        if region is not None:
            if isinstance(region, str):
                from attribution.vit.images import parse_region

                region = parse_region(region)
            box = scale_region(tuple(int(v) for v in region), int(raw.shape[1]), int(raw.shape[2]), size)
        base = DV.load_dinov2(None, head=None, image_size=size) if isinstance(model, str) else model
        vit = DV.with_head(base, head or getattr(model, "head_name", None) or DV.DEFAULT_HEAD, box)
        head = vit.head_name
        extra = {"input_size": size, "original_size": [int(raw.shape[2]), int(raw.shape[1])]}
    else:
        if isinstance(model, str):
            vit = zoo.load(model)
        else:
            vit = model
        size = getattr(getattr(vit, "cfg", None), "image_size", None)
        if isinstance(size, int) and raw.ndim == 3 and tuple(raw.shape[1:]) != (size, size):
            from core.models.vit import ImageError

            # a photograph on the 32x32 synthetic default: say which model fits instead of a shape error
            raise ImageError(f"{label} is {int(raw.shape[2])}x{int(raw.shape[1])} pixels but {name} takes "
                             f"{size}x{size} images only; for a photograph use the model dinov2-small "
                             "(`--model dinov2-small`: any RGB image, resized to 224 px)")
        x = vit.check_images(raw)
    if head == "saliency" and target is None:
        target = 0  # the decision is "salient" (the mean in the region), whatever side of 0.5 it falls
    with torch.no_grad():
        probs = vit(x).softmax(-1)[0]
    pm = explain(vit, x, method, target)
    names = vit.cfg.class_names or [str(i) for i in range(vit.cfg.n_classes)]
    return ImageExplanation(str(name), method, names[int(probs.argmax())], names[int(pm.targets[0])],
                            {names[i]: float(p) for i, p in enumerate(probs)}, pm, x.cpu(), head, box,
                            float(probs[0]) if head == "saliency" else None, extra)


def _is_dino(model: Any) -> bool:
    if isinstance(model, str):
        return zoo.resolve(model).loader == "core.models.dinov2:load_dinov2"
    return getattr(model, "backbone_name", None) == "dinov2-small"
