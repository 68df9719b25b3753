"""Activation patching, the ground truth: ablate each item alone and record the drop in the metric
(target logit, minus foil logit when there is a foil), one forward per item, batched.

Items: token (zeroed at the embedding), head (its output z zeroed at every position, or at one query
position with per_position=True), neuron (its activation zeroed at every position, or at one). Scores are
metric(clean) - metric(ablated). Whole-head and whole-neuron scores sit at the last query position of the
[layer, head, query] / [layer, position, neuron] axes (other positions 0), so sums over positions give
the component's effect. ``ablation="mean"`` replaces the item by a mean activation instead of 0.

The batched ablation forward (``ablated_logits``) is shared with the faithfulness protocol: rows of a
batch carry different masks, and a batch whose masks all start at layer l starts the forward at layer l
from the cached clean residual (earlier layers are unchanged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from jaxtyping import Bool, Float, Int

from attribution.baselines.common import check_target, last_logits, level_shape, metric
from attribution.methods import Scored
from core.errors import MethodError

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

ABLATION_LEVELS = ("token", "head", "neuron")


def item_shape(model: HookedModel, seq_len: int, level: str, per_position: bool = False) -> tuple[int, ...]:
    a = model.arch
    if level == "token":
        return (seq_len,)
    if level == "head":
        return (a.n_layers, a.n_heads, seq_len) if per_position else (a.n_layers, a.n_heads)
    if level == "neuron":
        if not a.d_mlp:
            raise MethodError(f"{model.name} has no MLP neurons")
        return (a.n_layers, seq_len, a.d_mlp) if per_position else (a.n_layers, a.d_mlp)
    raise MethodError(f"no ablation defined at level {level!r}; levels: {', '.join(ABLATION_LEVELS)}")


def _mix(x: torch.Tensor, m: torch.Tensor, fill: torch.Tensor | None) -> torch.Tensor:
    m = m.to(x.dtype)
    return x * (1 - m) if fill is None else x * (1 - m) + fill.to(x.dtype) * m


def ablation_hooks(model: HookedModel, level: str, mask: Bool[torch.Tensor, "row ..."],
                   fill: Float[torch.Tensor, "*fill"] | None = None) -> list:
    """Forward hooks for a batch of masks (True = ablate), one mask per row.

    mask: token [B, S]; head [B, L, H] or [B, L, H, S]; neuron [B, L, N] or [B, L, S, N].
    fill (mean ablation): token [D], head [L, H, d_head], neuron [L, N]; None zeroes.
    """
    if level == "token":
        return [("hook_embed", lambda x, hook: _mix(x, mask[:, :, None], fill))]
    hooks = []
    for layer in range(model.arch.n_layers):
        m = mask[:, layer]
        if not m.any():
            continue
        f = None if fill is None else fill[layer]
        if level == "head":  # z: [B, S, H, dh]
            m = m[:, None, :, None] if m.dim() == 2 else m.permute(0, 2, 1)[..., None]
            hooks.append((f"blocks.{layer}.attn.hook_z", lambda x, hook, m=m, f=f: _mix(x, m, f)))
        else:  # post: [B, S, N]
            m = m[:, None, :] if m.dim() == 2 else m
            hooks.append((f"blocks.{layer}.mlp.hook_post", lambda x, hook, m=m, f=f: _mix(x, m, f)))
    return hooks


def clean_residuals(model: HookedModel, tokens: Int[torch.Tensor, "1 pos"]) -> Float[torch.Tensor, "layer pos d_model"]:
    """The clean residual before every block, [L, S, D] (start points for truncated forwards)."""
    names = [f"blocks.{l}.hook_resid_pre" for l in range(model.arch.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=names, return_type=None)
    return torch.stack([cache[n][0] for n in names])


def ablated_logits(model: HookedModel, tokens: Int[torch.Tensor, "1 pos"], level: str,
                   masks: Bool[torch.Tensor, "row ..."], fill: Float[torch.Tensor, "*fill"] | None = None,
                   resid: Float[torch.Tensor, "layer pos d_model"] | None = None,
                   batch_size: int = 32) -> Float[torch.Tensor, "row vocab"]:
    """Last-position logits [R, V] for R ablation masks on one prompt (tokens [1, S])."""
    out = []
    with torch.no_grad():
        for start in range(0, masks.shape[0], batch_size):
            m = masks[start:start + batch_size]
            b = m.shape[0]
            first = 0
            if level != "token" and resid is not None:
                used = m.flatten(2).any(-1).any(0).nonzero()  # layers any row ablates
                first = int(used[0]) if len(used) else model.arch.n_layers - 1
            r = resid[first].expand(b, -1, -1) if first > 0 else None
            out.append(last_logits(model, tokens.expand(b, -1), ablation_hooks(model, level, m, fill),
                                   start_layer=first, resid=r))
    return torch.cat(out) if out else torch.empty(0, model.arch.d_vocab)


def mean_fill(model: HookedModel, token_batches: list[Int[torch.Tensor, "1 _pos"]],
              level: str) -> Float[torch.Tensor, "*fill"]:
    """Mean activation over every position of the given prompts: token [D], head [L, H, dh], neuron [L, N]."""
    n = model.arch.n_layers
    names = {"token": ["hook_embed"], "head": [f"blocks.{l}.attn.hook_z" for l in range(n)],
             "neuron": [f"blocks.{l}.mlp.hook_post" for l in range(n)]}[level]
    total, count = None, 0
    with torch.no_grad():
        for tokens in token_batches:
            _, cache = model.run_with_cache(tokens, names_filter=names, return_type=None)
            acts = torch.stack([cache[k][0].sum(0) for k in names])  # [L or 1, ...]
            total = acts if total is None else total + acts
            count += tokens.shape[-1]
    mean = total / count
    return mean[0] if level == "token" else mean


def patching_scores(model: HookedModel, enc: Encoding, level: str, ablation: str = "zero", per_position: bool = False,
                    batch_size: int = 32, fill: Float[torch.Tensor, "*fill"] | None = None,
                    truncate: bool = True, on_step: Callable[[int], None] | None = None,
                    items: tuple[int, int] | None = None) -> Scored:
    """metric(clean) - metric(item ablated) for every item, on the level's axes; on_step(n) after each n items.

    truncate=False runs every ablated forward from the embedding (the plain one-forward-per-item cost)
    instead of starting at the ablated layer from the cached clean residual; the scores are the same.

    items=(start, stop): only the items start..stop-1 (in the flattened item_shape order) are computed; the
    others score 0. Ranges that start at a multiple of batch_size run the very batches the whole call runs,
    so ranges computed in different processes and summed give exactly the whole call's scores (how the
    "attribute" job shards patching over Ray workers)."""
    check_target(enc)
    if ablation not in ("zero", "mean"):
        raise MethodError(f"unknown ablation {ablation!r}: zero or mean")
    shape = item_shape(model, enc.seq_len, level, per_position)
    n_items = int(torch.tensor(shape).prod())
    first, stop = _item_range(items, n_items)
    if ablation == "mean" and fill is None:
        fill = mean_fill(model, [enc.tokens], level)  # this prompt's own means
    resid = clean_residuals(model, enc.tokens) if level != "token" and truncate else None
    with torch.no_grad():
        clean = metric(last_logits(model, enc.tokens), enc)[0]
    effects = torch.zeros(n_items)
    for start in range(first, stop, batch_size):
        idx = torch.arange(start, min(stop, start + batch_size))
        masks = torch.zeros(len(idx), n_items, dtype=torch.bool)
        masks[torch.arange(len(idx)), idx] = True
        logits = ablated_logits(model, enc.tokens, level, masks.view(len(idx), *shape), fill, resid,
                                batch_size=batch_size)
        effects[idx] = clean - metric(logits, enc)
        if on_step:
            on_step(len(idx))
    if level == "token" or per_position:
        return Scored(effects.view(shape), target_logit=float(clean))
    out = torch.zeros(level_shape(model, enc, level))
    if level == "head":
        out[..., -1] = effects.view(shape)
    else:
        out[:, -1, :] = effects.view(shape)
    return Scored(out, target_logit=float(clean))


def _item_range(items: tuple[int, int] | None, n_items: int) -> tuple[int, int]:
    if items is None:
        return 0, n_items
    try:
        start, stop = (int(i) for i in items)
    except (TypeError, ValueError):
        raise MethodError(f"items must be (start, stop), got {items!r}") from None
    if not 0 <= start <= stop <= n_items:
        raise MethodError(f"items ({start}, {stop}) out of range: there are {n_items} items")
    return start, stop
