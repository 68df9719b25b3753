"""The bridge backend (TransformerLens' TransformerBridge over HF's module) on the real gemma3-270m (q/k norms with
1 + w gains, post-norms, sliding and full layers with their own rotary tables, 1 kv head) gives the TransformerLens
backend's numbers: DPA (token, head, qk), dpa_path, IFR, DLA and an EAP circuit's edge scores (split head inputs),
each within 1e-4 of the values' own scale. Every engine on a tiny random Gemma 3: tests/test_backend_matrix.py."""

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
def bridge():
    return wb.load("gemma3-270m", backend="bridge")


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    got, ref = torch.as_tensor(got).float(), torch.as_tensor(ref).float()
    assert got.shape == ref.shape
    scale = float(ref.abs().max())
    assert scale > 0 and float(got.abs().max()) > 0, what
    rel = float((got - ref).abs().max()) / scale
    print(f"gemma3-270m bridge {what}: against TransformerLens, max difference / scale = {rel:.1e}")
    assert rel < REL_TOL, (what, rel)


@pytest.mark.parametrize(("method", "level"), [("dpa", "token"), ("dpa", "head"), ("dpa", "qk"),
                                              ("dpa_path", "token"), ("ifr", "head")])
def test_method_matches_transformer_lens(tl, bridge, method, level):
    def run(m):
        return wb.attribute(m, CLEAN, target=" Mary", foil=" John", method=method, level=level).scores

    _close(run(bridge), run(tl), f"{method}/{level}")


def test_dla_matches_transformer_lens(tl, bridge):
    """DLA reads the post-norms' scales and their 1 + w gains."""
    def run(m):
        return wb.dla(m, CLEAN, target=" Mary", foil=" John").head_scores

    _close(run(bridge), run(tl), "dla")


def test_eap_circuit_matches_transformer_lens(tl, bridge):
    rows = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]

    def run(m):
        return wb.circuit(m, rows, method="eap", edges=20, evaluate=False).scores

    _close(run(bridge), run(tl), "circuit/eap")
