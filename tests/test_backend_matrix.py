"""Engines x backends: every engine gives the TransformerLens backend's numbers on the nnsight and bridge backends
(a tiny random Llama with grouped-query attention), or refuses in one BackendError line naming the engine and the
backend. Every row of README's "Engines x backends" table is here (ROWS below names the row each engine is
checked for); a cell is a real comparison, within 1e-4 of the reference's own scale (its largest magnitude),
and a reference or result that is all zeros fails. README's counts are this file's (checked below). Plus the
nnsight remote path (same trace code, only the transport swapped; no network: one line within seconds) and an
unknown backend. The nnsight column again on a tiny random Qwen 3 (per-head q/k norms) and a tiny random Gemma 3
(q/k norms, post-norms, a scaled embedding, sliding windows shorter than the prompt), norm gains randomised,
against TransformerLens on the same weights; the bridge column on that Gemma 3 too (per-layer rotary tables and
windows, 1 + w gains, post-norms, circuits through split head inputs) and on that Qwen 3. The real
smollm2-135m: tests/test_nnsight_smollm2.py; the real gemma3-270m: tests/test_nnsight_gemma3.py."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

import workbench as wb
from core.errors import BackendError

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
IOI = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]
REL_TOL = 1e-4
CIRCUIT_METHODS = ("eap", "eap_ig", "eap_ig_act", "ifr", "dpa", "dpa_norm", "dpa_cf", "dpa_path", "edge_pruning",
                   "activation_patching")  # circuits.edges.EDGE_METHODS (checked below)


def _attr(method: str, level: str) -> Callable:
    return lambda m: wb.attribute(m, CLEAN, target=" Mary", foil=" John", method=method, level=level).scores


def _steer(m):
    from attribution.sae.steer import steer
    from attribution.sae.units import neuron_dictionary

    res = steer(m, neuron_dictionary(m, 1), 3, CLEAN, alpha=5.0, target=" Mary", n_new=2)
    return torch.tensor([res.target_logit_clean, res.target_logit_steered])


def _labeled():
    from attribution.probes.activations import from_rows

    texts = ["The cat sat", "A car drove", "The dog ran", "A bus went"]
    return from_rows([{"text": t, "label": str(i % 2)} for i, t in enumerate(texts)])


def _probe_activations(m):
    from attribution.probes.activations import pooled_activations

    acts = pooled_activations(m, _labeled(), ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"])
    return torch.stack([torch.as_tensor(a) for a in acts.values()])


def _concepts(m):
    from attribution.probes.run import run_concepts

    run = run_concepts(m, _labeled(), "1", ["blocks.0.hook_resid_post"], ["blocks.0.hook_resid_post"], n_steer=2)
    layer = run.concepts.layers[0]
    return torch.tensor([layer.cos_mean_probe, *layer.steering.values()])


_DICTIONARY: dict[str, object] = {}


def _features(m):
    """Feature-level DPA over a random TopK SAE on blocks.1.hook_resid_post (made once per model, in a temporary
    folder)."""
    import tempfile

    from test_feature_dpa import save_dictionary

    from attribution.features.placement import load_dictionaries
    from attribution.features.scores import feature_attribution

    key = Path(m.name).name  # one dictionary per model (its name is checked), shared by its backends
    if key not in _DICTIONARY:
        folder = Path(tempfile.mkdtemp()) / "sae-L1"
        _DICTIONARY[key] = load_dictionaries([str(save_dictionary(folder, m.name, "blocks.1.hook_resid_post"))])[0]
    res = feature_attribution(m, CLEAN, [_DICTIONARY[key]], target=" Mary", foil=" John")
    return torch.as_tensor(res.layers[0].scores)


def _path_patch(m):
    from circuits.tools.patching import path_patch

    res = path_patch(m, CLEAN, CORRUPTED, " Mary", " John", sender=(0, 1), receivers=[(1, 2)])
    return torch.tensor([res["patched"], res["effect"]])


def _circuit(method: str) -> Callable:
    return lambda m: wb.circuit(m, IOI, method=method, edges=5, evaluate=False).scores


def _patch(site: str) -> Callable:
    return lambda m: wb.patch(m, CLEAN, CORRUPTED, " Mary", " John", site=site).effect


# engine (as the refusal names it) -> what it returns on a model
ENGINES: dict[str, Callable] = {
    **{f"dpa/{lv}": _attr("dpa", lv) for lv in ("token", "head", "qk", "neuron")},
    "feature attribution": _features,
    "dpa_path/token": _attr("dpa_path", "token"),
    "gradient/head": _attr("gradient", "head"),
    "gradient_norm/token": _attr("gradient_norm", "token"),
    "input_x_gradient/neuron": _attr("input_x_gradient", "neuron"),
    "integrated_gradients/token": _attr("integrated_gradients", "token"),
    "atp/qk": _attr("atp", "qk"),
    "atp_foil/token": _attr("atp_foil", "token"),
    "attention_last/qk": _attr("attention_last", "qk"),
    "attention_mean/token": _attr("attention_mean", "token"),
    "rollout/token": _attr("rollout", "token"),
    "random/head": _attr("random", "head"),
    "ifr/head": _attr("ifr", "head"),
    "dla": lambda m: wb.dla(m, CLEAN, target=" Mary", foil=" John").head_scores,
    "activation_patching/head": _attr("activation_patching", "head"),
    "lens": lambda m: wb.lens(m, CLEAN, target=" Mary").target_prob,
    **{f"patch ({site})": _patch(site) for site in ("resid", "attn", "mlp", "mlps", "heads")},
    "path patching": _path_patch,
    **{f"circuit/{method}": _circuit(method) for method in CIRCUIT_METHODS},
    "sae steering": _steer,
    "probe": _probe_activations,
    "concept vectors": _concepts,
}
# README's rows (first column, up to the first "(" or ";") -> the engines checked for it
ROWS: dict[str, list[str]] = {
    "DPA token / head / qk / neuron": [f"dpa/{lv}" for lv in ("token", "head", "qk", "neuron")],
    "feature attribution": ["feature attribution"],
    "dpa_path, gradient, gradient_norm, input_x_gradient, IG, AtP, AtP-foil": [
        "dpa_path/token", "gradient/head", "gradient_norm/token", "input_x_gradient/neuron",
        "integrated_gradients/token", "atp/qk", "atp_foil/token"],
    "attention_last / attention_mean / rollout, random": [
        "attention_last/qk", "attention_mean/token", "rollout/token", "random/head"],
    "IFR, DLA": ["ifr/head", "dla"],
    "activation_patching": ["activation_patching/head"],
    "logit lens": ["lens"],
    "patching: resid, attn, mlp, mlps, heads": [f"patch ({s})" for s in ("resid", "attn", "mlp", "mlps", "heads")],
    "path patching": ["path patching"],
    "circuits": [f"circuit/{method}" for method in CIRCUIT_METHODS],
    "SAE / neuron steering, probes, concept vectors": ["sae steering", "probe", "concept vectors"],
}
# what refuses where (README "Engines x backends"), with the reason its line gives; every other cell runs with
# TransformerLens' numbers. Nothing refuses on a Llama-style model now: tests/test_nnsight_bad_input.py checks what
# still refuses elsewhere (other families, remote circuits)
REFUSED: dict[str, dict[str, str]] = {
    "nnsight": {},
    "bridge": {},
}
BACKENDS = ("nnsight", "bridge")


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


def _tiny_with_random_gains(path: Path, cfg) -> Path:
    """A random model of ``cfg`` with smollm2's tokenizer, its norm gains random too (Gemma's norms multiply by
    1 + w: a zero w would hide a missing 1)."""
    from conftest import _save_tiny

    return _save_tiny(path, cfg, gain_noise=0.3)


@pytest.fixture(scope="module")
def tiny_gemma3_dir(tmp_path_factory) -> Path:
    """A tiny random Gemma 3 with smollm2's tokenizer: 3 layers (sliding, full, sliding; window 4), 4 heads over
    1 kv head, every weight and norm gain random."""
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                           num_key_value_heads=1, head_dim=8, vocab_size=49152, max_position_embeddings=128,
                           sliding_window=4, query_pre_attn_scalar=8,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                           bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.architectures = ["Gemma3ForCausalLM"]
    return _tiny_with_random_gains(tmp_path_factory.mktemp("tiny-gemma3"), cfg)


@pytest.fixture(scope="module")
def gemma3_pair(tiny_gemma3_dir, one_thread):
    """(TransformerLens, nnsight) over the tiny Gemma 3."""
    return wb.load(str(tiny_gemma3_dir)), wb.load(str(tiny_gemma3_dir), backend="nnsight")


@pytest.fixture(scope="module")
def gemma3_bridge(tiny_gemma3_dir, gemma3_pair):
    """The tiny Gemma 3 on the bridge backend (TransformerBridge over HF's module), against gemma3_pair's
    TransformerLens model."""
    return wb.load(str(tiny_gemma3_dir), backend="bridge")


@pytest.fixture(scope="module")
def tiny_qwen3_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen 3 with smollm2's tokenizer (per-head q/k norms; 4 heads over 2 kv heads)."""
    from transformers import Qwen3Config

    cfg = Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, vocab_size=49152, max_position_embeddings=128,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    cfg.architectures = ["Qwen3ForCausalLM"]
    return _tiny_with_random_gains(tmp_path_factory.mktemp("tiny-qwen3"), cfg)


@pytest.fixture(scope="module")
def qwen3_pair(tiny_qwen3_dir, one_thread):
    """(TransformerLens, nnsight) over the tiny Qwen 3."""
    return wb.load(str(tiny_qwen3_dir)), wb.load(str(tiny_qwen3_dir), backend="nnsight")


@pytest.fixture(scope="module")
def qwen3_bridge(tiny_qwen3_dir, qwen3_pair):
    """The tiny Qwen 3 on the bridge backend."""
    return wb.load(str(tiny_qwen3_dir), backend="bridge")


@pytest.fixture(scope="module")
def tiny_gemma2_dir(tmp_path_factory) -> Path:
    """A tiny random Gemma 2 with smollm2's tokenizer: 2 layers (sliding, full; window 4), 4 heads over 2 kv heads,
    soft caps on the attention scores and the logits small enough that their slopes are far from 1."""
    from transformers import Gemma2Config

    cfg = Gemma2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, vocab_size=49152, max_position_embeddings=128,
                       sliding_window=4, query_pre_attn_scalar=8, attn_logit_softcapping=2.0,
                       final_logit_softcapping=3.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.architectures = ["Gemma2ForCausalLM"]
    return _tiny_with_random_gains(tmp_path_factory.mktemp("tiny-gemma2"), cfg)


@pytest.fixture(scope="module")
def gemma2_pair(tiny_gemma2_dir, one_thread):
    """(TransformerLens, nnsight) over the tiny Gemma 2."""
    return wb.load(str(tiny_gemma2_dir)), wb.load(str(tiny_gemma2_dir), backend="nnsight")


@pytest.fixture(scope="module")
def tiny_olmo2_dir(tmp_path_factory) -> Path:
    """A tiny random OLMo-2 with smollm2's tokenizer: norms after each sublayer only, q/k norms over the whole
    projection; 4 heads, no grouped kv heads (TransformerLens' OLMo-2 weight conversion gives none: it misses
    _W_K/_W_V). Weights drawn 5x wider than the default: at the default the clean and corrupted logit differences
    are 0.005 apart, and patching's normalised effect divides float32 rounding by that."""
    from transformers import Olmo2Config

    cfg = Olmo2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=49152, max_position_embeddings=128, tie_word_embeddings=False,
                      initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.architectures = ["Olmo2ForCausalLM"]
    return _tiny_with_random_gains(tmp_path_factory.mktemp("tiny-olmo2"), cfg)


@pytest.fixture(scope="module")
def olmo2_pair(tiny_olmo2_dir, one_thread):
    """(TransformerLens, nnsight) over the tiny OLMo-2."""
    return wb.load(str(tiny_olmo2_dir)), wb.load(str(tiny_olmo2_dir), backend="nnsight")


@pytest.fixture(scope="module")
def tiny_phi3_dir(tmp_path_factory) -> Path:
    """A tiny random Phi-3 with smollm2's tokenizer: fused q/k/v and gate/up projections, 4 heads over 2 kv heads."""
    from transformers import Phi3Config

    cfg = Phi3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=49152, max_position_embeddings=128, tie_word_embeddings=False,
                     bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.architectures = ["Phi3ForCausalLM"]
    return _tiny_with_random_gains(tmp_path_factory.mktemp("tiny-phi3"), cfg)


@pytest.fixture(scope="module")
def phi3_pair(tiny_phi3_dir, one_thread):
    """(TransformerLens, nnsight) over the tiny Phi-3."""
    return wb.load(str(tiny_phi3_dir)), wb.load(str(tiny_phi3_dir), backend="nnsight")


def close(got: torch.Tensor, ref: torch.Tensor) -> None:
    """``got`` equals ``ref`` within REL_TOL of ref's own scale; neither may be all zeros (a backend that gave
    zeros, or a reference that cannot tell one from the truth, fails)."""
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = float(ref.abs().max())
    assert scale > 0 and float(got.abs().max()) > 0, "an all-zero result compares nothing"
    assert torch.isfinite(got).all()
    diff = float((got - ref).abs().max())
    assert diff <= REL_TOL * scale, f"max difference {diff:.3g} against scale {scale:.3g}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("engine", list(ENGINES))
def test_engine_on_backend(models, reference, engine, backend):
    model = models[backend]
    if engine in REFUSED[backend]:
        with pytest.raises(BackendError) as err:
            ENGINES[engine](model)
        msg = str(err.value)
        assert "\n" not in msg and f"the {backend} backend" in msg, msg
        assert engine.split("/")[0] in msg and REFUSED[backend][engine] in msg, msg
        return
    close(torch.as_tensor(ENGINES[engine](model)).float(), reference(engine))


# the families beside the tiny Llama with a module fixture pair ``<family>_pair`` (TransformerLens, nnsight), and
# what each brings that the nnsight backend must serve
NNSIGHT_FAMILIES = {
    "gemma3": "per-kind rotary tables and sliding windows, q/k norms, post-norms, 1 + w gains",
    "qwen3": "q/k norms before the transpose, gains w",
    "gemma2": "soft caps on the attention scores and the logits, post-norms, 1 + w gains, a scaled embedding, "
              "query_pre_attn_scalar, a sliding window shorter than the prompt",
    "olmo2": "norms after each sublayer only, q/k norms over the whole projection before the head split, the MLP "
             "reading the residual itself",
    "phi3": "fused q/k/v and gate/up projections: TransformerLens' hook_q/k/v, hook_pre and hook_pre_linear are "
            "slices of one module value each",
}


@pytest.mark.parametrize("family,engine", [(f, e) for f in NNSIGHT_FAMILIES for e in ENGINES])
def test_engine_on_nnsight_family(request, family, engine):
    """Every engine on the nnsight backend over each family gives TransformerLens' numbers on the same weights."""
    tl, nn = request.getfixturevalue(f"{family}_pair")
    close(torch.as_tensor(ENGINES[engine](nn)).float(), torch.as_tensor(ENGINES[engine](tl)).float())


# what the bridge refuses on a Gemma 3, with the reason its line gives (every other engine: TransformerLens' numbers)
REFUSED_BRIDGE_GEMMA3: dict[str, str] = {}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_engine_on_bridge_gemma3(gemma3_pair, gemma3_bridge, engine):
    """Every engine on the bridge backend over a Gemma 3 (per-layer rotary tables and windows, q/k norms,
    post-norms, 1 + w gains) gives TransformerLens' numbers on the same weights, or refuses in one line."""
    tl, bridge = gemma3_pair[0], gemma3_bridge
    if engine in REFUSED_BRIDGE_GEMMA3:
        with pytest.raises(BackendError) as err:
            ENGINES[engine](bridge)
        msg = str(err.value)
        assert "\n" not in msg and "the bridge backend" in msg and REFUSED_BRIDGE_GEMMA3[engine] in msg, msg
        return
    close(torch.as_tensor(ENGINES[engine](bridge)).float(), torch.as_tensor(ENGINES[engine](tl)).float())


@pytest.mark.parametrize("engine", list(ENGINES))
def test_engine_on_bridge_qwen3(qwen3_pair, qwen3_bridge, engine):
    """The bridge on a Qwen 3 (per-head q/k norms, which its caches hold head first): TransformerLens' numbers for
    every engine (15 gave other numbers without refusing before: the q/k norms were left out)."""
    close(torch.as_tensor(ENGINES[engine](qwen3_bridge)).float(),
          torch.as_tensor(ENGINES[engine](qwen3_pair[0])).float())


def test_bridge_gemma3_count():
    """The bridge x Gemma 3 column: 39 engines, every one compared but REFUSED_BRIDGE_GEMMA3's."""
    assert len(ENGINES) - len(REFUSED_BRIDGE_GEMMA3) == len(ENGINES) == 39


def test_every_readme_row_is_checked_and_the_counts_are_this_files():
    """README's table has exactly ROWS' rows, every engine here belongs to one, and the counts README states
    ("N comparisons and M refusals per backend") are those of ENGINES and REFUSED."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    section = text[text.index("### Engines x backends"):]
    section = section[:section.index("\n## ")]
    rows = [line.split("|")[1].strip() for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| engine")]
    assert [r.split(" (")[0] for r in rows] == list(ROWS), rows
    assert sorted(e for es in ROWS.values() for e in es) == sorted(ENGINES)
    from circuits.edges import EDGE_METHODS

    assert sorted(CIRCUIT_METHODS) == sorted(EDGE_METHODS)
    flat = " ".join(section.split())  # the sentence may wrap
    for backend in BACKENDS:
        n_ref = len(REFUSED[backend])
        m = re.search(rf"{backend}: (\d+) engines checked, (\d+) with the TransformerLens backend's numbers, "
                      rf"(\d+) refus", flat)
        assert m, f"README states no counts for {backend}"
        assert tuple(int(x) for x in m.groups()) == (len(ENGINES), len(ENGINES) - n_ref, n_ref)


# -- nnsight remote: the same trace code, only the transport swapped ------------------------------
def test_remote_runs_the_local_trace_code(models, monkeypatch):
    """With remote=True every trace (the weights', the gradients' too) goes to the transport, and the numbers
    are the local ones: DPA and a gradient method need nothing outside a trace."""
    import core.models.remote as remote

    nn = models["nnsight"]
    calls: list[tuple[bool, tuple]] = []
    original = nn.lm.trace

    def recording_trace(*args, remote: bool = False, **kwargs):  # the transport: always local here
        calls.append((remote, tuple(a.shape for a in args)))
        return original(*args, remote=False, **kwargs)

    def run() -> list[torch.Tensor]:
        return [wb.patch(nn, CLEAN, CORRUPTED, " Mary", " John", site="mlps").effect,
                ENGINES["dpa/head"](nn), ENGINES["gradient/head"](nn), ENGINES["integrated_gradients/token"](nn)]

    monkeypatch.setattr(nn.lm, "trace", recording_trace)
    monkeypatch.setattr(nn, "_param_cache", None)  # the weights are read again, by a trace
    monkeypatch.setattr(nn, "_rope_cache", {})
    local = run()
    n_local = len(calls)
    monkeypatch.setattr(nn, "remote", True)
    monkeypatch.setattr(remote, "check_ndif", lambda *a, **k: None)  # NDIF "answers"
    monkeypatch.setattr(nn, "_ndif_checked", False)
    monkeypatch.setattr(nn, "_param_cache", None)
    monkeypatch.setattr(nn, "_rope_cache", {})
    sent = run()
    assert n_local > 4 and [c[0] for c in calls] == [False] * n_local + [True] * n_local  # every trace "remote"
    assert [c[1] for c in calls[:n_local]] == [c[1] for c in calls[n_local:]]  # the same traces
    for a, b in zip(local, sent, strict=True):
        assert torch.equal(a, b)


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
