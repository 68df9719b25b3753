"""Every ViT map method behind one call::

    from attribution.vit.methods import explain
    pm = explain(model, images, "dap", target_class=None, identity=1.0)   # -> PatchMap

Each method is the image-patch level ("patch") of its entry in the one method table (attribution.methods.TABLE,
where DPA's patch level sits beside its token, head and edge levels); it lives in its own module here with
``run(model, images, targets, **params)`` returning (image, patch) scores and a ``DEFAULTS`` dict naming its
parameters.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import torch

from attribution.methods import PATCH, view
from attribution.vit.maps import Images, PatchMap, Targets
from core.errors import MethodError, check_range

# command-line name -> module: the image-patch level of the one method table (attribution.methods.TABLE)
METHODS = {name: spec.impls[PATCH].split(":")[0].rsplit(".", 1)[1] for name, spec in view(PATCH).items()}


def method_module(name: str):
    if name not in METHODS:
        raise MethodError(f"unknown ViT method {name!r}; known: {', '.join(METHODS)}")
    return importlib.import_module(view(PATCH)[name].impls[PATCH].split(":")[0])


def parse_methods(spec: str | list[str]) -> list[str]:
    """'dap,rollout' or ['dap', 'rollout'] (or 'all') -> validated names."""
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if names == ["all"]:
        return list(METHODS)
    if not names:
        raise MethodError("no method given; known: " + ", ".join(METHODS))
    for n in names:
        method_module(n)
    return names


def resolve_targets(model, images: Images, target_class: Any) -> Targets:
    """None -> the predicted class of each image; an int or a per-image sequence otherwise."""
    n = images.shape[0]
    if target_class is None:
        with torch.no_grad():
            return model(images).argmax(-1)
    t = torch.as_tensor(target_class, dtype=torch.long).flatten().to(images.device)
    if t.numel() == 1:
        t = t.expand(n)
    if t.numel() != n:
        raise MethodError(f"{t.numel()} target classes for {n} images")
    for v in t.unique().tolist():
        check_range("target class", v, model.cfg.n_classes)
    return t.clone()


def explain(model, images: Images, method: str, target_class: Any = None, **params: Any) -> PatchMap:
    """Run one method; returns a PatchMap (image, row, col) for the target classes."""
    mod = method_module(method)
    unknown = set(params) - set(mod.DEFAULTS)
    if unknown:
        raise MethodError(f"method {method!r} has no parameter(s) {', '.join(sorted(unknown))}; "
                          f"it takes: {', '.join(mod.DEFAULTS) or 'none'}")
    images = model.check_images(images)
    targets = resolve_targets(model, images, target_class)
    args = {**mod.DEFAULTS, **params}
    start = time.perf_counter()
    run = getattr(mod, view(PATCH)[method].impls[PATCH].split(":")[1])  # the table's function (each module's run)
    scores = run(model, images, targets, **args).detach()
    seconds = time.perf_counter() - start
    g = model.cfg.grid
    return PatchMap(scores.reshape(-1, g, g).float().cpu(), method, targets.cpu(), args, seconds,
                    model.cfg.patch_size)


def explain_all(model, images: Images, methods: list[str] | None = None, target_class: Any = None
                ) -> dict[str, PatchMap]:
    """Every method (or those named) on the same images and targets."""
    names = parse_methods(methods or list(METHODS))
    images = model.check_images(images)
    targets = resolve_targets(model, images, target_class)
    return {n: explain(model, images, n, targets) for n in names}
