"""What the real-model backend tests share: the IOI pair they run on, the closeness rule (largest difference within
1e-4 of the reference values' own scale, an all-zero result failing) and the engine calls they compare."""

from __future__ import annotations

from typing import Any

import torch

import workbench as wb

CLEAN = "When Mary and John went out, John gave it to"
CORRUPTED = "When Mary and John went out, Mary gave it to"
REL_TOL = 1e-4


def close(got: Any, ref: Any, what: str) -> None:
    """``got`` equals ``ref`` within REL_TOL of ref's largest magnitude; both non-zero, same shape."""
    got, ref = torch.as_tensor(got).float(), torch.as_tensor(ref).float()
    assert got.shape == ref.shape
    scale = float(ref.abs().max())
    assert scale > 0 and float(got.abs().max()) > 0, what
    rel = float((got - ref).abs().max()) / scale
    print(f"{what}: against TransformerLens, max difference / scale = {rel:.1e}")
    assert rel < REL_TOL, (what, rel)


def attribute_scores(model: Any, method: str, level: str, **params: Any) -> torch.Tensor:
    return wb.attribute(model, CLEAN, target=" Mary", foil=" John", method=method, level=level, **params).scores


def head_patching(model: Any) -> torch.Tensor:
    return wb.patch(model, CLEAN, CORRUPTED, " Mary", " John", site="heads").effect


def eap_scores(model: Any) -> torch.Tensor:
    rows = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]
    return wb.circuit(model, rows, method="eap", edges=20, evaluate=False).scores
