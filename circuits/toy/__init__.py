"""The toy zoo: small transformers trained here on tasks with known solutions.

- in the ground, since a toy model is defined by its task: the tasks (``core.models.toy_tasks``: seeded
  generators with train/test splits: IOI, modular addition, carry addition, histogram counting, high-order Markov
  chains, in-context regression), the toy models themselves (``core.models.toy``: TransformerLens
  ``HookedTransformer`` builders for the FFN variants: none, dense, GLU, MoE top-1/top-2 with learned or
  frozen-random router, MoE-GLU; the MoE layer in ``core.models.moe``, the vector embeddings in
  ``core.models.vector_embed``) and their checkpoints (``core.models.toy_checkpoint``: the shipped ones in
  ``data/models/<name>/``, saved and loaded as ``core.models.hooked.HookedModel`` through the zoo).
- ``circuits.toy.train``: training.
- ``circuits.toy.prompts``: prompt rows with counterfactuals from a toy model's own task (circuit discovery).
- ``circuits.toy.findings``: the seed papers' findings measured on the shipped checkpoints.
"""
