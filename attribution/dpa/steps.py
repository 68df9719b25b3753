"""DPA's steps, in one place: the hooks its forward caches, the target's initialisation, the two
sublayer pull-backs (MLP, attention) with the norms around them, and the one top-down loop over them
(``top_down``). The engine (``engine.py``), the pull-back from any residual point (``pullback.py``) and
the edge scorer (``circuits/edges/dpa.py``) all walk that loop and differ only in what they collect.

Every step is the transpose of one frozen piece of the forward pass (shared/specs/dpa.md). Beyond the
paper's Llama block, the steps handle what the supported families add (core/models/families.py):
norms after a sublayer's output (Gemma 2/3's post-norms, OLMo-2's only norms), per-head or
whole-projection q/k norms (Gemma 3, Qwen3, OLMo-2), attention soft-capping (Gemma 2; its exact local
derivative on the q/k paths), parallel attention and MLP (GPT-NeoX: the engine feeds both the same
target), partial rotary (Pythia) and GeGLU. Tensors are [batch, pos, d_model] unless said otherwise.
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float

from attribution.dpa.linear import act_slope, norm_back, rope_tables, rope_transpose
from attribution.dpa.params import DPAParams

if TYPE_CHECKING:
    from core.models.hooked import HookedModel, NormSite

OFFSET_KEYS = ("unembed_bias", "final_norm_bias", "attn_out_bias", "attn_value_bias", "attn_qk_bias",
               "attn_norm_bias", "mlp_bias", "mlp_norm_bias", "pos_embed")

# What the steps pass around. A cached activation is batch first, its other axes its hook's, except per-head
# q/k-norm scales, which come flattened ([batch * pos * head, 1]): so "_batch", a name jaxtyping documents but
# does not check. The offsets are one float64 sum per prompt; the scores asked for ("head", "qk", "neuron") are
# batch, layer first.
Cache = dict[str, Float[torch.Tensor, "_batch ..."]]
Offsets = dict[str, Float[torch.Tensor, " batch"]]
Scores = dict[str, Float[torch.Tensor, "batch layer ..."]]


def hook_names(model: HookedModel, p: DPAParams, levels: tuple[str, ...]) -> list[str]:
    """The hooks DPA's forward caches (those the model has)."""
    a = model.arch
    rotary = a.positional == "rope"
    names = ["hook_embed", "hook_pos_embed", "ln_final.hook_scale", "ln_final.hook_normalized",
             f"blocks.{a.n_layers - 1}.hook_resid_post"]
    for layer in range(a.n_layers):
        b = f"blocks.{layer}."
        names += [b + "ln1.hook_scale", b + "ln2.hook_scale", b + "ln1_post.hook_scale", b + "ln2_post.hook_scale",
                  b + "attn.hook_pattern", b + "attn.hook_v", b + "mlp.hook_pre", b + "mlp.hook_pre_linear"]
        if p.uses_qk:
            names += [b + ("attn.hook_rot_q" if rotary else "attn.hook_q"),
                      b + ("attn.hook_rot_k" if rotary else "attn.hook_k"),
                      b + "attn.q_norm.hook_scale", b + "attn.k_norm.hook_scale"]
            if a.attn_softcap:
                names.append(b + "attn.hook_attn_scores")
        if "neuron" in levels:
            names.append(b + "mlp.hook_post")
        if p.norm_aware:  # the normalised stream: the scale's own Jacobian needs it
            names += [b + ln + ".hook_normalized" for ln in ("ln1", "ln2", "ln1_post", "ln2_post")]
    available = set(model.hook_names())
    return [n for n in names if n in available]


def bsum(x: Float[torch.Tensor, "batch ..."]) -> Float[torch.Tensor, " batch"]:
    """Sum over every axis but the leading batch axis, in float64: [batch]."""
    return x.flatten(1).sum(-1).double()


def layer_weights(model: HookedModel, layer: int) -> dict[str, Any]:
    """Layer weights in float32 with grouped kv heads NOT repeated: repeating copies W_K and W_V, which costs
    more than this layer's whole top-down pass; DPA sums the query heads of a group instead."""
    return {k: (v.float() if isinstance(v, torch.Tensor) else v)
            for k, v in model.weights(layer, repeat_kv=False).items()}


def site_back(model: HookedModel, site: NormSite | None, g: Float[torch.Tensor, "*batch pos d_model"], cache: Cache,
              aware: bool = False) -> tuple[Float[torch.Tensor, "*batch pos d_model"], Float[torch.Tensor, "*batch"]]:
    """Transpose of one norm (``norm_back``) given by its NormSite, its scale frozen or, ``aware``, carried
    (norm-aware DPA; hook_names caches the normalised stream it needs); identity where there is none."""
    if site is None:
        return g, g.new_zeros(g.shape[:-2]).double()
    w = None if site.w is None else site.w.float()
    b = None if site.b is None else site.b.float()
    normalized = cache[site.scale_hook.replace("hook_scale", "hook_normalized")] if aware else None
    return norm_back(g, cache.get(site.scale_hook), w, b, model.arch.norm == "layernorm", normalized)


def init_target(model: HookedModel, encs: list[Any], cache: Cache, offsets: Offsets,
                aware: bool = False) -> tuple[Float[torch.Tensor, "batch pos d_model"], Float[torch.Tensor, " batch"]]:
    """t at each prompt's explained position (Encoding.query: the last one unless a position is given): the
    unembedding row(s) pulled back through the final norm, its scale frozen or (``aware``) carried. The logit
    explained is the one before any final soft-capping (Gemma 2's tanh is not linearised: DPA explains what
    it squashes)."""
    a = model.arch
    W_U = model.W_U.float()  # [d_model, vocab]
    b_U = getattr(model, "b_U", None)
    gamma = model.final_norm_weight()
    beta = model.final_norm_bias()
    rows = torch.arange(len(encs))
    last = torch.tensor([e.query for e in encs])
    if "ln_final.hook_normalized" in cache:
        final = cache["ln_final.hook_normalized"][rows, last]  # [batch, d_model]
        final = final * gamma.float() if gamma is not None else final
        final = final + beta.float() if beta is not None else final
        scale = cache["ln_final.hook_scale"][rows, last][:, None] if "ln_final.hook_scale" in cache else None
        normalized = cache["ln_final.hook_normalized"][rows, last][:, None] if aware else None
    else:  # no final norm
        final = cache[f"blocks.{a.n_layers - 1}.hook_resid_post"][rows, last]
        scale = normalized = None
    u = final.new_zeros(final.shape)
    for b, enc in enumerate(encs):
        target_id = enc.target_id
        if target_id is None:  # no target given: explain the model's own top prediction
            target_id = int((final[b] @ W_U).argmax())
        u[b] = W_U[:, target_id]
        if enc.foil_id is not None:
            u[b] -= W_U[:, enc.foil_id]
        if b_U is not None:
            offsets["unembed_bias"][b] += float(b_U[target_id] - (b_U[enc.foil_id] if enc.foil_id is not None
                                                                   else 0.0))
    logit = (final * u).sum(-1).double() + offsets["unembed_bias"]
    g, off = norm_back(u[:, None, :], scale, None if gamma is None else gamma.float(),
                       None if beta is None else beta.float(), a.norm == "layernorm", normalized)
    offsets["final_norm_bias"] += off.double()
    t = torch.zeros(len(encs), cache["hook_embed"].shape[1], a.d_model, dtype=torch.float32, device=W_U.device)
    t[rows, last] = g[:, 0]
    return t, logit


def undo_mlp(model: HookedModel, layer: int, w: dict[str, Any], t: Float[torch.Tensor, "batch pos d_model"],
             cache: Cache, p: DPAParams, out: Scores, offsets: Offsets) -> Float[torch.Tensor, "batch pos d_model"]:
    """Update to t from layer l's MLP: up and gate paths (GLU) or one content path (GELU/ReLU), through the
    frozen norms after (post-norm) and before (pre-norm) the MLP."""
    b = f"blocks.{layer}."
    sites = model.norm_sites(layer)
    t, off = site_back(model, sites["mlp_post"], t, cache, p.norm_aware)  # the target on the MLP's output
    offsets["mlp_norm_bias"] += off.double()
    m = t @ w["W_out"].T  # [batch, pos, d_mlp]: the target seen by each neuron's output
    if "neuron" in out:
        out["neuron"][:, layer] = cache[b + "mlp.hook_post"] * m
    if w["b_out"] is not None:
        offsets["mlp_bias"] += bsum(t * w["b_out"])
    g = cache[b + "mlp.hook_pre"]
    act_fn = model.act_fn(layer)
    silu = model.arch.act_fn == "silu"
    slope = act_slope(act_fn, g, p.act_mode, silu=silu)
    if w["W_gate"] is not None:
        if w["b_in"] is not None:  # TL's gated MLP adds b_in after the product
            offsets["mlp_bias"] += bsum(m * w["b_in"])
        u = cache[b + "mlp.hook_pre_linear"]
        act = g * slope if (silu and p.act_mode == "ratio") else act_fn(g)
        parts = []
        if p.w_up:  # up path, act(g) frozen: linear in u
            parts.append(((p.w_up * m) * act) @ w["W_in"].T)
        if p.w_gate:  # gate path, slope(g) and u frozen: linear in g
            parts.append(((p.w_gate * m) * slope * u) @ w["W_gate"].T)
        g_n = sum(parts[1:], parts[0]) if parts else torch.zeros_like(t)
    else:
        grad_pre = (p.w_mlp * m) * slope
        g_n = grad_pre @ w["W_in"].T
        if w["b_in"] is not None:
            offsets["mlp_bias"] += bsum(grad_pre * w["b_in"])
    g_x, off = site_back(model, sites["mlp_pre"], g_n, cache, p.norm_aware)
    offsets["mlp_norm_bias"] += off.double()
    return g_x


def from_heads(g: Float[torch.Tensor, "batch head pos d_head"],
               W: Float[torch.Tensor, "head d_model d_head"]) -> Float[torch.Tensor, "batch pos d_model"]:
    """sum_h g[:, h] @ W[h]^T: [batch, head, pos, d_head] x [head, d_model, d_head] -> [batch, pos, d_model],
    as one matmul. W.transpose(1, 2).reshape is a free view for HF-converted weights (TL's W_Q views q_proj).
    """
    n_batch, heads, seq, d_head = g.shape
    flat = g.transpose(1, 2).reshape(n_batch, seq, heads * d_head)
    return flat @ W.transpose(1, 2).reshape(heads * d_head, -1)


def by_head(x: Float[torch.Tensor, "batch pos head d_head"]) -> Float[torch.Tensor, "batch head pos d_head"]:
    """[batch, pos, head, d_head] -> [batch, head, pos, d_head]."""
    return x.transpose(1, 2)


def attn_out_target(model: HookedModel, layer: int, t: Float[torch.Tensor, "batch pos d_model"], cache: Cache,
                    offsets: Offsets, aware: bool = False) -> Float[torch.Tensor, "batch pos d_model"]:
    """The target on the attention's own output (before a post-norm): t through the post-norm."""
    t_o, off = site_back(model, model.norm_sites(layer)["attn_post"], t, cache, aware)
    offsets["attn_norm_bias"] += off.double()
    return t_o


def attn_in_back(model: HookedModel, layer: int, g_n: Float[torch.Tensor, "*batch pos d_model"], cache: Cache,
                 offsets: Offsets | None, aware: bool = False) -> Float[torch.Tensor, "*batch pos d_model"]:
    """From the target on the attention's (normed) input to the residual stream: the pre-norm (its scale
    frozen, or carried with ``aware``). ``offsets`` None: the caller keeps no bias terms (the edge scorer's
    per-receiver targets)."""
    g_x, off = site_back(model, model.norm_sites(layer)["attn_pre"], g_n, cache, aware)
    if offsets is not None:
        offsets["attn_norm_bias"] += off.double()
    return g_x


def qk_delta(model: HookedModel, layer: int, A: Float[torch.Tensor, "batch head query key"],
             edge: Float[torch.Tensor, "batch head query key"], mz: Float[torch.Tensor, "batch head query"],
             cache: Cache) -> Float[torch.Tensor, "batch head query key"]:
    """d(m_i . z_i) / d(q_i . k_j): A_ij (m_i.v_j - m_i.z_i) / attn_scale, times the soft-cap's local slope
    1 - tanh^2 where scores are capped. edge: A_ij (m_i . v_j) [batch, head, query, key]; mz [batch, head,
    query]."""
    delta = (edge - A * mz[..., None]) / model.attn_scale(layer)
    cap = model.arch.attn_softcap
    if cap:
        s = cache[f"blocks.{layer}.attn.hook_attn_scores"]  # capped; masked entries are -inf (A is 0 there)
        slope = torch.where(torch.isfinite(s), 1.0 - (s / cap) ** 2, torch.zeros_like(s))
        delta = delta * slope
    return delta


def qk_back(model: HookedModel, layer: int, g: Float[torch.Tensor, "batch head pos d_head"], role: str,
            cache: Cache, repeat: int = 1) -> Float[torch.Tensor, "batch head pos d_head"]:
    """From the target on the rotated (and normed) q or k [batch, head, pos, d_head] to the target on the
    projection W x + b: the inverse rotation, then the frozen q/k norm (per head or over the projection).
    ``repeat``: g holds each kv head's keys repeated for its query heads (the norm's kv-head scales are
    repeated to match)."""
    seq = g.shape[2]
    tables = rope_tables(model, layer, seq)
    if tables is not None:
        g = rope_transpose(g, tables)
    sites = model.qk_norm_sites(layer)
    if sites is None:
        return g
    site = sites[0] if role == "q" else sites[1]
    heads, d_head = g.shape[1], g.shape[3]
    scale = cache[site.scale_hook]
    if model.arch.qk_norm == "head":  # [batch * pos * head, 1]
        # -1: the cache may hold one prompt for a batch of targets (the pull-back's), broadcast over it
        scale = scale.view(-1, seq, heads // repeat, 1).transpose(1, 2).repeat_interleave(repeat, 1)
        w = site.w.float()
    else:  # the whole projection: [batch, pos, 1], gamma over head * d_head
        scale = scale[:, None]
        w = site.w.float().view(heads // repeat, 1, d_head).repeat_interleave(repeat, 0)
    return g * w / scale


def undo_attention(model: HookedModel, layer: int, w: dict[str, Any], t: Float[torch.Tensor, "batch pos d_model"],
                   cache: Cache, p: DPAParams, out: Scores, offsets: Offsets,
                   per_head: bool = False) -> Float[torch.Tensor, "*receiver batch pos d_model"]:
    """Update to t from layer l's attention: value path (pattern frozen) and query/key paths; writes the
    head and query-key scores into ``out`` where asked ("head", "qk").

    Returns the update [batch, pos, d_model], or with ``per_head`` its terms one per receiver input,
    [head x 3 (q, k, v), batch, pos, d_model] (the edge scorer's receivers; they sum to the update, and
    the q/k/v biases, which no edge carries, are left out of ``offsets``).

    Grouped-query attention without repeating kv heads: the R query heads of kv group g are stacked
    along positions ([batch, G, R*pos, d_head]), so one matmul per group covers all of them and sums
    their gradients into the shared k and v (``per_head`` keeps each query head's k and v apart).
    """
    b = f"blocks.{layer}.attn."
    n_batch, seq, d_model = t.shape
    t = attn_out_target(model, layer, t, cache, offsets, p.norm_aware)
    W_O = w["W_O"]  # [head, d_head, d_model]
    H, d_head = W_O.shape[0], W_O.shape[1]
    G = w["W_V"].shape[0]
    A = cache[b + "hook_pattern"]  # [batch, head, query, key]
    v = by_head(cache[b + "hook_v"])  # [batch, group, key, d_head]
    m = (t @ W_O.reshape(H * d_head, d_model).T).view(n_batch, seq, H, d_head)  # target seen by each z
    m_g = by_head(m).reshape(n_batch, G, -1, d_head)  # [batch, group, R*query, d_head]
    if w["b_O"] is not None:
        offsets["attn_out_bias"] += bsum(t * w["b_O"])
    A_g = A.reshape(n_batch, G, -1, seq)  # [batch, group, R*query, key]
    mz = edge = None  # m_i . z_i per head and query: the head's score, and the q/k paths' baseline
    if "qk" in out or p.uses_qk:
        mv = (m_g @ v.transpose(-1, -2)).view(n_batch, H, seq, seq)  # m_i . v_j
        edge = A * mv
        if "qk" in out:
            out["qk"][:, layer] = edge
        mz = edge.sum(-1)  # z_i = sum_j A_ij v_j, so m_i . z_i = sum_j A_ij (m_i . v_j)
    elif "head" in out:
        mz = (m_g * (A_g @ v)).sum(-1).view(n_batch, H, seq)
    if "head" in out:
        out["head"][:, layer] = mz
    # value path: t_j += w_v r_j (W_V gamma)^T sum_i A_ij m_i
    if per_head:
        gv = p.w_v * (A.transpose(-1, -2) @ by_head(m))  # [batch, head, key, d_head]
    else:
        gv = p.w_v * (A_g.transpose(-1, -2) @ m_g)  # [batch, group, key, d_head]
    gq, gk = qk_targets(model, layer, A, edge, mz, cache, p, per_head) if p.uses_qk else (None, None)
    if per_head:
        return attn_in_back(model, layer, _per_receiver(w, gq, gk, gv), cache, None, p.norm_aware)
    g_n = from_heads(gv, w["W_V"])
    if w["b_V"] is not None:
        offsets["attn_value_bias"] += bsum(gv * w["b_V"][:, None, :])
    if p.uses_qk:
        g_n = g_n + _qk_inputs(w, gq, gk, offsets)
    return attn_in_back(model, layer, g_n, cache, offsets, p.norm_aware)


def qk_targets(model: HookedModel, layer: int, A: Float[torch.Tensor, "batch head query key"],
               edge: Float[torch.Tensor, "batch head query key"], mz: Float[torch.Tensor, "batch head query"],
               cache: Cache, p: DPAParams, per_head: bool = False
               ) -> tuple[Float[torch.Tensor, "batch head pos d_head"] | None,
                          Float[torch.Tensor, "batch kv_head pos d_head"] | None]:
    """The control paths: delta_ij = d(m_i.z_i)/d score_ij (``qk_delta``) sent to q_i and k_j, each through
    the inverse rotation and q/k norm (``qk_back``). Returns the targets on the q projection [batch, head,
    pos, d_head] and on the k projection [batch, group, pos, d_head] (kv groups summed; [batch, head, pos,
    d_head] with ``per_head``); None for a path whose weight is 0."""
    b = f"blocks.{layer}.attn."
    n_batch, H, seq = A.shape[0], A.shape[1], A.shape[-1]
    rotary = model.arch.positional == "rope"
    delta = qk_delta(model, layer, A, edge, mz, cache)  # [batch, head, query, key]
    k = by_head(cache[b + ("hook_rot_k" if rotary else "hook_k")])  # [batch, group, key, d_head]
    G, d_head = k.shape[1], k.shape[-1]
    delta_g = delta.reshape(n_batch, G, -1, seq)  # [batch, group, R*query, key]
    gq = gk = None
    if p.w_q:
        gq = (p.w_q * (delta_g @ k)).view(n_batch, H, seq, d_head)  # on the rotated q
        gq = qk_back(model, layer, gq, "q", cache)
    if p.w_k:
        q = by_head(cache[b + ("hook_rot_q" if rotary else "hook_q")])  # [batch, head, query, d_head]
        if per_head:
            gk = qk_back(model, layer, p.w_k * (delta.transpose(-1, -2) @ q), "k", cache, repeat=H // G)
        else:
            gk = p.w_k * (delta_g.transpose(-1, -2) @ q.reshape(n_batch, G, -1, d_head))  # on the rotated k
            gk = qk_back(model, layer, gk, "k", cache)
    return gq, gk


def _qk_inputs(w: dict[str, Any], gq: Float[torch.Tensor, "batch head pos d_head"] | None,
               gk: Float[torch.Tensor, "batch kv_head pos d_head"] | None,
               offsets: Offsets) -> Float[torch.Tensor, "batch pos d_model"]:
    """The q and k targets through W_Q / W_K, summed over heads, with their biases' terms."""
    g_n = gq.new_zeros(()) if gq is not None else gk.new_zeros(())  # type: ignore[union-attr]
    for g, W, bias in ((gq, w["W_Q"], w["b_Q"]), (gk, w["W_K"], w["b_K"])):
        if g is not None:
            g_n = g_n + from_heads(g, W)
            if bias is not None:
                offsets["attn_qk_bias"] += bsum(g * bias[:, None, :])
    return g_n


def _per_receiver(w: dict[str, Any], gq: Float[torch.Tensor, "batch head pos d_head"] | None,
                  gk: Float[torch.Tensor, "batch head pos d_head"] | None,
                  gv: Float[torch.Tensor, "batch head pos d_head"]
                  ) -> Float[torch.Tensor, "receiver batch pos d_model"]:
    """Each head's q, k, v targets through its own projection: [head x 3, batch, pos, d_model], as one
    batched product over (head, role)."""
    n, H, seq, d_head = gv.shape
    rep = H // w["W_V"].shape[0]  # query heads per kv head (TL repeats kv heads with repeat_interleave)
    d_model = w["W_V"].shape[1]
    zero = gv.new_zeros(gv.shape)
    g = torch.stack([zero if gq is None else gq, zero if gk is None else gk, gv])  # [3, batch, head, pos, d_head]
    W = torch.stack([w["W_Q"], w["W_K"].repeat_interleave(rep, 0), w["W_V"].repeat_interleave(rep, 0)], 1)
    g = g.permute(2, 0, 1, 3, 4).reshape(H * 3, n * seq, d_head)
    return torch.bmm(g, W.reshape(H * 3, d_model, d_head).transpose(1, 2)).view(H * 3, n, seq, d_model)


# -- the top-down loop ---------------------------------------------------------------------------
Point = tuple[int, str]  # a residual point: (l, "post") above layer l's MLP, (l, "mid") above its attention;
# (-1, "post") is the embeddings


def rank(point: Point) -> int:
    """Order of residual points from the bottom: embed < mid 0 < post 0 < mid 1 < ..."""
    layer, where = point
    return 2 * layer + (1 if where == "post" else 0)


@dataclass(frozen=True)
class At:
    """The top-down pass reached a residual point; ``t`` is the target vector there [batch, pos, d_model]."""

    point: Point
    t: Float[torch.Tensor, "batch pos d_model"]


@dataclass(frozen=True)
class Update:
    """A sublayer's update to t, just computed: ``sublayer`` "mlp" ([batch, pos, d_model]) or "attn"
    ([batch, pos, d_model], or per receiver [head x 3, batch, pos, d_model] with ``per_head``)."""

    layer: int
    sublayer: str
    update: Float[torch.Tensor, "*receiver batch pos d_model"]


def without_grad(steps: Iterator[Any]) -> Iterator[Any]:
    """``steps`` with each step computed under no_grad, and nothing yielded inside no_grad: grad mode is per
    thread, not per generator, so a generator suspended inside ``no_grad`` leaks it to its caller, and two
    interleaved ones (dpa_cf's clean and counterfactual passes) exit out of order and leave grad off."""
    while True:
        with torch.no_grad():
            item = next(steps, StopIteration)
        if item is StopIteration:
            return
        yield item


def top_down(model: HookedModel, cache: Cache, t: Float[torch.Tensor, "batch pos d_model"], p: DPAParams,
             start: Point | None = None, lowest: Point = (-1, "post"), frozen_mlps: Container[int] = (),
             out: Scores | None = None, offsets: Offsets | None = None,
             per_head: bool = False) -> Iterator[At | Update]:
    """DPA's top-down pass, the one loop every caller walks: carry ``t`` (placed at ``start``, by default
    above the last layer) down to ``lowest``, yielding ``At`` at each residual point (both ends included)
    and ``Update`` after each sublayer's update. Per layer: the MLP (``undo_mlp``), then the attention
    (``undo_attention``); a parallel block (GPT-NeoX) feeds both the target from above and has no mid point.

    What a caller collects is its own: the engine's scores go into ``out`` ("head", "qk", "neuron"), the
    pull-back reads the ``At`` targets, the edge scorer the ``Update`` terms (``per_head``: the attention's
    per receiver). ``offsets`` gathers the bias and norm-offset terms (OFFSET_KEYS). ``frozen_mlps`` is read
    lazily: a caller that adds layer l to it on seeing ``At((l, "post"))`` holds MLP l fixed from then on.
    Stop iterating to cut the pass. Runs under no_grad only if the caller's does.
    """
    out = {} if out is None else out
    if offsets is None:
        offsets = {k: torch.zeros(t.shape[0], dtype=torch.float64, device=t.device) for k in OFFSET_KEYS}
    layer, where = start if start is not None else (model.arch.n_layers - 1, "post")
    w, w_layer = {}, None
    while rank((layer, where)) >= rank(lowest):
        yield At((layer, where), t)
        if layer < 0:
            return
        if w_layer != layer:  # once per layer: the mid point reuses them
            w, w_layer = layer_weights(model, layer), layer
        has_mlp = layer not in frozen_mlps and f"blocks.{layer}.mlp.hook_pre" in cache
        if where == "post" and has_mlp:
            mlp = undo_mlp(model, layer, w, t, cache, p, out, offsets)
            yield Update(layer, "mlp", mlp)
            if not model.arch.parallel:
                t = t + mlp
        if where == "post" and not model.arch.parallel:
            where = "mid"
            continue
        attn = undo_attention(model, layer, w, t, cache, p, out, offsets, per_head)
        yield Update(layer, "attn", attn)
        update = attn.sum(0) if per_head else attn
        if where == "post" and has_mlp:  # parallel: both sublayers read the target from above
            update = update + mlp
        t, layer, where = t + update, layer - 1, "post"
