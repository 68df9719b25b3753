"""Plumbing shared by the baselines: the explained metric, activation gradients, score layouts and
last-position logits from (possibly truncated) forwards."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int

from core.errors import MethodError
from core.metric import logit_diff

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


def metric(logits_last: Float[torch.Tensor, "batch vocab"], enc: Encoding) -> Float[torch.Tensor, " batch"]:
    """Target logit (minus foil logit) per row of last-position logits [B, V] -> [B]."""
    return logit_diff(logits_last, enc.target_id, enc.foil_id)


def check_target(enc: Encoding) -> None:
    if enc.target_id is None:
        raise MethodError("this method explains a target token: give --target")


def last_logits(model: HookedModel, tokens: Int[torch.Tensor, "batch pos"], fwd_hooks=(), start_layer: int = 0,
                resid: Float[torch.Tensor, "batch pos d_model"] | None = None,
                position: int | None = None) -> Float[torch.Tensor, "batch vocab"]:
    """Last-position logits [B, V] (or those at ``position``); with ``resid`` the forward starts at block
    ``start_layer``."""
    n_layers = model.arch.n_layers
    with model.hooks(fwd_hooks=fwd_hooks):
        if resid is not None and start_layer > 0:
            out = model(resid, start_at_layer=start_layer, stop_at_layer=n_layers)
        else:
            out = model(tokens, stop_at_layer=n_layers)
    return model.final_logits(out if position is None else out[:, :position + 1])


def level_shape(model: HookedModel, enc: Encoding, level: str) -> tuple[int, ...]:
    a, s = model.arch, enc.seq_len
    if level == "token":
        return (s,)
    if level == "head":
        return (a.n_layers, a.n_heads, s)
    if level == "qk":
        return (a.n_layers, a.n_heads, s, s)
    if level == "neuron":
        if not a.d_mlp:
            raise MethodError(f"{model.name} has no MLP neurons")
        return (a.n_layers, s, a.d_mlp)
    raise MethodError(f"unknown level {level!r}")


def prompt_seed(enc: Encoding, salt: int = 0) -> int:
    """A seed that differs between prompts but is reproducible for one prompt."""
    ids = ",".join(str(i) for i in enc.tokens[0].tolist()) + f"|{enc.target_id}|{enc.foil_id}|{salt}"
    return int(hashlib.sha1(ids.encode()).hexdigest()[:8], 16)


def hook_names(model: HookedModel, level: str) -> list[str]:
    """The activations a level's gradient methods read, one per layer (token: the embedding)."""
    n = model.arch.n_layers
    if level == "token":
        return ["hook_embed"]
    if level == "head":
        return [f"blocks.{l}.attn.hook_z" for l in range(n)]
    if level == "qk":
        return [f"blocks.{l}.attn.hook_pattern" for l in range(n)]
    if level == "neuron":
        return [f"blocks.{l}.mlp.hook_post" for l in range(n)]
    raise MethodError(f"unknown level {level!r}")


def grads(model: HookedModel, enc: Encoding, names: list[str], tokens: Int[torch.Tensor, "batch pos"] | None = None,
          embed_path: Callable[[Float[torch.Tensor, "batch pos d_model"]],
                               Float[torch.Tensor, "batch pos d_model"]] | None = None,
          ) -> tuple[dict[str, Float[torch.Tensor, "batch ..."]], dict[str, Float[torch.Tensor, "batch ..."]],
                     Float[torch.Tensor, " batch"]]:
    """Activations, d metric / d activation at hook points and the metric [B], from one forward + one
    backward.

    The embedding output is made a leaf that requires grad, so every later activation is in the graph;
    intermediate activations keep their grads with retain_grad (no detaching: that would cut the paths
    from one layer to the next). ``embed_path`` maps the embedding [B, S, D] to the points where the
    gradient is taken (integrated gradients: one point of the path per row).
    """
    tokens = enc.tokens if tokens is None else tokens
    acts: dict[str, torch.Tensor] = {}

    def embed_hook(x, hook):
        base = x.detach()
        if embed_path is not None:
            base = embed_path(base).detach()
        leaf = base.requires_grad_(True)
        acts["hook_embed"] = leaf
        return leaf

    def keep(x, hook):
        x.retain_grad()
        acts[hook.name] = x
        return x

    traced = getattr(model, "traced_grads", None)
    if traced is not None:  # nnsight: forward, metric and backward in one trace (on NDIF, all of it runs there)
        acts, gs, values = traced(tokens, [("hook_embed", embed_hook)], names, lambda lg: metric(lg, enc),
                                  enc.position)
        return acts, gs, values
    hooks = [("hook_embed", embed_hook)] + [(n, keep) for n in names if n != "hook_embed"]
    with torch.enable_grad():
        logits = last_logits(model, tokens, hooks, position=enc.position)
        values = metric(logits, enc)
        values.sum().backward()
    out_acts = {n: acts[n].detach() for n in names}
    out_grads = {n: (acts[n].grad if acts[n].grad is not None else torch.zeros_like(acts[n])).detach()
                 for n in names}
    return out_acts, out_grads, values.detach()


def layout(level: str, per_layer: list[Float[torch.Tensor, "1 ..."]]) -> Float[torch.Tensor, "*axes"]:
    """Stack per-layer tensors from hooks (batch 1) into the level's axes.

    head: hook_z-like [1, S, H] -> [L, H, S]; qk: [1, H, S, S] -> [L, H, S, S];
    neuron: [1, S, N] -> [L, S, N]; token: [1, S] -> [S].
    """
    if level == "token":
        return per_layer[0][0]
    if level == "head":
        return torch.stack([t[0].transpose(0, 1) for t in per_layer])
    return torch.stack([t[0] for t in per_layer])
