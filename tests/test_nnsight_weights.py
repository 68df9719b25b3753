"""Nothing reads a weight outside a trace on the nnsight backend: with every parameter and buffer of the Hugging Face
module unreachable except while nnsight runs a trace (a guard on ``Module.__getattr__``, where ``mod.weight`` is
looked up), every engine that runs on nnsight gives the TransformerLens backend's numbers. A model hosted on NDIF
is the same situation (its weights are only reachable inside a trace), with the transport changed: the second
test sends every trace through nnsight's remote simulation (serialised and deserialised as for NDIF, run as NDIF's
server runs it: only the names the trace binds and saves come back). The same guard
over a tiny Gemma 3, a tiny Qwen 3, a tiny Gemma 2, a tiny OLMo-2 and a tiny Phi-3 (their q/k norms, post-norms,
per-kind rotary tables, soft caps and fused projections also read inside traces)."""

from __future__ import annotations

import sys
import threading

import pytest
import torch
from test_backend_matrix import (  # noqa: F401 - the fixtures
    ENGINES,
    REFUSED,
    close,
    gemma2_pair,
    gemma3_pair,
    olmo2_pair,
    phi3_pair,
    qwen3_pair,
    tiny_gemma2_dir,
    tiny_gemma3_dir,
    tiny_olmo2_dir,
    tiny_phi3_dir,
    tiny_qwen3_dir,
)

import workbench as wb


class WeightOutsideTrace(RuntimeError):
    pass


def _guard(mp: pytest.MonkeyPatch, nn) -> None:
    """Make ``nn``'s module parameters and buffers raise WeightOutsideTrace when read outside
    ``LanguageModel.interleave`` (what runs a trace's forward and its body)."""
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

    mp.setattr(torch.nn.Module, "__getattr__", getattr_guard)
    mp.setattr(LanguageModel, "interleave", interleave)


def _as_a_server(backend, tracer) -> None:
    """nnsight's local simulation run as NDIF's server runs a request (ndif 0.1.2, ``execute_traced_block``): the
    block deserialised with its own copies of the variables it uses, executed, and only the names its frame binds
    and saves sent back (through ``torch.save``, as the response is) into the caller's frame. nnsight's own
    simulation executes the block against the caller's variables, so a container made before the trace and
    filled inside it comes back filled there and empty from a real server; here it comes back empty too."""
    import io
    import linecache

    from nnsight.intervention.backends.remote import RemoteBackend
    from nnsight.ndif import pull_env
    from nnsight.schema.request import RequestModel
    from nnsight.tracing.tracer import _saves, dec, inc

    pull_env()
    blob = RequestModel.serialize(tracer, compress=False)
    # deserialising registers the block's (and its functions') source in linecache under their files' names:
    # restored afterwards, as nnsight's own simulation does for the block (a server is another process; here a
    # stale entry would corrupt the next request's by-source serialisation of a function from that file)
    lines = dict(linecache.cache)
    hidden = backend._hide_local_modules()
    try:
        restored = RequestModel.deserialize(blob, backend.model._remoteable_persistent_objects(), compress=False)
    finally:
        backend._restore(hidden)
        linecache.cache.clear()
        linecache.cache.update(lines)
    inc()
    try:
        restored.execute(restored.info.code)
        saves = _saves()
        result = {name: value for name, value in restored.info.frame.f_locals.items() if id(value) in saves}
    finally:
        dec()
    buffer = io.BytesIO()
    torch.save(result, buffer)
    buffer.seek(0)
    RemoteBackend._push(None, torch.load(buffer, weights_only=True), tracer)  # tensors, dicts, lists, numbers


def _serve_like_ndif(mp: pytest.MonkeyPatch, nn) -> None:
    """Every trace of ``nn`` through ``_as_a_server``, with no server to check."""
    from nnsight.intervention.backends.local import LocalSimulationBackend

    import core.models.remote as remote

    mp.setattr(remote, "check_ndif", lambda *a, **k: None)  # no server to ask: the simulation is local
    # the simulation imports the trace's modules afresh, as a server does; the suite's run-time shape checker
    # (conftest's jaxtyping import hook) cannot instrument such a second import (a KeyError in its registry)
    mp.setattr(sys, "meta_path", [f for f in sys.meta_path if type(f).__name__ != "_JaxtypingFinder"])
    mp.setattr(LocalSimulationBackend, "__call__", _as_a_server)
    nn.remote = "local"


@pytest.fixture(scope="module")
def guarded(tiny_llama_dir, tiny_llama, one_thread):
    """An nnsight model behind the guard. The TransformerLens model loads first: its run-time shape checks import
    beartype before nnsight mounts ``.save`` on ``object``."""
    nn = wb.load(str(tiny_llama_dir), backend="nnsight")
    with pytest.MonkeyPatch.context() as mp:
        _guard(mp, nn)
        yield nn


@pytest.fixture(scope="module")
def simulated(tiny_llama_dir, tiny_llama, one_thread):
    """An nnsight model behind the guard whose traces go through nnsight's own remote simulation
    (``remote="local"``: each request serialised and deserialised as for NDIF, run in this process as the server
    runs it, only its saved names sent back: ``_as_a_server``)."""
    nn = wb.load(str(tiny_llama_dir), backend="nnsight")
    with pytest.MonkeyPatch.context() as mp:
        _guard(mp, nn)
        _serve_like_ndif(mp, nn)
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


def test_the_simulation_returns_only_what_a_server_returns(simulated):
    """As measured against ndif 0.1.2 (results/models/ndif_local.md): a dict made before the trace and filled inside
    it comes back empty; one made inside and saved comes back with its values, as does a saved name."""
    import nnsight

    ids = torch.zeros(1, 3, dtype=torch.long)
    outside: dict = {}
    with simulated.lm.trace(ids, remote="local"):
        box = nnsight.save({"h": simulated.lm.model.norm.output.save()})  # modules in execution order
        outside["logits"] = simulated.lm.output.logits.save()
        total = simulated.lm.output.logits.sum(-1).save()
    assert outside == {}
    assert tuple(total.shape) == (1, 3) and torch.isfinite(total).all()
    assert list(box) == ["h"] and tuple(box["h"].shape[:2]) == (1, 3) and torch.isfinite(box["h"]).all()


# nnsight serialises a function by its source (inspect.getsource, which follows __wrapped__) with the defaults of the
# object itself: the suite's jaxtyping hook wraps IG's ``on_path(x, a=a)``, so it arrives without its default (only
# after the guarded IG case ran, not alone). Not a workbench defect: IG ran through ndif's server (ndif_local.md).
_WRAPPED = pytest.mark.xfail(reason="jaxtyping-wrapped on_path loses its default in nnsight's by-source pickling",
                             strict=False)


@pytest.mark.parametrize("engine", [pytest.param(e, marks=_WRAPPED) if e.startswith("integrated") else e
                                    for e in ENGINES if e not in REFUSED["nnsight"] and not e.startswith("circuit")])
def test_engine_through_nnsights_remote_simulation(simulated, tiny_llama, engine):
    """Every engine but the circuits (their backward runs after the trace: refused on a remote model) gives the
    TransformerLens numbers when every trace is serialised and deserialised as a remote request is."""
    got = torch.as_tensor(ENGINES[engine](simulated)).float()
    close(got, torch.as_tensor(ENGINES[engine](tiny_llama)).float())


# the families beside the tiny Llama, each a module fixture pair ``<family>_pair`` (TransformerLens, nnsight) over
# ``tiny_<family>_dir``: every engine behind the guard on each
FAMILIES = ("gemma3", "qwen3", "gemma2", "olmo2", "phi3")
# and the engines run through nnsight's remote simulation on each family that has them: Gemma 3's per-kind rotary
# tables are read from each layer's inputs (that too must survive serialisation), Gemma 2's soft-capped scores are
# computed in the trace from the rotated q and k, Phi-3's q/k/v and gate/up are sliced from the fused projections
# inside the trace (their gradients too)
SIMULATED = {
    "gemma3": ["dpa/head", "dpa_path/token", "gradient/head", "atp/qk", "patch (heads)"],
    "gemma2": ["dpa/qk", "dpa_path/token", "gradient/head", "atp/qk", "patch (heads)"],
    "olmo2": ["dpa/qk", "dpa_path/token", "gradient/head", "atp/qk", "patch (heads)"],
    "phi3": ["dpa/qk", "dpa_path/token", "gradient/head", "input_x_gradient/neuron", "atp/qk", "patch (heads)"],
}


@pytest.fixture(scope="module", params=FAMILIES)
def guarded_family(request):
    """A family's (TransformerLens, nnsight) pair with its nnsight model behind the guard."""
    pair = request.getfixturevalue(f"{request.param}_pair")
    with pytest.MonkeyPatch.context() as mp:
        _guard(mp, pair[1])
        yield pair


@pytest.fixture(scope="module")
def simulated_family(request):
    """(a family's TransformerLens model, a fresh nnsight model of it behind the guard with every trace through
    nnsight's remote simulation); the family is the test's parameter."""
    tl = request.getfixturevalue(f"{request.param}_pair")[0]  # TransformerLens first, as ``guarded`` says
    nn = wb.load(str(request.getfixturevalue(f"tiny_{request.param}_dir")), backend="nnsight")
    with pytest.MonkeyPatch.context() as mp:
        _guard(mp, nn)
        _serve_like_ndif(mp, nn)
        yield tl, nn


@pytest.mark.parametrize("engine", list(ENGINES))
def test_family_engine_reads_weights_only_inside_traces(guarded_family, engine):
    tl, nn = guarded_family
    close(torch.as_tensor(ENGINES[engine](nn)).float(), torch.as_tensor(ENGINES[engine](tl)).float())


@pytest.mark.parametrize("simulated_family,engine", [(f, e) for f, engines in SIMULATED.items() for e in engines],
                         indirect=["simulated_family"])
def test_family_through_nnsights_remote_simulation(simulated_family, engine):
    tl, nn = simulated_family
    close(torch.as_tensor(ENGINES[engine](nn)).float(), torch.as_tensor(ENGINES[engine](tl)).float())
