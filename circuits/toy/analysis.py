"""The circuit tools applied to the zoo: ablation scored by a toy task's own metrics, and weight spectra over a
toy checkpoint's training snapshots. They live here, above circuits/tools/ (which works on any hooked model and
knows nothing of the zoo), so the two packages point one way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from circuits.tools.ablation import AblationResult, Component, ablation_hooks, parse
from circuits.tools.spectra import spectra_from_weights
from circuits.toy.train import evaluate
from core.errors import ModelFileError
from core.models.toy_checkpoint import read_config, snapshots

if TYPE_CHECKING:
    from core.models.hooked import HookedModel


def ablate_task(
    model: HookedModel,
    batch: Any,
    task: Any,
    components: list[str | Component] | list[list[str]],
    method: str = "mean",
    reference: Any = None,
    seed: int = 0,
) -> AblationResult:
    """Task metrics (accuracy, loss) with each component (or each group, a list) ablated.
    ``reference`` defaults to the batch itself for mean and resample."""
    ref = batch.tokens if reference is None else reference
    base = evaluate(model, batch, task)
    groups = [c if isinstance(c, list) else [c] for c in components]
    scores = [evaluate(model, batch, task, ablation_hooks(model, g, method, ref, seed)) for g in groups]
    return AblationResult(["+".join(str(parse(x)) for x in g) for g in groups], method, base, scores)


def spectra_over_training(model_or_path: Any, top: int = 8):
    """Spectra at every stored snapshot of a toy checkpoint (a HookedModel or its directory)."""
    from pathlib import Path

    import pandas as pd

    path = Path(model_or_path.info["path"]) if hasattr(model_or_path, "info") else Path(model_or_path)
    snaps = snapshots(path)
    if not snaps:
        raise ModelFileError(f"{path} has no training snapshots (snapshots.safetensors)")
    n_layers = int(read_config(path)["model"]["layers"])
    return pd.concat(
        [spectra_from_weights(w, n_layers, step, top) for step, w in snaps.items()], ignore_index=True
    )
