"""The nnsight backend on the real gemma3-270m (q/k norms, post-norms, a scaled embedding, sliding and full layers, 1
kv head) gives the TransformerLens backend's numbers: DPA (token, head), the gradient, integrated gradients, AtP,
activation patching of heads and an EAP circuit's edge scores, each within 1e-4 of the values' own scale (their
largest magnitude). The weights are read inside traces only (the tiny Gemma 3 of tests/test_nnsight_weights.py)."""

from __future__ import annotations

import pytest
import torch

import workbench as wb

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

CLEAN = "When Mary and John went out, John gave it to"
CORRUPTED = "When Mary and John went out, Mary gave it to"
REL_TOL = 1e-4


@pytest.fixture(scope="module")
def tl():
    return wb.load("gemma3-270m")


@pytest.fixture(scope="module")
def nn():
    return wb.load("gemma3-270m", backend="nnsight")


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    got, ref = torch.as_tensor(got).float(), torch.as_tensor(ref).float()
    assert got.shape == ref.shape
    scale = float(ref.abs().max())
    assert scale > 0 and float(got.abs().max()) > 0, what
    rel = float((got - ref).abs().max()) / scale
    print(f"gemma3-270m {what}: against TransformerLens, max difference / scale = {rel:.1e}")
    assert rel < REL_TOL, (what, rel)


@pytest.mark.parametrize(("method", "level", "params"), [
    ("dpa", "token", {}), ("dpa", "head", {}), ("gradient", "head", {}),
    ("integrated_gradients", "token", {"steps": 4}), ("atp", "head", {})])
def test_method_matches_transformer_lens(tl, nn, method, level, params):
    def run(m):
        return wb.attribute(m, CLEAN, target=" Mary", foil=" John", method=method, level=level, **params).scores

    _close(run(nn), run(tl), f"{method}/{level}")


def test_head_patching_matches_transformer_lens(tl, nn):
    def run(m):
        return wb.patch(m, CLEAN, CORRUPTED, " Mary", " John", site="heads").effect

    _close(run(nn), run(tl), "patch (heads)")


def test_eap_circuit_matches_transformer_lens(tl, nn):
    rows = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]

    def run(m):
        return wb.circuit(m, rows, method="eap", edges=20, evaluate=False).scores

    _close(run(nn), run(tl), "EAP circuit edge scores")
