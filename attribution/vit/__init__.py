"""Vision transformers: the hooked ViT, DAP and its baselines, the localization benchmark.

The names below are the small API the app and notebooks call; they import lazily so that
``import attribution.vit`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attribution.methods import PATCH, view

if TYPE_CHECKING:
    from attribution.vit.maps import Images

__all__ = ["sample_images", "explain", "explain_all", "image_metrics", "evaluate", "METHODS"]

METHODS: tuple[str, ...] = tuple(view(PATCH))  # the method table's image-patch level (attribution.methods)


def sample_images(dataset: str = "synthetic", n: int = 8, seed: int = 2):
    """ImageBatch (images, labels, masks) from "synthetic" or "digits"."""
    from attribution.vit.data import sample_images as _sample

    return _sample(dataset, n, seed)


def explain(model, images: Images, method: str, target_class: Any = None, **params: Any):
    """One method -> PatchMap (image, row, col)."""
    from attribution.vit.methods import explain as _explain

    return _explain(model, images, method, target_class, **params)


def explain_all(model, images: Images, methods: list[str] | None = None, target_class: Any = None):
    """Every method (or those named) -> {method: PatchMap}."""
    from attribution.vit.methods import explain_all as _all

    return _all(model, images, methods, target_class)


def image_metrics(model, batch, maps):
    """Per-image metrics for maps already computed (pandas DataFrame)."""
    from attribution.vit.evaluate import image_metrics as _im

    return _im(model, batch, maps)


def evaluate(model, batch, methods, **kwargs: Any):
    """The full benchmark -> ViTEvalResult."""
    from attribution.vit.evaluate import evaluate as _ev

    return _ev(model, batch, methods, **kwargs)
