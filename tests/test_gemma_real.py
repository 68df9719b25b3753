"""The real gemma3-270m (converted by the set-up from its PyPI packages): it answers sensibly, DPA is complete
and equals the brute-force reference, and the other engines (baselines, lens, patching, the edge graph) run
on its architecture (GeGLU, q/k norms, post-norms, sliding windows, one kv head, 262k vocabulary)."""

from __future__ import annotations

import pytest
import torch
from circuit_checks import masked_ends

import workbench as wb
from attribution.dpa import COMPLETE, dpa_all
from attribution.dpa.reference import dpa_reference

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("one_thread")]
IOI = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def gemma():
    return wb.load("gemma3-270m")


def test_it_is_gemma_and_answers(gemma):
    a = gemma.arch
    assert (a.n_layers, a.n_heads, a.n_kv_heads, a.d_model, a.d_vocab) == (18, 4, 1, 640, 262144)
    assert (a.norm_placement, a.qk_norm, a.mlp) == ("pre+post", "head", "glu-gelu_pytorch_tanh")
    assert gemma.to_str_tokens(gemma.to_tokens("Water"))[0] == "<bos>"
    assert gemma.generate("Water boils at", 5).startswith(" 100 degrees")
    assert [t for t, _ in gemma.top_predictions("The capital of France is", 3)] == [" the", " a", " Paris"]
    assert gemma.top_predictions(IOI, 1)[0][0] == " Mary"


def test_dpa_complete_and_equal_to_reference(gemma):
    enc = gemma.encode(IOI, " Mary", " John")
    complete = dpa_all(gemma, enc, levels=("token",), **COMPLETE)
    assert abs(complete.completeness_error()) < 1e-3
    trace = dpa_all(gemma, enc, levels=("token", "head", "neuron"))
    ref = dpa_reference(gemma, enc)
    for level in ("token", "head", "neuron"):
        scale = float(ref[level].abs().max())
        assert float((trace[level] - ref[level]).abs().max()) <= 1e-4 * scale + 1e-6, level
    assert float(ref["token"].abs().max()) > 0.1  # not a vacuous comparison


def test_other_engines_run_on_gemma(gemma):
    for method, level in (("gradient", "token"), ("atp", "head"), ("ifr", "head"), ("dla", "head")):
        res = wb.attribute(gemma, IOI, target=" Mary", foil=" John", method=method, level=level)
        assert bool(torch.isfinite(torch.as_tensor(res.scores)).all()), method
    lens = wb.lens(gemma, "The capital of France is", target=" Paris")
    assert lens is not None
    rows = [{"prompt": IOI, "target": " Mary", "foil": " John",
             "corrupt": "When Alice and Bob went to the store, Bob gave a drink to"}]
    clean, corrupt = masked_ends(gemma, rows, atol=1e-3)
    assert float(clean - corrupt) > 1.0
