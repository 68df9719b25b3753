"""Architecture facts of a hooked model (ArchInfo) and how they follow from a TransformerLens config.

Kept free of torch and TransformerLens so that ``workbench info`` can state them from a config.json
alone; core.models.hooked re-exports both names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ArchInfo:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    d_mlp: int | None
    d_vocab: int
    n_ctx: int
    norm: str  # rmsnorm | layernorm | none
    mlp: str  # swiglu | gelu | relu | silu | none | moe | moe-glu
    positional: str  # rope | learned | none
    act_fn: str | None
    norm_placement: str = "pre"  # pre (Llama, GPT-2) | pre+post (Gemma 2/3) | post (OLMo-2)
    parallel: bool = False  # attention and MLP both read resid_pre (GPT-NeoX, GPT-J)
    qk_norm: str = "none"  # none | head (Gemma 3, Qwen3: per head) | full (OLMo-2: whole projection)
    attn_softcap: float | None = None  # scores -> cap * tanh(scores / cap) (Gemma 2)
    logit_softcap: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma 2)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arch_from_cfg(cfg: Any, mlp: str | None = None) -> ArchInfo:
    norm = {"RMS": "rmsnorm", "RMSPre": "rmsnorm", "LN": "layernorm", "LNPre": "layernorm"}.get(
        cfg.normalization_type or "", "none")
    if mlp is None:
        if cfg.attn_only:
            mlp = "none"
        elif cfg.gated_mlp:
            mlp = "swiglu" if cfg.act_fn == "silu" else f"glu-{cfg.act_fn}"
        else:
            mlp = (cfg.act_fn or "relu").replace("gelu_new", "gelu").replace("gelu_fast", "gelu")
    pos = {"rotary": "rope", "standard": "learned", "shortformer": "learned"}.get(
        cfg.positional_embedding_type, cfg.positional_embedding_type)
    original = getattr(cfg, "original_architecture", None) or ""
    post_only = original in POST_NORM_FAMILIES
    placement = "post" if post_only else ("pre+post" if getattr(cfg, "use_normalization_before_and_after", False)
                                          else "pre")
    qk = "head" if getattr(cfg, "use_qk_norm", False) else ("full" if post_only else "none")

    def cap(value: Any) -> float | None:
        return float(value) if value is not None and float(value) > 0 else None

    return ArchInfo(
        n_layers=cfg.n_layers, n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_key_value_heads or cfg.n_heads, d_model=cfg.d_model, d_head=cfg.d_head,
        d_mlp=None if cfg.attn_only else cfg.d_mlp, d_vocab=cfg.d_vocab, n_ctx=cfg.n_ctx, norm=norm,
        mlp=mlp, positional=pos, act_fn=cfg.act_fn, norm_placement=placement,
        parallel=bool(getattr(cfg, "parallel_attn_mlp", False)), qk_norm=qk,
        attn_softcap=cap(getattr(cfg, "attn_scores_soft_cap", None)),
        logit_softcap=cap(getattr(cfg, "output_logits_soft_cap", None)),
    )


# Families whose norms sit after each sublayer and none before (TransformerLens' POST_NORM_ARCHITECTURES);
# their q/k norms act on the whole projection rather than per head.
POST_NORM_FAMILIES = frozenset({"Olmo2ForCausalLM", "Olmo3ForCausalLM", "OlmoeForCausalLM"})
