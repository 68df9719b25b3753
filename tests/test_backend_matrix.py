"""Engines x backends: every engine gives the TransformerLens backend's numbers on the nnsight and bridge backends
(a tiny random Llama with grouped-query attention), or refuses in one BackendError line naming the engine and the
backend. README's "Engines x backends" table is this file's REFUSED. Plus the nnsight remote path (same trace code,
only the transport swapped; no network: one line within seconds), an unknown backend, and one slow check on the
real smollm2-135m."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
import torch
from cli_helpers import run_cli

import workbench as wb
from core.errors import BackendError

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
ROWS = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]
GRADIENTS = ("dpa_path", "gradient", "input_x_gradient", "integrated_gradients", "atp", "atp_foil")


def _attr(method: str, level: str) -> Callable:
    return lambda m: wb.attribute(m, CLEAN, target=" Mary", foil=" John", method=method, level=level).scores


def _steer(m):
    from attribution.sae.steer import steer
    from attribution.sae.units import neuron_dictionary

    res = steer(m, neuron_dictionary(m, 1), 3, CLEAN, alpha=5.0, target=" Mary", n_new=2)
    return torch.tensor([res.target_logit_clean, res.target_logit_steered])


def _probe_activations(m):
    from attribution.probes.activations import from_rows, pooled_activations

    data = from_rows([{"text": t, "label": str(i % 2)} for i, t in enumerate(["The cat sat", "A car drove"])])
    acts = pooled_activations(m, data, ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"])
    return torch.stack([torch.as_tensor(a) for a in acts.values()])


# engine (as the refusal names it) -> what it returns on a model
ENGINES: dict[str, Callable] = {
    **{f"dpa/{lv}": _attr("dpa", lv) for lv in ("token", "head", "qk", "neuron")},
    "dpa_path/token": _attr("dpa_path", "token"),
    "gradient/head": _attr("gradient", "head"),
    "input_x_gradient/neuron": _attr("input_x_gradient", "neuron"),
    "integrated_gradients/token": _attr("integrated_gradients", "token"),
    "atp/qk": _attr("atp", "qk"),
    "atp_foil/token": _attr("atp_foil", "token"),
    "attention_last/qk": _attr("attention_last", "qk"),
    "rollout/token": _attr("rollout", "token"),
    "ifr/head": _attr("ifr", "head"),
    "activation_patching/head": _attr("activation_patching", "head"),
    "dla": lambda m: wb.dla(m, CLEAN, target=" Mary", foil=" John").head_scores,
    "lens": lambda m: wb.lens(m, CLEAN, target=" Mary").target_prob,
    **{f"patch ({site})": (lambda s: lambda m: wb.patch(m, CLEAN, CORRUPTED, " Mary", " John", site=s).effect)(site)
       for site in ("resid", "heads", "mlps")},
    "circuit": lambda m: wb.circuit(m, ROWS, method="eap", edges=5, evaluate=False).scores,
    "sae steering": _steer,
    "probe": _probe_activations,
}
# what refuses where (README "Engines x backends"); every other cell runs with TransformerLens' numbers
REFUSED = {
    "nnsight": {*(f"{m}/" for m in GRADIENTS), "ifr/", "activation_patching/", "dla", "circuit"},
    "bridge": {"circuit"},
}


def _refused(engine: str, backend: str) -> bool:
    return any(engine.startswith(r) for r in REFUSED[backend])


@pytest.fixture(scope="module")
def models(tiny_llama_dir, tiny_llama, one_thread):
    return {"nnsight": wb.load(str(tiny_llama_dir), backend="nnsight"),
            "bridge": wb.load(str(tiny_llama_dir), backend="bridge")}


@pytest.fixture(scope="module")
def reference(tiny_llama):
    done: dict[str, torch.Tensor] = {}

    def get(engine: str) -> torch.Tensor:
        if engine not in done:
            done[engine] = torch.as_tensor(ENGINES[engine](tiny_llama)).float()
        return done[engine]

    return get


@pytest.mark.parametrize("backend", ["nnsight", "bridge"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_engine_on_backend(models, reference, engine, backend):
    model = models[backend]
    if _refused(engine, backend):
        with pytest.raises(BackendError) as err:
            ENGINES[engine](model)
        msg = str(err.value)
        assert "\n" not in msg and f"the {backend} backend" in msg, msg
        assert engine.split("/")[0].split(" (")[0] in msg, msg
        return
    got, ref = torch.as_tensor(ENGINES[engine](model)).float(), reference(engine)
    assert got.shape == ref.shape
    scale = float(ref.abs().max()) or 1.0
    assert float((got - ref).abs().max()) <= 1e-4 * max(scale, 1.0), (engine, backend)


# -- nnsight remote: the same trace code, only the transport swapped ------------------------------
def test_remote_runs_the_local_trace_code(models, monkeypatch):
    import core.models.remote as remote

    nn = models["nnsight"]
    calls: list[tuple[bool, tuple]] = []
    original = nn.lm.trace

    def recording_trace(*args, remote: bool = False, **kwargs):  # the transport: always local here
        calls.append((remote, tuple(a.shape for a in args)))
        return original(*args, remote=False, **kwargs)

    monkeypatch.setattr(nn.lm, "trace", recording_trace)
    local = wb.patch(nn, CLEAN, CORRUPTED, " Mary", " John", site="mlps").effect
    n_local = len(calls)
    monkeypatch.setattr(nn, "remote", True)
    monkeypatch.setattr(remote, "check_ndif", lambda *a, **k: None)  # NDIF "answers"
    monkeypatch.setattr(nn, "_ndif_checked", False)
    sent = wb.patch(nn, CLEAN, CORRUPTED, " Mary", " John", site="mlps").effect
    assert [c[0] for c in calls] == [False] * n_local + [True] * n_local  # every trace went "remote"
    assert [c[1] for c in calls[:n_local]] == [c[1] for c in calls[n_local:]]  # the same traces
    assert torch.equal(local, sent)
    with pytest.raises(BackendError, match="nnsight backend .*NDIF"):  # a hosted model's weights stay there
        wb.attribute(nn, CLEAN, target=" Mary", method="dpa")


def test_remote_without_network_is_one_line_in_seconds(models, monkeypatch):
    from nnsight import CONFIG

    nn = models["nnsight"]
    silent = socket.socket()  # listens, never answers (a dead proxy); a refused port fails even sooner
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        monkeypatch.setenv("WORKBENCH_REMOTE_TIMEOUT", "1")
        monkeypatch.setattr(CONFIG.API, "HOST", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(nn, "remote", True)
        monkeypatch.setattr(nn, "_ndif_checked", False)
        started = time.monotonic()
        with pytest.raises(BackendError) as err:
            nn.logits(nn.to_tokens(CLEAN))
        # the message proves the 1 s setting was used; the clock only rules out a hang (a busy machine is slow)
        assert time.monotonic() - started < 60
        assert "\n" not in str(err.value) and "did not answer within 1 s" in str(err.value)
    finally:
        silent.close()


def test_unknown_backend_is_one_line(tiny_llama_dir, monkeypatch, capsys):
    from core.models.backends import build_backend

    with pytest.raises(BackendError, match="unknown backend 'nnsite'"):
        build_backend(tiny_llama_dir, "tiny", backend="nnsite")
    with pytest.raises(wb.WorkbenchError, match="nnsite"):
        wb.load(str(tiny_llama_dir), backend="nnsite")
    code, out, err = run_cli(monkeypatch, capsys, "info", str(tiny_llama_dir), "--backend", "nnsite")
    assert code == 2 and err.startswith("error:") and "nnsite" in err and len(err.strip().splitlines()) == 1


# -- the real model ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_nnsight_matches_transformer_lens(smollm2, one_thread):
    nn = wb.load("smollm2-135m", backend="nnsight")
    ref = wb.attribute(smollm2, CLEAN, target=" Mary", foil=" John", method="dpa").scores
    got = wb.attribute(nn, CLEAN, target=" Mary", foil=" John", method="dpa").scores
    rel = float((got - ref).norm() / ref.norm())
    print(f"smollm2-135m DPA token scores, nnsight vs TransformerLens: relative difference {rel:.2e}")
    assert rel < 1e-3
    short, corrupt = "When Mary and John went out, John gave it to", "When Mary and John went out, Mary gave it to"
    p_ref = wb.patch(smollm2, short, corrupt, " Mary", " John", site="mlps")
    p_nn = wb.patch(nn, short, corrupt, " Mary", " John", site="mlps")
    assert torch.allclose(p_nn.effect, p_ref.effect, atol=1e-3), (p_nn.effect - p_ref.effect).abs().max()
