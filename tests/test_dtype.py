"""Precision as a load option: bfloat16 / float16 weights on CPU, engines accumulating in float32, and a dtype
that does not exist refused in one line."""

from __future__ import annotations

import pytest
import torch
from family_models import FOIL, IDS, TARGET, save_family

import workbench as wb
from attribution.dpa import COMPLETE, dpa_all
from core.errors import ModelFileError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    return save_family(tmp_path_factory.mktemp("dtype") / "gemma3", "gemma3")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_weights_and_float32_dpa(gemma_dir, dtype):
    full = wb.load(str(gemma_dir))
    half = wb.load(str(gemma_dir), dtype=dtype)
    assert {p.dtype for p in half.tl.parameters()} == {getattr(torch, dtype)}
    assert {p.dtype for p in full.tl.parameters()} == {torch.float32}
    enc = full.encode(IDS, TARGET, FOIL)
    ref = dpa_all(full, enc, levels=("token", "head"))
    got = dpa_all(half, enc, levels=("token", "head"))
    assert got["token"].dtype == torch.float32  # propagated in float32 whatever the weights
    scale = float(ref["head"].abs().max())
    assert float((got["head"] - ref["head"]).abs().max()) < 0.1 * scale  # half precision, same picture
    assert float((got["head"] - ref["head"]).abs().max()) > 0  # and really computed in the other precision
    complete = dpa_all(half, enc, levels=("token",), **COMPLETE)
    assert abs(complete.completeness_error()) < 0.05 * max(1.0, abs(complete.target_logit))
    res = wb.attribute(half, "The capital of France is", target=" Paris", method="gradient", level="token")
    assert bool(torch.isfinite(torch.as_tensor(res.scores)).all())


def test_unknown_dtype_and_dtype_of_a_toy_model(gemma_dir):
    with pytest.raises(ModelFileError, match="unknown dtype 'float64': use float32, bfloat16, float16"):
        wb.load(str(gemma_dir), dtype="float64")
    with pytest.raises(ModelFileError, match="is for LLMs"):
        wb.load("ioi-attn-2l1h", dtype="bfloat16")
