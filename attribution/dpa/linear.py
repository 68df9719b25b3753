"""The frozen linearisation DPA propagates through: norms, RoPE, activations, supported configs.

Everything here is a transpose (vector-Jacobian product) of one frozen piece of the forward pass,
written on tensors whose last two axes are [pos, d_model] (the engine adds a leading batch axis).
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float

from core.errors import MethodError
from core.models.hooked import require


def check_supported(model: Any) -> None:
    """Refuse architectures whose forward pass has pieces DPA does not linearise (yet)."""
    require(model, "dpa")
    # a TransformerLens module's config, or the facts a backend without one states (NNsightModel.cfg)
    cfg = getattr(getattr(model, "tl", None), "cfg", None) or getattr(model, "cfg", None)
    if cfg is None:
        raise MethodError(f"dpa needs a TransformerLens-style hooked model; {model!r} has no config")
    problems = {
        "QK norm without RoPE": model.arch.qk_norm != "none" and model.arch.positional != "rope",
        "clipped QKV": getattr(cfg, "clip_qkv", None) is not None,
        "log-n attention scaling": getattr(cfg, "use_logn_attn", False),
        "attention sinks": getattr(cfg, "use_attention_sinks", False),
        "layer-normed activations (SoLU)": str(getattr(cfg, "act_fn", "") or "").endswith("_ln"),
        f"{cfg.positional_embedding_type} positions": cfg.positional_embedding_type
        not in ("standard", "rotary", "none"),
        "mixture-of-experts MLPs": model.arch.mlp.startswith("moe"),
    }
    bad = [name for name, flag in problems.items() if flag]
    if bad:
        raise MethodError(f"dpa does not support {', '.join(bad)} ({model.name})")


def norm_back(g_n: Float[torch.Tensor, "*batch pos d_model"], scale: Float[torch.Tensor, "... pos 1"] | None,
              gamma: Float[torch.Tensor, " d_model"] | None, beta: Float[torch.Tensor, " d_model"] | None,
              centred: bool, normalized: Float[torch.Tensor, "... pos d_model"] | None = None
              ) -> tuple[Float[torch.Tensor, "*batch pos d_model"], Float[torch.Tensor, "*batch"]]:
    """Transpose of n = gamma * C x / scale + beta with the scale frozen, or, given ``normalized``
    (TL's hook_normalized, xh = C x / scale), with the scale's own dependence on x carried too (norm-aware
    DPA): the exact Jacobian transpose, (u - xh <xh, u> / d) / scale with u = gamma * g_n, then centred
    for LayerNorm (scale^2 = mean (Cx)^2 + eps, so d scale / d Cx = Cx / (d scale), eps or not).

    g_n: target on the norm's output [..., pos, d]; scale: [..., pos, 1] (TL's hook_scale: rms or std).
    Returns the target on x and the offset contributed by beta (g_n . beta, summed over pos and d).
    """
    offset = (g_n * beta).sum((-2, -1)) if beta is not None else g_n.new_zeros(g_n.shape[:-2])
    g = g_n * gamma if gamma is not None else g_n
    if normalized is not None:
        g = g - normalized * (g * normalized).sum(-1, keepdim=True) / g.shape[-1]
    if scale is not None:
        g = g / scale
    if centred:  # LayerNorm: t . (x - mean x) = (t - mean t) . x
        g = g - g.mean(-1, keepdim=True)
    return g, offset


def rope_tables(model: Any, layer: int,
                seq: int) -> tuple[Float[torch.Tensor, "pos rot"], Float[torch.Tensor, "pos rot"], bool, int] | None:
    """(cos, sin) [seq, rotary_dim] in float32, whether pairs are adjacent (GPT-J) and rotary_dim; None
    without RoPE (HookedModel.rope)."""
    rope = model.rope(layer, seq)
    if rope is None:
        return None
    cos, sin, adjacent, dim = rope
    return cos.float(), sin.float(), adjacent, dim


def rotate_half(x: Float[torch.Tensor, "*batch rot"], adjacent: bool) -> Float[torch.Tensor, "*batch rot"]:
    """F(x): (x1, x2) -> (-x2, x1) over halves (NeoX/Llama) or over adjacent pairs (GPT-J)."""
    if adjacent:
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_transpose(g: Float[torch.Tensor, "*batch pos d_head"],
                   tables: tuple[Float[torch.Tensor, "pos rot"], Float[torch.Tensor, "pos rot"], bool, int]
                   ) -> Float[torch.Tensor, "*batch pos d_head"]:
    """Undo RoPE on a gradient [..., pos, d_head]: R^T g = cos * g - F(sin * g), F = rotate-half.

    The forward is x_rot = cos * x + sin * F(x) with F skew-symmetric, so its transpose is
    cos * g + F^T(sin * g) = cos * g - F(sin * g); dimensions past rotary_dim pass through.
    """
    cos, sin, adjacent, dim = tables
    rot = g[..., :dim]
    out = rot * cos - rotate_half(rot * sin, adjacent)
    if dim == g.shape[-1]:
        return out
    return torch.cat([out, g[..., dim:]], dim=-1)


def act_slope(act_fn: Any, g: Float[torch.Tensor, "*batch d_mlp"], mode: str,
              silu: bool) -> Float[torch.Tensor, "*batch d_mlp"]:
    """The frozen slope of act at g: act(g)/g ("ratio", exact) or act'(g) ("derivative")."""
    if mode == "ratio":
        if silu:
            return torch.sigmoid(g)  # SiLU(g) = sigmoid(g) * g, without dividing by g
        safe = torch.where(g.abs() < 1e-6, torch.full_like(g, 1e-6), g)
        ratio = act_fn(safe) / safe
        return ratio  # near 0 this is act(eps)/eps, the slope at 0 for smooth activations
    with torch.inference_mode(False), torch.enable_grad():  # works under no_grad/inference_mode
        x = g.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(act_fn(x).sum(), x)
    return grad.detach()
