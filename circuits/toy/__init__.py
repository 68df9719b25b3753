"""The toy zoo: small transformers trained here on tasks with known solutions.

- ``circuits.toy.tasks``: seeded generators with train/test splits (IOI, modular addition, carry
  addition, histogram counting, high-order Markov chains, in-context regression).
- the toy models themselves (TransformerLens ``HookedTransformer`` builders for the FFN variants: none, dense,
  GLU, MoE top-1/top-2 with learned or frozen-random router, MoE-GLU) are in the ground: ``core.models.toy``,
  with the MoE layer in ``core.models.moe`` and the vector embeddings in ``core.models.vector_embed``.
- ``circuits.toy.train`` / ``circuits.toy.checkpoints``: training and the shipped checkpoints in
  ``data/models/<name>/`` (loaded as ``core.models.hooked.HookedModel`` through the zoo).
- ``circuits.toy.prompts``: prompt rows with counterfactuals from a toy model's own task (circuit discovery).
- ``circuits.toy.findings``: the seed papers' findings measured on the shipped checkpoints.
"""
