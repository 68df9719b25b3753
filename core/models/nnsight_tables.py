"""The nnsight backend's tables: which module value each TransformerLens hook name reads, per layout, and what
each engine needs of a backend (core/models/remote.py reads them)."""

from __future__ import annotations

import re
from typing import Any

# hook -> (module path relative to a block, "input" / "output" / "output0" / "output1", execution order of that
# module value inside the block, how the hook's tensor follows from it). One module value is read once per
# trace (nnsight 0.8 reads modules in execution order); several hooks may derive from it.
GPT2_HOOKS = {
    "hook_resid_pre": ("", "input", 0, None),
    "attn.hook_pattern": ("attn", "output1", 1, None),
    "hook_attn_out": ("attn", "output0", 1, None),
    "mlp.hook_post": ("mlp.c_proj", "input", 2, None),
    "hook_mlp_out": ("mlp", "output", 3, None),
    "hook_resid_post": ("", "output", 4, None),
}
LLAMA_BASIC = {
    "hook_resid_pre": ("", "input", 0, None),
    "attn.hook_pattern": ("self_attn", "output1", 5, None),
    "hook_attn_out": ("self_attn", "output0", 5, None),
    "mlp.hook_post": ("mlp.down_proj", "input", 9, None),
    "hook_mlp_out": ("mlp", "output", 10, None),
    "hook_resid_post": ("", "output", 11, None),
}
# families whose sublayer outputs pass a post-norm before the residual adds them (TransformerLens' hook_attn_out and
# hook_mlp_out are the post-norms' outputs): their hook-only table reads those
POST_NORMED = frozenset({"gemma2", "gemma3_text", "olmo2", "olmo3"})
POST_BASIC = {
    **LLAMA_BASIC,
    "hook_attn_out": ("post_attention_layernorm", "output", 6, None),
    "hook_mlp_out": ("post_feedforward_layernorm", "output", 10, None),
}
# Llama-style blocks without q/k norms: the rest of TransformerLens' hooks, derived from module values
LLAMA_HOOKS = {
    **LLAMA_BASIC,
    "ln1.hook_scale": ("", "input", 0, "scale"),
    "ln1.hook_normalized": ("", "input", 0, "normalized"),
    "attn.hook_q": ("self_attn.q_proj", "output", 1, "q"),
    "attn.hook_rot_q": ("self_attn.q_proj", "output", 1, "rot_q"),
    "attn.hook_k": ("self_attn.k_proj", "output", 2, "kv"),
    "attn.hook_rot_k": ("self_attn.k_proj", "output", 2, "rot_kv"),
    "attn.hook_v": ("self_attn.v_proj", "output", 3, "kv"),
    "attn.hook_z": ("self_attn.o_proj", "input", 4, "q"),
    "hook_resid_mid": ("post_attention_layernorm", "input", 6, None),
    "ln2.hook_scale": ("post_attention_layernorm", "input", 6, "scale"),
    "ln2.hook_normalized": ("post_attention_layernorm", "input", 6, "normalized"),
    "mlp.hook_pre": ("mlp.gate_proj", "output", 7, None),
    "mlp.hook_pre_linear": ("mlp.up_proj", "output", 8, None),
}
# Gemma 3 blocks (q/k norms, post-norms around both sublayers, a scaled embedding; no soft caps): TransformerLens'
# hook_attn_out and hook_mlp_out are the post-norms' outputs (what the residual adds), hook_q/k the projections before
# the q/k norms, hook_rot_q/k the normed and rotated ones (HF's q/k norm outputs, [batch, head, pos, d_head])
GEMMA3_HOOKS = {
    "hook_resid_pre": ("", "input", 0, None),
    "ln1.hook_scale": ("", "input", 0, "scale"),
    "ln1.hook_normalized": ("", "input", 0, "normalized"),
    "attn.hook_q": ("self_attn.q_proj", "output", 1, "q"),
    "attn.q_norm.hook_scale": ("self_attn.q_proj", "output", 1, "q_scale"),
    "attn.hook_k": ("self_attn.k_proj", "output", 2, "kv"),
    "attn.k_norm.hook_scale": ("self_attn.k_proj", "output", 2, "kv_scale"),
    "attn.hook_v": ("self_attn.v_proj", "output", 3, "kv"),
    "attn.hook_rot_q": ("self_attn.q_norm", "output", 4, "rot_q_t"),
    "attn.hook_rot_k": ("self_attn.k_norm", "output", 5, "rot_kv_t"),
    "attn.hook_z": ("self_attn.o_proj", "input", 6, "q"),
    "attn.hook_pattern": ("self_attn", "output1", 7, None),
    "ln1_post.hook_scale": ("post_attention_layernorm", "input", 8, "scale"),
    "ln1_post.hook_normalized": ("post_attention_layernorm", "input", 8, "normalized"),
    "hook_attn_out": ("post_attention_layernorm", "output", 9, None),
    "hook_resid_mid": ("pre_feedforward_layernorm", "input", 10, None),
    "ln2.hook_scale": ("pre_feedforward_layernorm", "input", 10, "scale"),
    "ln2.hook_normalized": ("pre_feedforward_layernorm", "input", 10, "normalized"),
    "mlp.hook_pre": ("mlp.gate_proj", "output", 11, None),
    "mlp.hook_pre_linear": ("mlp.up_proj", "output", 12, None),
    "mlp.hook_post": ("mlp.down_proj", "input", 13, None),
    "ln2_post.hook_scale": ("post_feedforward_layernorm", "input", 14, "scale"),
    "ln2_post.hook_normalized": ("post_feedforward_layernorm", "input", 14, "normalized"),
    "hook_mlp_out": ("post_feedforward_layernorm", "output", 15, None),
    "hook_resid_post": ("", "output", 16, None),
}
# Qwen 3 blocks: Llama's, with per-head q/k norms (gain w) applied before the transpose, q then k (HF's order)
QWEN3_HOOKS = {
    "hook_resid_pre": ("", "input", 0, None),
    "ln1.hook_scale": ("", "input", 0, "scale"),
    "ln1.hook_normalized": ("", "input", 0, "normalized"),
    "attn.hook_q": ("self_attn.q_proj", "output", 1, "q"),
    "attn.q_norm.hook_scale": ("self_attn.q_proj", "output", 1, "q_scale"),
    "attn.hook_rot_q": ("self_attn.q_norm", "output", 2, "rot_q_n"),
    "attn.hook_k": ("self_attn.k_proj", "output", 3, "kv"),
    "attn.k_norm.hook_scale": ("self_attn.k_proj", "output", 3, "kv_scale"),
    "attn.hook_rot_k": ("self_attn.k_norm", "output", 4, "rot_kv_n"),
    "attn.hook_v": ("self_attn.v_proj", "output", 5, "kv"),
    "attn.hook_z": ("self_attn.o_proj", "input", 6, "q"),
    "attn.hook_pattern": ("self_attn", "output1", 7, None),
    "hook_attn_out": ("self_attn", "output0", 7, None),
    "hook_resid_mid": ("post_attention_layernorm", "input", 8, None),
    "ln2.hook_scale": ("post_attention_layernorm", "input", 8, "scale"),
    "ln2.hook_normalized": ("post_attention_layernorm", "input", 8, "normalized"),
    "mlp.hook_pre": ("mlp.gate_proj", "output", 9, None),
    "mlp.hook_pre_linear": ("mlp.up_proj", "output", 10, None),
    "mlp.hook_post": ("mlp.down_proj", "input", 11, None),
    "hook_mlp_out": ("mlp", "output", 12, None),
    "hook_resid_post": ("", "output", 13, None),
}
# Gemma 2 blocks: Gemma 3's without q/k norms, with a soft cap on the attention scores (TransformerLens'
# hook_attn_scores: capped, masked entries -inf, computed from the rotated q and k as the pattern's module reads them)
GEMMA2_HOOKS = {
    "hook_resid_pre": ("", "input", 0, None),
    "ln1.hook_scale": ("", "input", 0, "scale"),
    "ln1.hook_normalized": ("", "input", 0, "normalized"),
    "attn.hook_q": ("self_attn.q_proj", "output", 1, "q"),
    "attn.hook_rot_q": ("self_attn.q_proj", "output", 1, "rot_q"),
    "attn.hook_k": ("self_attn.k_proj", "output", 2, "kv"),
    "attn.hook_rot_k": ("self_attn.k_proj", "output", 2, "rot_kv"),
    "attn.hook_v": ("self_attn.v_proj", "output", 3, "kv"),
    "attn.hook_z": ("self_attn.o_proj", "input", 4, "q"),
    "attn.hook_attn_scores": ("self_attn", "output1", 5, "scores"),
    "attn.hook_pattern": ("self_attn", "output1", 5, None),
    "ln1_post.hook_scale": ("post_attention_layernorm", "input", 6, "scale"),
    "ln1_post.hook_normalized": ("post_attention_layernorm", "input", 6, "normalized"),
    "hook_attn_out": ("post_attention_layernorm", "output", 7, None),
    "hook_resid_mid": ("pre_feedforward_layernorm", "input", 8, None),
    "ln2.hook_scale": ("pre_feedforward_layernorm", "input", 8, "scale"),
    "ln2.hook_normalized": ("pre_feedforward_layernorm", "input", 8, "normalized"),
    "mlp.hook_pre": ("mlp.gate_proj", "output", 9, None),
    "mlp.hook_pre_linear": ("mlp.up_proj", "output", 10, None),
    "mlp.hook_post": ("mlp.down_proj", "input", 11, None),
    "ln2_post.hook_scale": ("post_feedforward_layernorm", "input", 12, "scale"),
    "ln2_post.hook_normalized": ("post_feedforward_layernorm", "input", 12, "normalized"),
    "hook_mlp_out": ("post_feedforward_layernorm", "output", 13, None),
    "hook_resid_post": ("", "output", 14, None),
}
# OLMo-2 blocks: no norm before either sublayer, one after each (TransformerLens' ln1 and ln2, its hook_attn_out and
# hook_mlp_out their outputs); q/k RMSNorms over the whole projection before the head split (their scales [batch,
# pos, 1]), the MLP reading the residual itself (hook_resid_mid, hook_mlp_in: its input)
OLMO2_HOOKS = {
    "hook_resid_pre": ("", "input", 0, None),
    "attn.hook_q": ("self_attn.q_proj", "output", 1, "q"),
    "attn.q_norm.hook_scale": ("self_attn.q_proj", "output", 1, "scale"),
    "attn.q_norm.hook_normalized": ("self_attn.q_proj", "output", 1, "normalized"),
    "attn.hook_rot_q": ("self_attn.q_norm", "output", 2, "rot_q"),
    "attn.hook_k": ("self_attn.k_proj", "output", 3, "kv"),
    "attn.k_norm.hook_scale": ("self_attn.k_proj", "output", 3, "scale"),
    "attn.k_norm.hook_normalized": ("self_attn.k_proj", "output", 3, "normalized"),
    "attn.hook_rot_k": ("self_attn.k_norm", "output", 4, "rot_kv"),
    "attn.hook_v": ("self_attn.v_proj", "output", 5, "kv"),
    "attn.hook_z": ("self_attn.o_proj", "input", 6, "q"),
    "attn.hook_attn_scores": ("self_attn", "output1", 7, "scores"),
    "attn.hook_pattern": ("self_attn", "output1", 7, None),
    "ln1.hook_scale": ("post_attention_layernorm", "input", 8, "scale"),
    "ln1.hook_normalized": ("post_attention_layernorm", "input", 8, "normalized"),
    "hook_attn_out": ("post_attention_layernorm", "output", 9, None),
    "hook_resid_mid": ("mlp", "input", 10, None),
    "mlp.hook_pre": ("mlp.gate_proj", "output", 11, None),
    "mlp.hook_pre_linear": ("mlp.up_proj", "output", 12, None),
    "mlp.hook_post": ("mlp.down_proj", "input", 13, None),
    "ln2.hook_scale": ("post_feedforward_layernorm", "input", 14, "scale"),
    "ln2.hook_normalized": ("post_feedforward_layernorm", "input", 14, "normalized"),
    "hook_mlp_out": ("post_feedforward_layernorm", "output", 15, None),
    "hook_resid_post": ("", "output", 16, None),
}
# Phi-3 blocks: Llama's with fused projections, TransformerLens' q/k/v and MLP gate/in parts of one module value each
# (slices of it: views, so a hook changing them changes the forward; ``fused_part``)
PHI3_HOOKS = {
    "hook_resid_pre": ("", "input", 0, None),
    "ln1.hook_scale": ("", "input", 0, "scale"),
    "ln1.hook_normalized": ("", "input", 0, "normalized"),
    "attn.hook_q": ("self_attn.qkv_proj", "output", 1, "fq"),
    "attn.hook_k": ("self_attn.qkv_proj", "output", 1, "fk"),
    "attn.hook_v": ("self_attn.qkv_proj", "output", 1, "fv"),
    "attn.hook_rot_q": ("self_attn.qkv_proj", "output", 1, "rot_fq"),
    "attn.hook_rot_k": ("self_attn.qkv_proj", "output", 1, "rot_fk"),
    "attn.hook_z": ("self_attn.o_proj", "input", 2, "q"),
    "attn.hook_attn_scores": ("self_attn", "output1", 3, "scores"),
    "attn.hook_pattern": ("self_attn", "output1", 3, None),
    "hook_attn_out": ("self_attn", "output0", 3, None),
    "hook_resid_mid": ("post_attention_layernorm", "input", 4, None),
    "ln2.hook_scale": ("post_attention_layernorm", "input", 4, "scale"),
    "ln2.hook_normalized": ("post_attention_layernorm", "input", 4, "normalized"),
    "mlp.hook_pre": ("mlp.gate_up_proj", "output", 5, "gate"),
    "mlp.hook_pre_linear": ("mlp.gate_up_proj", "output", 5, "up"),
    "mlp.hook_post": ("mlp.down_proj", "input", 6, None),
    "hook_mlp_out": ("mlp", "output", 7, None),
    "hook_resid_post": ("", "output", 8, None),
}
FUSED = frozenset({"fq", "fk", "fv", "rot_fq", "rot_fk", "gate", "up"})


def fused_part(value: Any, part: str, arch: Any) -> Any:
    """One part of a fused projection's output (a view of it): Phi-3's qkv_proj gives q, then k, then v
    ([..., head, d_head] each), its gate_up_proj the gate, then the up projection (TransformerLens' hook_pre and
    hook_pre_linear)."""
    if part in ("gate", "up"):
        half = value.shape[-1] // 2
        return value[..., :half] if part == "gate" else value[..., half:]
    q_end = arch.n_heads * arch.d_head
    k_end = q_end + arch.n_kv_heads * arch.d_head
    start, stop, heads = {"q": (0, q_end, arch.n_heads), "k": (q_end, k_end, arch.n_kv_heads),
                          "v": (k_end, value.shape[-1], arch.n_kv_heads)}[part[-1]]
    return value[..., start:stop].view(*value.shape[:-1], heads, arch.d_head)


# the orders of the attention's internals per layout (split inputs replace the module's attention: none of them run)
ATTN_ORDERS = {"llama+": range(1, 6), "gemma3": range(1, 8), "qwen3": range(1, 8), "gemma2": range(1, 6),
               "olmo2": range(1, 8), "phi3": range(1, 4)}
# the module whose input is the MLP's own input (TransformerLens' hook_mlp_in), per layout: (path, order)
MLP_IN = {"llama+": ("post_attention_layernorm", 6), "gemma3": ("pre_feedforward_layernorm", 10),
          "qwen3": ("post_attention_layernorm", 8), "gemma2": ("pre_feedforward_layernorm", 8),
          "olmo2": ("mlp", 10), "phi3": ("post_attention_layernorm", 4)}
# hooks outside the blocks: (module path from the root, part, layer slot: -1 before block 0, None after the last)
GLOBAL_HOOKS = {
    "gpt2": {"hook_embed": ("transformer.wte", "output", -1), "hook_pos_embed": ("transformer.wpe", "output", -1)},
    "llama": {"hook_embed": ("model.embed_tokens", "output", -1)},
    "llama+": {"hook_embed": ("model.embed_tokens", "output", -1),
               "ln_final.hook_scale": ("model.norm", "input", None),
               "ln_final.hook_normalized": ("model.norm", "input", None)},
}
for _layout in ("gemma3", "qwen3", "gemma2", "olmo2", "phi3"):
    GLOBAL_HOOKS[_layout] = GLOBAL_HOOKS["llama+"]
# derived: a hook reads them, cannot change them
READ_ONLY = {"output1", "scale", "normalized", "rot_q", "rot_kv", "q_scale", "kv_scale", "rot_q_t", "rot_kv_t",
             "rot_q_n", "rot_kv_n", "scores", "rot_fq", "rot_fk"}
LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2"})  # model.layers blocks with no q/k norms, post-norms or caps
GEMMA3 = frozenset({"gemma3_text"})  # Gemma 3 text models (gemma3-270m), when they have no soft caps
QWEN3 = frozenset({"qwen3"})  # Llama-style with per-head q/k norms
GEMMA2 = frozenset({"gemma2"})  # Gemma 3's layout without q/k norms, soft caps on attention scores and logits
OLMO2 = frozenset({"olmo2"})  # norms after each sublayer only, q/k norms over the whole projection
PHI3 = frozenset({"phi3"})  # Llama's with fused q/k/v and gate/up projections (full rotary only)


def layout_of(config: Any) -> str:
    """The nnsight backend's layout of a model of this config (a config.json dict or a transformers config): the
    hook table it reads ("gpt2" and "llama": hooks only; the others every internal)."""
    get = config.get if isinstance(config, dict) else (lambda key: getattr(config, key, None))
    kind = get("model_type")
    if kind == "gpt2":
        return "gpt2"
    if kind in LLAMA_LIKE:
        return "llama+"
    if kind in QWEN3:
        return "qwen3"
    if kind in GEMMA2:
        return "gemma2"
    if kind in OLMO2:
        return "olmo2"
    if kind in PHI3 and _full_rotary(get):
        return "phi3"
    if kind in GEMMA3 and not get("attn_logit_softcapping") and not get("final_logit_softcapping"):
        return "gemma3"
    return "llama"


INTERNAL_LAYOUTS = frozenset({"llama+", "qwen3", "gemma2", "gemma3", "olmo2", "phi3"})


def _full_rotary(get: Any) -> bool:
    """Whether RoPE turns every dimension of a head (Phi-3's; Phi-4-mini's partial_rotary_factor 0.75 does not)."""
    factor = get("partial_rotary_factor") or (get("rope_parameters") or {}).get("partial_rotary_factor") or 1.0
    return float(factor) == 1.0


def serves_internals(config: Any) -> bool:
    """Whether the nnsight backend gives every internal (the "internals" engines) for a model of this config (a
    config.json dict or a transformers config): Llama-style, Qwen 3, Gemma 2, OLMo-2, Phi-3 (full rotary), or Gemma 3
    without soft caps."""
    return layout_of(config) in INTERNAL_LAYOUTS


HOOK_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")

# what each engine needs of a backend; NNsightModel.refusal says which of these a model lacks
ENGINE_NEEDS: dict[str, str] = {
    # attribution methods (attribution/methods.py); the gradient family's backward runs inside the trace
    "dpa": "internals", "dpa_path": "internals", "random": "hooks", "gradient": "internals",
    "gradient_norm": "internals", "input_x_gradient": "internals", "integrated_gradients": "internals",
    "attention_last": "hooks", "attention_mean": "hooks", "rollout": "hooks", "atp": "internals",
    "atp_foil": "internals", "ifr": "internals", "dla": "internals",
    "activation_patching": "internals",
    # the other engines
    "lens": "internals", "tuned lens": "internals", "patch (resid, attn, mlp, mlps)": "hooks",
    "patch (heads)": "internals", "path patching": "internals", "circuit": "internals",
    "feature attribution": "internals", "feature graph": "internals", "sae steering": "hooks",
    "probe": "hooks", "concept vectors": "hooks",
}
NEED_WORDS = {
    "internals": "every internal activation (hook_z, q/k/v, norm scales) and the weights, read inside a trace, "
                 f"which the nnsight backend gives for Llama-style models ({', '.join(sorted(LLAMA_LIKE))}), Qwen 3, "
                 "Gemma 2, OLMo-2, Phi-3 (full rotary) and Gemma 3 without soft caps only",
    "local_backward": "a backward pass after the trace through the circuit's own gradient hooks (autograd across "
                      "the trace), which a remote trace cannot return; run circuits on a local model",
}
# engines whose gradients are taken by a backward after the trace (PyTorch autograd on the trace's tensors), not
# inside it: local models only
LOCAL_BACKWARD = frozenset({"circuit"})
