"""The nnsight backend on the real smollm2-135m gives the TransformerLens backend's numbers: DPA (token, head), the
gradient, integrated gradients, AtP, activation patching of heads and an EAP circuit's edge scores, each within
1e-4 of the values' own scale (their largest magnitude); and the bridge's EAP circuit (its split head inputs)."""

from __future__ import annotations

import pytest

import workbench as wb
from tests.backend_checks import attribute_scores, close, eap_scores, head_patching

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def nn():
    return wb.load("smollm2-135m", backend="nnsight")


@pytest.mark.parametrize(("method", "level", "params"), [
    ("dpa", "token", {}), ("dpa", "head", {}), ("gradient", "head", {}),
    ("integrated_gradients", "token", {"steps": 4}), ("atp", "head", {})])
def test_method_matches_transformer_lens(smollm2, nn, method, level, params):
    close(attribute_scores(nn, method, level, **params), attribute_scores(smollm2, method, level, **params),
          f"smollm2-135m {method}/{level}")


def test_head_patching_matches_transformer_lens(smollm2, nn):
    close(head_patching(nn), head_patching(smollm2), "smollm2-135m patch (heads)")


def test_eap_circuit_matches_transformer_lens(smollm2, nn):
    close(eap_scores(nn), eap_scores(smollm2), "smollm2-135m EAP circuit edge scores")


def test_bridge_eap_circuit_matches_transformer_lens(smollm2):
    """The bridge's split head inputs (computed attention, grouped kv heads ungrouped) on the real model."""
    bridge = wb.load("smollm2-135m", backend="bridge")
    close(eap_scores(bridge), eap_scores(smollm2), "smollm2-135m EAP circuit edge scores (bridge)")
