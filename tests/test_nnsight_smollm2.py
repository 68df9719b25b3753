"""The nnsight backend on the real smollm2-135m gives the TransformerLens backend's numbers: DPA (token, head), the
gradient, integrated gradients, AtP, activation patching of heads and an EAP circuit's edge scores, each within
1e-4 of the values' own scale (their largest magnitude); and the bridge's EAP circuit (its split head inputs)."""

from __future__ import annotations

import pytest
import torch

import workbench as wb

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
    print(f"smollm2-135m {what}: against TransformerLens, max difference / scale = {rel:.1e}")
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


def test_eap_circuit_matches_transformer_lens(smollm2, nn):
    rows = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]

    def run(m):
        return wb.circuit(m, rows, method="eap", edges=20, evaluate=False).scores

    _close(run(nn), run(smollm2), "EAP circuit edge scores")


def test_bridge_eap_circuit_matches_transformer_lens(smollm2):
    """The bridge's split head inputs (computed attention, grouped kv heads ungrouped) on the real model."""
    bridge = wb.load("smollm2-135m", backend="bridge")
    rows = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]

    def run(m):
        return wb.circuit(m, rows, method="eap", edges=20, evaluate=False).scores

    _close(run(bridge), run(smollm2), "EAP circuit edge scores (bridge)")
