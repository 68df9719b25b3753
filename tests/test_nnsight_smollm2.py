"""The nnsight backend on the real smollm2-135m gives the TransformerLens backend's numbers: DPA (token, head), the
gradient, integrated gradients, AtP and activation patching of heads, each within 1e-4 of the values' own scale
(their largest magnitude). The edge-level circuits still refuse on nnsight (per-head q/k/v inputs): one line, and
the EAP circuit runs on TransformerLens from the same prompt."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from core.errors import BackendError

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

CLEAN = "When Mary and John went out, John gave it to"
CORRUPTED = "When Mary and John went out, Mary gave it to"
REL_TOL = 1e-4


@pytest.fixture(scope="module")
def nn():
    return wb.load("smollm2-135m", backend="nnsight")


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    got, ref = torch.as_tensor(got).float(), torch.as_tensor(ref).float()
    assert got.shape == ref.shape
    scale = float(ref.abs().max())
    assert scale > 0 and float(got.abs().max()) > 0, what
    rel = float((got - ref).abs().max()) / scale
    print(f"smollm2-135m {what}: nnsight vs TransformerLens, max difference / scale = {rel:.1e}")
    assert rel < REL_TOL, (what, rel)


@pytest.mark.parametrize(("method", "level", "params"), [
    ("dpa", "token", {}), ("dpa", "head", {}), ("gradient", "head", {}),
    ("integrated_gradients", "token", {"steps": 4}), ("atp", "head", {})])
def test_method_matches_transformer_lens(smollm2, nn, method, level, params):
    def run(m):
        return wb.attribute(m, CLEAN, target=" Mary", foil=" John", method=method, level=level, **params).scores

    _close(run(nn), run(smollm2), f"{method}/{level}")


def test_head_patching_matches_transformer_lens(smollm2, nn):
    def run(m):
        return wb.patch(m, CLEAN, CORRUPTED, " Mary", " John", site="heads").effect

    _close(run(nn), run(smollm2), "patch (heads)")


def test_eap_circuit_runs_on_transformer_lens_and_refuses_on_nnsight(smollm2, nn):
    rows = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]
    ref = wb.circuit(smollm2, rows, method="eap", edges=20, evaluate=False).scores
    assert float(ref.abs().max()) > 0
    with pytest.raises(BackendError) as err:
        wb.circuit(nn, rows, method="eap", edges=20, evaluate=False)
    assert "\n" not in str(err.value) and "per-head q/k/v inputs" in str(err.value)
