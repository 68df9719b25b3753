"""Split head inputs on the nnsight backend: each attention head reads its own copy of the residual stream for its
query, key and value (``blocks.{l}.hook_q_input`` / ``hook_k_input`` / ``hook_v_input``, [batch, pos, head,
d_model], grouped kv heads ungrouped to one per query head), and the MLP its own ``hook_mlp_in``, as
TransformerLens' ``split_qkv_input`` gives them: the receiver inputs of the edge-level circuits.

A traced Hugging Face attention has no per-head input, so inside the trace the layer's attention is computed here
from the (hooked) copies with the weights read inside a trace (``TracedWeights``), and the module's own forward is
skipped with that result (nnsight's ``Envoy.skip``). Llama-style attention (llama, mistral, qwen2): RMSNorm before
it, RoPE over halves, a causal softmax scaled by 1 / sqrt(d_head)."""

from __future__ import annotations

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


def split_attention(model: Any, layer: int, resid: Any, hooks: list[tuple[str, Callable | None]],
                    rope: tuple[Any, Any], saved: dict[str, Any]) -> tuple[Any, Any]:
    """(attention output [batch, pos, d_model], pattern [batch, head, q, k]) of ``layer`` from the residual
    stream entering it, each head reading its own hooked copy. ``hooks``: (hook name, fn) in the order
    TransformerLens runs them, fn None to save the value into ``saved`` (hook_z only)."""
    import torch

    a = model.arch
    w = model.weights(layer)
    eps = float(getattr(model.lm.config, "rms_norm_eps", 1e-6))
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
        proj = torch.einsum("bphd,hde->bphe", _rms(x, w["ln1.w"], eps), w[f"W_{role.upper()}"])
        bias = w[f"b_{role.upper()}"]
        heads[role] = proj if bias is None else proj + bias
    cos, sin = (t[:p, None, :].to(resid.dtype) for t in rope)  # [pos, 1, d_head]
    q, k = _rotate(heads["q"], cos, sin), _rotate(heads["k"], cos, sin)
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k).float() / (a.d_head ** 0.5)
    causal = torch.ones(p, p, dtype=torch.bool, device=resid.device).tril()
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1).to(resid.dtype)
    z = run("attn.hook_z", torch.einsum("bhqk,bkhe->bqhe", pattern, heads["v"]))
    out = torch.einsum("bqhe,hem->bqm", z, w["W_O"])
    return (out if w["b_O"] is None else out + w["b_O"]), pattern


class _Named:
    """What a TransformerLens hook function gets as ``hook``: its ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name
