"""Nothing reads a weight outside a trace on the nnsight backend: with every parameter and buffer of the Hugging Face
module unreachable except while nnsight runs a trace (a guard on ``Module.__getattr__``, where ``mod.weight`` is
looked up), every engine that runs on nnsight gives the TransformerLens backend's numbers. A model hosted on NDIF
is the same situation (its weights are only reachable inside a trace), with the transport changed."""

from __future__ import annotations

import threading

import pytest
import torch
from test_backend_matrix import ENGINES, REFUSED, close

import workbench as wb


class WeightOutsideTrace(RuntimeError):
    pass


@pytest.fixture(scope="module")
def guarded(tiny_llama_dir, tiny_llama, one_thread):
    """An nnsight model whose module's parameters and buffers raise WeightOutsideTrace when read outside
    ``LanguageModel.interleave`` (what runs a trace's forward and its body). The TransformerLens model loads
    first: its run-time shape checks import beartype before nnsight mounts ``.save`` on ``object``."""
    nn = wb.load(str(tiny_llama_dir), backend="nnsight")
    from nnsight import LanguageModel

    guarded_modules = {id(m) for m in nn.hf.modules()}
    tracing = threading.Event()
    original_getattr = torch.nn.Module.__getattr__
    original_interleave = LanguageModel.interleave

    def getattr_guard(self, name):
        if id(self) in guarded_modules and not tracing.is_set() and (
                name in self.__dict__.get("_parameters", {}) or name in self.__dict__.get("_buffers", {})):
            raise WeightOutsideTrace(f"{type(self).__name__}.{name} read outside a trace")
        return original_getattr(self, name)

    def interleave(self, *args, **kwargs):
        tracing.set()
        try:
            return original_interleave(self, *args, **kwargs)
        finally:
            tracing.clear()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.nn.Module, "__getattr__", getattr_guard)
        mp.setattr(LanguageModel, "interleave", interleave)
        yield nn


def test_the_guard_guards(guarded):
    with pytest.raises(WeightOutsideTrace):
        guarded.hf.lm_head.weight  # noqa: B018 - the read is the test
    with pytest.raises(WeightOutsideTrace):
        guarded.hf.model.layers[0].self_attn.q_proj.weight  # noqa: B018


@pytest.mark.parametrize("engine", [e for e in ENGINES if e not in REFUSED["nnsight"]])
def test_engine_reads_weights_only_inside_traces(guarded, tiny_llama, engine):
    got = torch.as_tensor(ENGINES[engine](guarded)).float()
    close(got, torch.as_tensor(ENGINES[engine](tiny_llama)).float())
