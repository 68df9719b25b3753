"""Shared plumbing: capture activations in one forward pass and their gradients in one backward.

Gradients are returned in a dict keyed by the hook name of the very tensor they were taken
with respect to, so a layer's attention can only ever meet its own gradient. (Collecting
gradients with backward hooks and zipping them with forward-order activations is how one
public implementation paired layer l with layer L-1-l: backward hooks fire in reverse.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float

from attribution.vit.maps import Images, Logits, Targets


def pattern_name(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_pattern"


def resid_pre_name(layer: int) -> str:
    return f"blocks.{layer}.hook_resid_pre"


def capture(model, images: Images, names: list[str], grad: bool, targets: Targets | None = None,
            extra_hooks: list[tuple[str, Callable]] | None = None
            ) -> tuple[Logits, dict[str, Float[torch.Tensor, "image ..."]],
                       dict[str, Float[torch.Tensor, "image ..."]]]:
    """One forward (plus one backward of the summed target logits when grad=True).

    Returns logits (image, class), the activations named (as they flowed downstream, i.e. after
    any earlier hook on the same point), and their gradients (same keys).
    """
    acts: dict[str, torch.Tensor] = {}

    def keep(t: Float[torch.Tensor, "image ..."], hook) -> None:  # any hook point: its own axes after image
        acts[hook.name] = t

    hooks = list(extra_hooks or []) + [(n, keep) for n in names]
    with torch.set_grad_enabled(grad):
        x = images.detach().clone().requires_grad_(grad)  # a graph even if parameters are frozen
        logits = model.run_with_hooks(x, fwd_hooks=hooks)
        grads: dict[str, torch.Tensor] = {}
        if grad:
            score = logits.gather(1, targets.view(-1, 1)).sum()  # images are independent: one backward
            got = torch.autograd.grad(score, [acts[n] for n in names], allow_unused=True)
            grads = {n: (g if g is not None else torch.zeros_like(acts[n]))
                     for n, g in zip(names, got, strict=True)}
    return logits.detach(), {k: v.detach() for k, v in acts.items()}, grads


def rownorm(a: Float[torch.Tensor, "*batch key"]) -> Float[torch.Tensor, "*batch key"]:
    """Each row (last axis) divided by its sum."""
    return a / a.sum(-1, keepdim=True).clamp_min(1e-12)


def eye_like(a: Float[torch.Tensor, "*batch token token"]) -> Float[torch.Tensor, "*batch token token"]:
    """An identity of a's last two sizes, broadcast over its batch axis."""
    return torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand_as(a)


def read_rows(model, m: Float[torch.Tensor, "image *head query key"]) -> Float[torch.Tensor, "image *head key"]:
    """(image, [head,] query, key) -> (image, [head,] key): the row of the token the decision reads.

    The class token's row for a classifier on CLS; a model whose readout reads other tokens (the DINOv2
    saliency decoder reads the patch tokens under its region) gives ``readout_rows`` (token,) weights
    summing to 1, and the rows are averaged with them."""
    w = getattr(model, "readout_rows", None)
    if w is None:
        return m[..., 0, :]
    return torch.einsum("q,...qk->...k", w.to(m.device, m.dtype), m)
