"""Information flow routes (Ferrando and Voita 2024), as dense scores.

IFR decomposes each sum in the residual stream into its parts and scores a part c of a sum y by its
proximity max(0, |y|_1 - |y - c|_1), normalised over the parts. At layer l, position i, the sum is
resid_mid_i = resid_pre_i + sum_{h, j} A^h_ij v^h_j W_O^h (+ b_O) (each part times a post-norm's frozen gamma / scale
where the family has one): the residual (which stays at i) and one
part per head and key j (which comes from position j). The MLP only mixes within a position, so it
passes a position's importance down unchanged. Starting from the final position (importance 1) and
going down layer by layer gives:

- token: the importance that reaches each token's embedding;
- qk [layer, head, query, key]: importance(query at layer l) x proximity share of part (h, key);
- head [layer, head, query]: the same summed over keys.

IFR is prediction-agnostic: it does not use the target or foil (the paper prunes the same graph with a
threshold; these are the dense importances before pruning).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

CHUNK_BYTES = 256 * 2**20  # per-query chunks keep [chunk, head, key, d_model] under this


def proximity(total: Float[torch.Tensor, "... d_model"],
              part: Float[torch.Tensor, "*batch d_model"]) -> Float[torch.Tensor, "*batch"]:
    """IFR's proximity of a part to the sum it is in, over the last dim: max(0, |total|_1 - |total - part|_1)."""
    return (total.abs().sum(-1) - (total - part).abs().sum(-1)).clamp_min(0)


def layer_shares(model: HookedModel, cache: Any, layer: int,
                 ) -> tuple[Float[torch.Tensor, " query"], Float[torch.Tensor, "query head key"]]:
    """Normalised proximity shares of resid_mid's parts at ``layer``: residual [S] and head/key parts
    [S(query), H, S(key)], summing to 1 per query (circuits.flow draws them per position). ``cache`` holds the
    hooks ``ifr_all`` caches."""
    a = model.arch
    pat = cache[f"blocks.{layer}.attn.hook_pattern"][0].float()  # [H, Sq, Sk]
    v = cache[f"blocks.{layer}.attn.hook_v"][0].float()  # [S, Hkv, dh]
    if v.shape[1] != a.n_heads:
        v = v.repeat_interleave(a.n_heads // v.shape[1], dim=1)
    w_o = model.weights(layer)["W_O"].float()  # [H, dh, D]
    vo = torch.einsum("shd,hdm->hsm", v, w_o)  # [H, Sk, D]: what key s would write through head h
    resid = cache[f"blocks.{layer}.hook_resid_pre"][0].float()
    # the sum after attention (resid_mid; parallel blocks have none, their MLP adds to the same sum later)
    y = resid + cache[f"blocks.{layer}.hook_attn_out"][0].float()
    s = y.shape[0]
    site = model.norm_sites(layer)["attn_post"]  # a post-norm (Gemma, OLMo-2) scales each part, frozen
    post = None if site is None else site.w.float() / cache[site.scale_hook][0].float()  # [S, D]
    res_imp = proximity(y, resid)  # [S]
    part_imp = torch.empty(s, a.n_heads, s)
    chunk = max(1, CHUNK_BYTES // (4 * a.n_heads * s * y.shape[-1]))
    for start in range(0, s, chunk):
        stop = min(s, start + chunk)
        parts = pat[:, start:stop].permute(1, 0, 2).unsqueeze(-1) * vo.unsqueeze(0)  # [c, H, Sk, D]
        if post is not None:
            parts = parts * post[start:stop, None, None, :]
        yc = y[start:stop, None, None]
        part_imp[start:stop] = proximity(yc, parts)
    total = (res_imp + part_imp.sum((1, 2))).clamp_min(1e-12)
    return res_imp / total, part_imp / total[:, None, None]


def share_hooks(model: HookedModel) -> list[str]:
    """The hooks ``layer_shares`` reads at every layer."""
    n = model.arch.n_layers
    names = [f"blocks.{l}.{k}" for l in range(n) for k in
             ("attn.hook_pattern", "attn.hook_v", "hook_resid_pre", "hook_attn_out")]
    return names + [site.scale_hook for l in range(n) if (site := model.norm_sites(l)["attn_post"]) is not None]


def ifr_all(model: HookedModel, enc: Encoding) -> dict[str, Float[torch.Tensor, "*axes"]]:
    """All three levels from one cached forward: token [S], head [L, H, S], qk [L, H, S, S]."""
    n = model.arch.n_layers
    with torch.no_grad():
        _, cache = model.run_with_cache(enc.tokens, names_filter=share_hooks(model), return_type=None)
        s = enc.seq_len
        w = torch.zeros(s)
        w[-1] = 1.0
        edge = torch.zeros(n, model.arch.n_heads, s, s)
        for layer in reversed(range(n)):
            res, parts = layer_shares(model, cache, layer)
            edge[layer] = (w[:, None, None] * parts).permute(1, 0, 2)  # [H, q, k]
            flow = parts.sum(1) + torch.diag(res)  # [q, k]: share of q's importance that comes from k
            w = w @ flow
    return {"token": w, "head": edge.sum(-1), "qk": edge}


def ifr_scores(model: HookedModel, enc: Encoding, level: str) -> Float[torch.Tensor, "*axes"]:
    return ifr_all(model, enc)[level]


def ifr_levels(model: HookedModel, enc: Encoding,
               levels: tuple[str, ...]) -> dict[str, Float[torch.Tensor, "*axes"]]:
    """Method-table one_pass entry: the levels asked for from one cached forward."""
    every = ifr_all(model, enc)
    return {lv: every[lv] for lv in levels}
