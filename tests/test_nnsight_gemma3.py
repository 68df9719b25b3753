"""The nnsight backend on the real gemma3-270m (q/k norms, post-norms, a scaled embedding, sliding and full layers, 1
kv head) gives the TransformerLens backend's numbers: DPA (token, head), the gradient, integrated gradients, AtP,
activation patching of heads and an EAP circuit's edge scores, each within 1e-4 of the values' own scale (their
largest magnitude). The weights are read inside traces only (the tiny Gemma 3 of tests/test_nnsight_weights.py)."""

from __future__ import annotations

import pytest

import workbench as wb
from tests.backend_checks import attribute_scores, close, eap_scores, head_patching

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def tl():
    return wb.load("gemma3-270m")


@pytest.fixture(scope="module")
def nn():
    return wb.load("gemma3-270m", backend="nnsight")


@pytest.mark.parametrize(("method", "level", "params"), [
    ("dpa", "token", {}), ("dpa", "head", {}), ("gradient", "head", {}),
    ("integrated_gradients", "token", {"steps": 4}), ("atp", "head", {})])
def test_method_matches_transformer_lens(tl, nn, method, level, params):
    close(attribute_scores(nn, method, level, **params), attribute_scores(tl, method, level, **params),
          f"gemma3-270m {method}/{level}")


def test_head_patching_matches_transformer_lens(tl, nn):
    close(head_patching(nn), head_patching(tl), "gemma3-270m patch (heads)")


def test_eap_circuit_matches_transformer_lens(tl, nn):
    close(eap_scores(nn), eap_scores(tl), "gemma3-270m EAP circuit edge scores")
