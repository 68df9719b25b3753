"""The toy models (their tasks: core.models.toy_tasks; their checkpoints: core.models.toy_checkpoint): a
``ModelSpec`` (task, FFN variant, sizes) -> TransformerLens HookedTransformer, wrapped as a HookedModel by ``hooked``.

FFN variants: ``none`` (attention-only), ``dense`` (ReLU/GELU), ``glu`` (SwiGLU), ``moe``
(top-k routed dense experts) and ``moe-glu``; ``router`` is ``learned`` or ``frozen`` (random,
never trained). ``qk_norm`` adds RMSNorm on queries and keys. Regression tasks (vector inputs)
get a linear read-in in place of the token embedding and one output unit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.errors import WorkbenchError
from core.models.tokens import SymbolTokenizer

FFNS = ("none", "dense", "glu", "moe", "moe-glu")
NORMS = {"none": None, "LN": "LN", "RMS": "RMS"}


class ConfigError(WorkbenchError):
    """An impossible model configuration (e.g. heads that do not divide d_model)."""


@dataclass
class ModelSpec:
    task: str
    ffn: str = "dense"
    layers: int = 1
    heads: int = 2
    d_model: int = 64
    d_mlp: int | None = None  # per expert for MoE; default 4 d_model (dense), 8/3 d_model (GLU)
    norm: str = "none"
    act_fn: str = "relu"
    experts: int = 4
    top_k: int = 1
    router: str = "learned"
    qk_norm: bool = False
    init_range: float | None = None  # std of the weight init (TransformerLens default 0.8/sqrt(d_model))
    task_params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSpec:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def mlp_kind(self) -> str:
        return {"dense": self.act_fn, "glu": "swiglu"}.get(self.ffn, self.ffn)

    def resolved_d_mlp(self) -> int:
        if self.d_mlp:
            return self.d_mlp
        base = 4 * self.d_model if self.ffn in ("dense", "moe") else (8 * self.d_model) // 3
        return base // self.experts if self.ffn.startswith("moe") else base


def check_spec(spec: ModelSpec) -> None:
    """Refuse impossible configurations with a one-line reason."""
    if spec.ffn not in FFNS:
        raise ConfigError(f"unknown ffn {spec.ffn!r}; choose one of {', '.join(FFNS)}")
    if spec.norm not in NORMS:
        raise ConfigError(f"unknown norm {spec.norm!r}; choose none, LN or RMS")
    if spec.layers < 1 or spec.heads < 1 or spec.d_model < 1:
        raise ConfigError("layers, heads and d_model must be positive")
    if spec.d_model % spec.heads:
        raise ConfigError(f"heads ({spec.heads}) must divide d_model ({spec.d_model})")
    if spec.act_fn not in ("relu", "gelu", "silu"):
        raise ConfigError(f"unknown act_fn {spec.act_fn!r}; relu, gelu or silu")
    if spec.ffn.startswith("moe"):
        if spec.experts < 2:
            raise ConfigError("an MoE needs at least 2 experts")
        if not 1 <= spec.top_k <= spec.experts:
            raise ConfigError(f"top_k ({spec.top_k}) must be between 1 and experts ({spec.experts})")
        if spec.router not in ("learned", "frozen"):
            raise ConfigError(f"router must be learned or frozen, not {spec.router!r}")
    if spec.d_mlp is not None and spec.d_mlp < 1:
        raise ConfigError("d_mlp must be positive")


def build_model(spec: ModelSpec, task: Any, seed: int = 0):
    """A freshly initialised HookedTransformer for ``task`` (from core.models.toy_tasks.get_task)."""

    import torch
    from transformer_lens.config import HookedTransformerConfig

    from core.models.hooked import hooked_transformer

    check_spec(spec)
    regression = task.kind == "regression"
    d_vocab = (task.d_in + 1) if regression else len(task.vocab)
    glu = spec.ffn in ("glu", "moe-glu")
    act = "silu" if glu else spec.act_fn  # GLU variants are SwiGLU
    cfg = HookedTransformerConfig(
        n_layers=spec.layers,
        d_model=spec.d_model,
        n_heads=spec.heads,
        d_head=spec.d_model // spec.heads,
        d_mlp=spec.resolved_d_mlp() if spec.ffn != "none" else None,
        n_ctx=task.n_ctx,
        d_vocab=d_vocab,
        d_vocab_out=1 if regression else d_vocab,
        act_fn=act,
        attn_only=spec.ffn == "none",
        gated_mlp=spec.ffn == "glu",
        normalization_type=NORMS[spec.norm],
        use_qk_norm=spec.qk_norm,
        positional_embedding_type="standard",
        seed=seed,
        default_prepend_bos=False,
        device="cpu",
        init_mode="gpt2",
        initializer_range=spec.init_range or -1.0,
    )
    torch.manual_seed(seed)
    model = hooked_transformer(cfg, move_to_device=False)
    if spec.ffn.startswith("moe"):
        from core.models.moe import MoEMLP

        for block in model.blocks:
            block.mlp = MoEMLP(
                spec.d_model,
                cfg.d_mlp,
                spec.experts,
                spec.top_k,
                act,
                glu,
                frozen_router=spec.router == "frozen",
            )
    if regression:
        from core.models.vector_embed import VectorEmbed, VectorPosEmbed

        model.embed = VectorEmbed(d_vocab, spec.d_model)
        model.pos_embed = VectorPosEmbed(task.n_ctx, spec.d_model)
    model.setup()  # register the new modules' HookPoints under their names
    return model


def hooked(tl: Any, spec: ModelSpec, task: Any, name: str = "toy"):
    """Wrap a built model as a workbench HookedModel (what the zoo loader returns). ``info["task_source"]`` is the
    task object itself: engines below circuits/ (SAE caching, the ICL read-out) draw the model's own inputs from it
    (``.batch(split, n, seed)``, ``.sample(n, seed, split)``) without importing the zoo."""
    from core.models.hooked import HookedModel

    return HookedModel(
        tl,
        SymbolTokenizer(task.vocab),
        name=name,
        kind="toy",
        backend="transformer_lens",
        prepend_bos=False,
        arch=arch_for(spec, tl.cfg),
        info={"task": task.info(), "spec": spec.to_dict(), "task_source": task},
    )


def arch_for(spec: ModelSpec, cfg: Any):
    from core.models.hooked import arch_from_cfg

    return arch_from_cfg(cfg, mlp=spec.mlp_kind())
