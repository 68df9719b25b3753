"""DPA's target propagation applied to the ViT (our extension; shared/specs/dpa.md, "Beyond the paper").

One forward pass freezes every nonlinearity: each LayerNorm's 1/std (centring stays, it is
linear), the GELU ratio act(g)/g (``mlp_mode="ratio"``, exact) or its derivative (``"grad"``),
and the attention patterns for the value path. The target vector starts at CLS,

    t_CLS = P(gamma_final * W_head[:, c]) / std_final(CLS),   P = centring (I - 11^T/d),

and is carried down the residual stream block by block (MLP undone first, then attention):

- MLP:   m = W_out t; t += w_mlp * P(gamma2 * W_in (m * rho(g))) / std2
- value: t_j += w_v * P(gamma1 * sum_h W_V^h sum_i A_ij m_i^h) / std1_j,   m_i^h = W_O^h t_i
- query/key: delta_ij = A_ij (m_i.v_j - m_i.z_i);
  t_i += w_q * P(gamma1 * sum_h W_Q^h sum_j delta_ij k_j) / (sqrt(d_head) std1_i)
  t_j += w_k * P(gamma1 * sum_h W_K^h sum_i delta_ij q_i) / (sqrt(d_head) std1_j)

Patch score: s_i = t_i^0 . (W_patch x_i), the patch's content embedding (position embedding and
bias are the same for every image, so they are left out). With w_v = w_mlp = 1, w_q = w_k = 0
and ``mlp_mode="ratio"`` the propagation is exact: sum_i t_i^0 . x_i^0 + the bias/offset terms
(``const``) equals the target logit (tested). Defaults as in the paper: q 0.25, k 0.25, v 0.5.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float

from attribution.vit.maps import Images, Maps, Resid, Targets
from attribution.vit.methods._common import capture
from core.errors import MethodError

DEFAULTS = {"w_q": 0.25, "w_k": 0.25, "w_v": 0.5, "w_mlp": 1.0, "mlp_mode": "ratio"}
NEEDS_GRAD = False


def _act_factor(g: torch.Tensor, kind: str, mode: str) -> torch.Tensor:
    from core.models.vit import gelu  # lazy: parse_methods imports this module; TransformerLens waits for a model

    if mode == "ratio":  # act(g) / g, with its limit 0.5 at g = 0
        small = g.abs() < 1e-6
        return torch.where(small, torch.full_like(g, 0.5), gelu(g, kind) / torch.where(small, 1.0, g))
    if mode == "grad":
        x = g.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            return torch.autograd.grad(gelu(x, kind).sum(), x)[0]
    raise MethodError(f"dpa mlp_mode must be 'ratio' or 'grad', got {mode!r}")


def _ln_back(u: torch.Tensor, gamma: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Pull a target u (on the LN output) back to the LN input with the std frozen."""
    v = u * gamma
    return (v - v.mean(-1, keepdim=True)) / scale


def start_target(model, acts: dict, targets: Targets) -> tuple[Resid, Float[torch.Tensor, " image"]]:
    """The target at the last residual stream, t (image, token, d_model), and the constant (image).

    A linear head on the final LayerNorm (its 1/std frozen) reads CLS (``head_pool="cls"``), the mean of
    the patches ("mean") or both ("cls+mean"); a model with another readout gives ``dpa_start(acts,
    targets)`` itself (the saliency decoder: its gradient, the LayerNorm std frozen)."""
    if hasattr(model, "dpa_start"):
        return model.dpa_start(acts, targets)
    with torch.no_grad():
        n, t_len, d = acts["blocks.0.hook_resid_pre"].shape
        ln, pool = model.ln_final, getattr(model.cfg, "head_pool", "cls")
        scale = acts["ln_final.hook_scale"]  # (image, 1) when the final LN sees CLS only, else (image, token, 1)
        w = model.W_head[:, targets].T  # (image, features)
        t = torch.zeros(n, t_len, d, device=w.device)
        const = model.b_head[targets].clone()
        if pool == "cls":
            t[:, 0] = _ln_back(w, ln.w, scale)
            return t, const + w @ ln.b
        w_cls, w_mean = (w[:, :d], w[:, d:]) if pool == "cls+mean" else (None, w)
        p = model.cfg.n_prefix
        k = t_len - p
        t[:, p:] = _ln_back(w_mean[:, None, :].expand(n, k, d) / k, ln.w, scale[:, p:])
        const += w_mean @ ln.b
        if w_cls is not None:
            t[:, 0] = _ln_back(w_cls, ln.w, scale[:, 0])
            const += w_cls @ ln.b
    return t, const


def propagate(model, images: Images, targets: Targets, w_q: float = 0.25, w_k: float = 0.25,
              w_v: float = 0.5, w_mlp: float = 1.0, mlp_mode: str = "ratio",
              keep: dict[int, Resid] | None = None):
    """Returns (t0 (image, token, d_model) at the block-0 input, const (image), acts).

    ``keep``: a dict that receives t^l, the target at block l's input (``blocks.{l}.hook_resid_pre``),
    for every layer l (DAP's ``prior="dpa"`` reads these)."""
    cfg = model.cfg
    names = ["hook_embed"]
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."
        names += [b + "hook_resid_pre", b + "ln1.hook_scale", b + "ln2.hook_scale", b + "attn.hook_pattern",
                  b + "attn.hook_q", b + "attn.hook_k", b + "attn.hook_v", b + "attn.hook_z",
                  b + "mlp.hook_pre"]
    names.append("ln_final.hook_scale")
    if getattr(cfg, "ln_pre", False):
        names.append("ln_pre.hook_scale")
    if hasattr(model, "dpa_start"):  # a readout other than a linear head (the DINOv2 saliency decoder)
        names.append(f"blocks.{cfg.n_layers - 1}.hook_resid_post")
    _, acts, _ = capture(model, images, names, grad=False)
    t, const = start_target(model, acts, targets)
    with torch.no_grad():
        for l in reversed(range(cfg.n_layers)):
            blk, b = model.blocks[l], f"blocks.{l}."
            # MLP (pre-LN): the activation frozen as a factor rho(g) on its pre-activation
            m = t @ blk.mlp.W_out.T
            u = m * _act_factor(acts[b + "mlp.hook_pre"], cfg.act, mlp_mode)
            dy = u @ blk.mlp.W_in.T
            const += (t @ blk.mlp.b_out).sum(1)
            const += w_mlp * ((u @ blk.mlp.b_in).sum(1) + (dy @ blk.ln2.b).sum(1))
            t = t + w_mlp * _ln_back(dy, blk.ln2.w, acts[b + "ln2.hook_scale"])
            # attention
            at = blk.attn
            a, q, k, v, z = (acts[b + "attn.hook_" + s] for s in ("pattern", "q", "k", "v", "z"))
            mh = torch.einsum("btd,hed->bthe", t, at.W_O)  # (image, token, head, d_head)
            const += (t @ at.b_O).sum(1) + w_v * torch.einsum("bthe,he->b", mh, at.b_V)
            dv = torch.einsum("bhij,bihe->bjhe", a, mh)
            dy_v = torch.einsum("bjhe,hde->bjd", dv, at.W_V)
            const += w_v * (dy_v @ blk.ln1.b).sum(1)
            total = w_v * dy_v
            if w_q or w_k:
                delta = a * (torch.einsum("bihe,bjhe->bhij", mh, v)
                             - (mh * z).sum(-1).transpose(1, 2)[..., None])
                dq = torch.einsum("bhij,bjhe->bihe", delta, k) / math.sqrt(cfg.d_head)
                dk = torch.einsum("bhij,bihe->bjhe", delta, q) / math.sqrt(cfg.d_head)
                total = total + w_q * torch.einsum("bihe,hde->bid", dq, at.W_Q) \
                    + w_k * torch.einsum("bjhe,hde->bjd", dk, at.W_K)
            t = t + _ln_back(total, blk.ln1.w, acts[b + "ln1.hook_scale"])
            if keep is not None:
                keep[l] = t
        if getattr(cfg, "ln_pre", False):  # CLIP: a LayerNorm between the embeddings and block 0
            const += (t @ model.ln_pre.b).sum(1)
            t = _ln_back(t, model.ln_pre.w, acts["ln_pre.hook_scale"])
    return t, const, acts


def run(model, images: Images, targets: Targets, w_q: float = 0.25, w_k: float = 0.25,
        w_v: float = 0.5, w_mlp: float = 1.0, mlp_mode: str = "ratio") -> Maps:
    t, _, acts = propagate(model, images, targets, w_q, w_k, w_v, w_mlp, mlp_mode)
    p = model.cfg.n_prefix
    content = acts["hook_embed"][:, p:] - model.b_patch  # W_patch x_i
    return (t[:, p:] * content).sum(-1)
