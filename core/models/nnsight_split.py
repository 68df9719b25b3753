"""Split head inputs on the nnsight backend: each attention head reads its own copy of the residual stream for its
query, key and value (``blocks.{l}.hook_q_input`` / ``hook_k_input`` / ``hook_v_input``, [batch, pos, head,
d_model], grouped kv heads ungrouped to one per query head), and the MLP its own ``hook_mlp_in``, as
TransformerLens' ``split_qkv_input`` gives them: the receiver inputs of the edge-level circuits.

A Hugging Face attention has no per-head input, so the layer's attention is computed here from the (hooked) copies:
inside an nnsight trace with the weights read inside a trace (``TracedWeights``), the module's own forward skipped
with that result (nnsight's ``Envoy.skip``); on TransformerLens' bridge, whose attention runs on the grouped kv
heads, in a hook at the block's input whose result replaces ``hook_attn_out`` (core.models.hooked). Llama-style
attention (llama, mistral, qwen2): RMSNorm before it, RoPE over halves, a causal softmax scaled by 1 / sqrt(d_head),
no q/k norms, post-norms or soft caps; with ``qk_norm``, ``scale`` and ``window`` Gemma 3's (per-head q/k RMSNorms
before RoPE, 1 / sqrt(query_pre_attn_scalar), sliding windows; its post-norm runs after, in the module); with
``softcap`` Gemma 2's (its scores capped before the mask); with ``pre_norm`` False and ``qk_full`` OLMo-2's (no norm
before the attention, q/k norms over the whole projection; its norm after runs in the block)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

SPLIT_HOOKS = {  # hook -> (module path, part, order in the block, derivation), as the nnsight_tables entries
    "hook_q_input": ("", "input", 0, "split"),
    "hook_k_input": ("", "input", 0, "split"),
    "hook_v_input": ("", "input", 0, "split"),
    "hook_mlp_in": ("post_attention_layernorm", "input", 6, "mlp_in"),
}
# what the split attention serves itself (the module's own attention does not run)
SERVED = ("hook_q_input", "hook_k_input", "hook_v_input", "attn.hook_z")


def _rms(x: Any, w: Any, eps: float) -> Any:
    import torch

    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def split_attention(w: dict[str, Any], arch: Any, eps: float, resid: Any, hooks: list[tuple[str, Callable | None]],
                    rope: tuple[Any, Any], saved: dict[str, Any], qk_norm: tuple[Any, Any] | None = None,
                    scale: float | None = None, window: int | None = None, softcap: float | None = None,
                    pre_norm: bool = True, qk_full: bool = False) -> tuple[Any, Any]:
    """(attention output [batch, pos, d_model], pattern [batch, head, q, k]) of a layer (weights ``w`` in
    TransformerLens' layout, kv heads repeated; RMSNorm epsilon ``eps``) from the residual stream entering it,
    each head reading its own hooked copy. ``hooks``: (hook name, fn) in the order TransformerLens runs them, fn
    None to save the value into ``saved`` (hook_z only, inside an nnsight trace). ``qk_norm``: (q gain, k gain) of
    per-head RMSNorms as TransformerLens holds them (Gemma's 1 + w); ``scale``: the scores' divisor (sqrt(d_head)
    when None); ``window``: a key is seen while query - key < window; ``softcap``: scores -> cap * tanh(scores /
    cap) before the mask (Gemma 2); ``pre_norm`` False: no norm before the attention, ``qk_full``: the q/k norms
    over the whole projection of each role, heads together (OLMo-2's; gains [heads * d_head])."""
    import torch

    a = arch
    b, p, d = resid.shape

    def run(hook: str, value: Any) -> Any:
        for name, fn in hooks:
            if name.endswith("." + hook):
                if fn is None:
                    saved[name] = value.detach().clone().save()
                    continue
                out = fn(value, _Named(name))
                value = value if out is None else out
        return value

    heads = {}
    for role in ("q", "k", "v"):
        x = resid[:, :, None, :].expand(b, p, a.n_heads, d).clone()
        x = run(f"hook_{role}_input", x)
        weight, bias = w[f"W_{role.upper()}"], w[f"b_{role.upper()}"]
        if weight.shape[0] != a.n_heads:  # grouped kv heads as a backend keeps them: one per query head
            rep = a.n_heads // weight.shape[0]
            weight = weight.repeat_interleave(rep, 0)
            bias = None if bias is None else bias.repeat_interleave(rep, 0)
        proj = torch.einsum("bphd,hde->bphe", _rms(x, w["ln1.w"], eps) if pre_norm else x, weight)
        heads[role] = proj if bias is None else proj + bias
    if qk_norm is not None and qk_full:  # grouped k gains follow the kv heads repeated above
        for role, gain in zip("qk", qk_norm, strict=True):
            flat = heads[role].flatten(2)
            gain = gain.view(-1, a.d_head).repeat_interleave(a.n_heads * a.d_head // gain.numel(), 0).flatten()
            heads[role] = _rms(flat, gain, eps).view(heads[role].shape)
    elif qk_norm is not None:
        heads["q"], heads["k"] = _rms(heads["q"], qk_norm[0], eps), _rms(heads["k"], qk_norm[1], eps)
    cos, sin = (t[:p, None, :].to(resid.device, resid.dtype) for t in rope)  # [pos, 1, d_head]
    q, k = _rotate(heads["q"], cos, sin), _rotate(heads["k"], cos, sin)
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k).float() / (a.d_head ** 0.5 if scale is None else scale)
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    causal = torch.ones(p, p, dtype=torch.bool, device=resid.device).tril()
    if window is not None:
        causal = causal & ~torch.ones(p, p, dtype=torch.bool, device=resid.device).tril(-window)
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1).to(resid.dtype)
    z = run("attn.hook_z", torch.einsum("bhqk,bkhe->bqhe", pattern, heads["v"]))
    out = torch.einsum("bqhe,hem->bqm", z, w["W_O"])
    return (out if w["b_O"] is None else out + w["b_O"]), pattern


class _Named:
    """What a TransformerLens hook function gets as ``hook``: its ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name


SPLIT_NAME = re.compile(r"^blocks\.(\d+)\.(hook_[qkv]_input|attn\.hook_z)$")


def llama_like(arch: Any) -> bool:
    """Whether split_attention computes this architecture's attention: pre-RMSNorm, RoPE, no q/k norms,
    post-norms, parallel blocks or soft caps."""
    return (arch.norm == "rmsnorm" and arch.norm_placement == "pre" and arch.positional == "rope"
            and arch.qk_norm == "none" and not arch.parallel and arch.attn_softcap is None)


def split_hooks(model: Any, hooks: list[tuple[str, Callable]]) -> list[tuple[str, Callable]]:
    """TransformerLens-style forward hooks for a module whose attention cannot split its inputs (the bridge: HF
    attention on grouped kv heads): the per-head q/k/v input and hook_z hooks go to split_attention, run at each
    block's input (after that point's own hooks), and its output replaces the block's ``hook_attn_out`` (its post-norm's
    input where it has one)."""
    per_layer: dict[int, list] = {layer: [] for layer in range(model.arch.n_layers)}
    out: list[tuple[str, Callable]] = []
    for name, fn in hooks:
        m = SPLIT_NAME.match(name)
        if m:
            per_layer[int(m.group(1))].append((name, fn))
        elif name.endswith(".hook_mlp_in"):  # the MLP's own input: its norm's input, the residual left alone
            out.append((name.replace(".hook_mlp_in", ".ln2.hook_in"), _fresh(fn, name)))
        else:
            out.append((name, _fresh(fn, name)))
    stash: dict[int, Any] = {}
    eps = float(model.tl.cfg.eps)

    def attend(x: Any, hook: Any) -> None:
        layer = int(hook.name.split(".")[1])
        cos, sin = model.rope(layer, x.shape[1])[:2]
        extra = model.split_extra(layer) if hasattr(model, "split_extra") else {}  # Gemma 3's norms, window
        stash[layer] = split_attention(model.weights(layer), model.arch, eps, x, per_layer[layer], (cos, sin), {},
                                       **extra)[0]

    def replace(x: Any, hook: Any) -> Any:
        return stash.pop(int(hook.name.split(".")[1])).to(x.dtype)

    # the attention's output, before a post-norm where the block has one (Gemma 3's ln1_post)
    at = "ln1_post.hook_in" if model.arch.norm_placement == "pre+post" else "hook_attn_out"
    for layer in per_layer:
        out += [(f"blocks.{layer}.hook_resid_pre", attend), (f"blocks.{layer}.{at}", replace)]
    return out


def _fresh(fn: Callable, name: str) -> Callable:
    """``fn`` given a copy of the bridge's value, its result (or the copy) returned: a value handed back unchanged
    is not the one the bridge computes on, so a gradient hook on it would never fire."""

    def hook(x: Any, hook: Any) -> Any:
        copy = x.clone()
        out = fn(copy, _Named(name))
        return copy if out is None else out

    return hook
