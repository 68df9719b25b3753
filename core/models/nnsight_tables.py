"""The nnsight backend's tables: which module value each TransformerLens hook name reads, per layout, and what
each engine needs of a backend (core/models/remote.py reads them)."""

from __future__ import annotations

import re

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
# hooks outside the blocks: (module path from the root, part, layer slot: -1 before block 0, None after the last)
GLOBAL_HOOKS = {
    "gpt2": {"hook_embed": ("transformer.wte", "output", -1), "hook_pos_embed": ("transformer.wpe", "output", -1)},
    "llama": {"hook_embed": ("model.embed_tokens", "output", -1)},
    "llama+": {"hook_embed": ("model.embed_tokens", "output", -1),
               "ln_final.hook_scale": ("model.norm", "input", None),
               "ln_final.hook_normalized": ("model.norm", "input", None)},
}
READ_ONLY = {"output1", "scale", "normalized", "rot_q", "rot_kv"}  # derived: a hook reads them, cannot change them
LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2"})  # model.layers blocks with no q/k norms, post-norms or caps
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
                 f"which the nnsight backend gives for Llama-style models ({', '.join(sorted(LLAMA_LIKE))}) only",
    "local_backward": "a backward pass after the trace through the circuit's own gradient hooks (autograd across "
                      "the trace), which a remote trace cannot return; run circuits on a local model",
}
# engines whose gradients are taken by a backward after the trace (PyTorch autograd on the trace's tensors), not
# inside it: local models only
LOCAL_BACKWARD = frozenset({"circuit"})
