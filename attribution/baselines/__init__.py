"""LLM attribution baselines behind the method table (attribution.methods).

Each module exposes ``fn(model, enc, level, **params) -> Tensor`` laid out on
``attribution.methods.LEVEL_AXES[level]``. The explained quantity is the target logit, or the
target logit minus the foil logit when the encoding has a foil (the same metric DPA explains).
Shared plumbing (metric, gradients, shapes, batched ablation forwards) lives in ``common``.
"""
