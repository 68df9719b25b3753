"""Toy-task circuit zoo: tasks with known solutions, small trained models, circuit tools.

- ``circuits.tasks``: seeded generators with train/test splits (IOI, modular addition, carry
  addition, histogram counting, high-order Markov chains, in-context regression).
- ``circuits.models``: TransformerLens ``HookedTransformer`` builders for the FFN variants
  (none, dense, GLU, MoE top-1/top-2 with learned or frozen-random router, MoE-GLU).
- ``circuits.train`` / ``circuits.checkpoints``: training and the shipped checkpoints in
  ``data/models/<name>/`` (loaded as ``workbench.hooked.HookedModel``).
- ``circuits.tools``: patching, ablation, DLA, composition, patterns, spectra, Fourier.
"""
