"""The bridge backend (TransformerLens' TransformerBridge over HF's module) on the real gemma3-270m (q/k norms with
1 + w gains, post-norms, sliding and full layers with their own rotary tables, 1 kv head) gives the TransformerLens
backend's numbers: DPA (token, head, qk), dpa_path, IFR, DLA and an EAP circuit's edge scores (split head inputs),
each within 1e-4 of the values' own scale. Every engine on a tiny random Gemma 3: tests/test_backend_matrix.py."""

from __future__ import annotations

import pytest

import workbench as wb
from tests.backend_checks import CLEAN, attribute_scores, close, eap_scores

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def tl():
    return wb.load("gemma3-270m")


@pytest.fixture(scope="module")
def bridge():
    return wb.load("gemma3-270m", backend="bridge")


@pytest.mark.parametrize(("method", "level"), [("dpa", "token"), ("dpa", "head"), ("dpa", "qk"),
                                              ("dpa_path", "token"), ("ifr", "head")])
def test_method_matches_transformer_lens(tl, bridge, method, level):
    close(attribute_scores(bridge, method, level), attribute_scores(tl, method, level),
          f"gemma3-270m bridge {method}/{level}")


def test_dla_matches_transformer_lens(tl, bridge):
    """DLA reads the post-norms' scales and their 1 + w gains."""
    close(wb.dla(bridge, CLEAN, target=" Mary", foil=" John").head_scores,
          wb.dla(tl, CLEAN, target=" Mary", foil=" John").head_scores, "gemma3-270m bridge dla")


def test_eap_circuit_matches_transformer_lens(tl, bridge):
    close(eap_scores(bridge), eap_scores(tl), "gemma3-270m bridge circuit/eap")
