"""How a dictionary is trained: the one set of defaults every entry point starts from (``workbench sae train``,
``workbench sae build-set``, ``build_dictionary``, scripts/build_dictionaries.py, the ``sae_train`` job).

An entry point that trains otherwise says so where it builds its spec, by name (a dictionary set's narrower,
faster-learning transcoders: ``attribution.sae.sets.SetSpec``; the shipped dictionaries' settings:
scripts/build_dictionaries.py), never by a second table of defaults. Plain Python: the CLI reads its option
defaults here without importing torch or SAELens.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

# Width None means "sized from the hook": features per dimension of the activations trained on. Trained in
# memory (toy models, --corpus) a dictionary gets 8 per dimension; from disk shards (LLMs on the English
# corpus) 4 per d_model, the shipped dictionaries' ratio (2304 = 4 x 576 on smollm2-135m).
WIDTH_PER_DIM_IN_MEMORY = 8
WIDTH_PER_DIM_FROM_SHARDS = 4


@dataclass(kw_only=True)
class TrainConfig:
    """One dictionary's training settings, at their defaults."""

    kind: str = "topk"  # topk (residual SAE) | transcoder | ... (each entry point checks the kinds it trains)
    width: int | None = None  # features; None: sized from the hook (see WIDTH_PER_DIM_*)
    k: int = 32  # active features per token (TopK)
    tokens: int = 200_000  # training activations
    batch_size: int = 512  # activations per step
    lr: float = 4e-4
    seed: int = 0
    skip_first: int = 1  # positions left out at the start of each window (the attention sink)

    def width_for(self, d_in: int, per_dim: int = WIDTH_PER_DIM_FROM_SHARDS) -> int:
        """The width to train: the one given, or ``per_dim`` features per input dimension."""
        return self.width or per_dim * int(d_in)

    def training(self) -> dict[str, Any]:
        """The training settings alone (TrainConfig's fields), as keyword arguments for another spec."""
        return {f.name: getattr(self, f.name) for f in fields(TrainConfig)}


TRAIN = TrainConfig()  # the defaults, for option declarations that need a value
