"""The rotated queries and keys (``attn.hook_rot_q`` / ``attn.hook_rot_k``) on a TransformerBridge whose attention
never fires them: TransformerLens 3.9 fires them from its unfused rotary attention (Llama, Qwen, Gemma) but not
from its fused-qkv one (Phi-3's qkv_proj, GPT-NeoX's query_key_value), which still lists them among its hooks.
DPA caches them; here they are made from ``hook_q`` / ``hook_k`` and the layer's own rotary tables, as HF's
apply_rotary_pos_emb makes them (checked equal, 0.0 apart, on a bridged Llama whose attention fires them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float

from core.errors import BackendError

_PARTS = ("q", "k")


def rot_fires(tl: Any) -> bool:
    """Whether the bridge's attention fires hook_rot_q (one forward of one token, hooked at layer 0)."""
    fired: list[bool] = []

    def seen(x: Any, hook: Any) -> None:
        fired.append(True)

    with torch.no_grad():
        tl.run_with_hooks(torch.zeros(1, 1, dtype=torch.long, device=next(tl.parameters()).device),
                          fwd_hooks=[("blocks.0.attn.hook_rot_q", seen)], return_type=None)
    return bool(fired)


def rotate(model: Any, x: Float[torch.Tensor, "batch pos head d_head"], layer: int,
           inverse: bool = False) -> Float[torch.Tensor, "batch pos head d_head"]:
    """``x`` rotated by layer ``layer``'s RoPE tables (its first rotary_dim features; the rest pass), or rotated
    back with ``inverse`` (the rotation is orthogonal: the same tables, sin negated)."""
    cos, sin, adjacent, dim = model.rope(layer, x.shape[1])
    if adjacent:  # GPT-J's interleaved pairs: no bridged family here has them
        raise BackendError(f"the bridge backend ({model.name}) cannot rotate q/k with adjacent rotary pairs")
    cos, sin = cos[None, :, None].to(x.dtype), sin[None, :, None].to(x.dtype)
    if inverse:
        sin = -sin
    r, rest = x[..., :dim], x[..., dim:]
    half = torch.cat([-r[..., dim // 2:], r[..., : dim // 2]], dim=-1)
    return torch.cat([r * cos + half * sin, rest], dim=-1)


def with_unrotated(asked: Callable[[str], bool]) -> Callable[[str], bool]:
    """A names filter that also keeps hook_q / hook_k wherever ``asked`` wants hook_rot_q / hook_rot_k."""

    def keep(name: str) -> bool:
        if asked(name):
            return True
        return any(name.endswith(f".attn.hook_{p}") and asked(name[: -len(f"hook_{p}")] + f"hook_rot_{p}")
                   for p in _PARTS)

    return keep


def fill_rotated(model: Any, cache: Any, asked: Callable[[str], bool]) -> None:
    """hook_rot_q / hook_rot_k ([batch, pos, head, d_head]) in ``cache`` (an ActivationCache made with
    ``with_unrotated(asked)``) where ``asked`` wants them; hook_q / hook_k (and the bridge's names for them,
    q.hook_out / k.hook_out) stay only where asked for too."""
    for layer in range(model.arch.n_layers):
        b = f"blocks.{layer}.attn."
        for p in _PARTS:
            rot, raw = b + f"hook_rot_{p}", b + f"hook_{p}"
            if not asked(rot) or raw not in cache.cache_dict:
                continue
            cache.cache_dict[rot] = rotate(model, cache.cache_dict[raw], layer)
            for name in (raw, b + f"{p}.hook_out"):
                if name in cache.cache_dict and not asked(name):
                    del cache.cache_dict[name]


class _Named:
    """The hook point a hook function sees, under the rotated hook's name (the caches key on ``hook.name``)."""

    def __init__(self, hook: Any, name: str) -> None:
        self._hook, self.name = hook, name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._hook, attr)


def rot_hooks(model: Any, fwd_hooks: list) -> list:
    """``fwd_hooks`` with each hook on a block's hook_rot_q / hook_rot_k moved to its hook_q / hook_k: the hook
    sees the rotated value (under the rotated hook's name), and what it returns is rotated back."""
    out = []
    for name, fn in fwd_hooks:
        part = next((p for p in _PARTS if isinstance(name, str) and name.endswith(f".attn.hook_rot_{p}")), None)
        if part is None:
            out.append((name, fn))
            continue
        layer = int(name.split(".")[1])

        def moved(x: Any, hook: Any, fn: Callable = fn, name: str = name, layer: int = layer) -> Any:
            r = rotate(model, x, layer)
            got = fn(r, _Named(hook, name))
            return None if got is None or got is r else rotate(model, got, layer, inverse=True)

        out.append((name[: -len(f"hook_rot_{part}")] + f"hook_{part}", moved))
    return out
