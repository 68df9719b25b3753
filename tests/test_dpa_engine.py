"""DPA on tiny random models: completeness, equality with a brute-force autograd reference, shapes."""

from __future__ import annotations

import pytest
import torch

from attribution.dpa import COMPLETE, LEVELS, dpa_all, dpa_batch, dpa_scores, memory_estimate
from attribution.dpa.reference import dpa_reference
from attribution.dpa.tiny import save_tiny_llama, tiny_gpt2
from attribution.methods import LEVEL_AXES
from core.errors import MethodError, RangeError

PROMPT_LLAMA = "The capital of France is a b c"
PROMPT_SYM = "a b c d e f"

pytestmark = pytest.mark.usefixtures("one_thread")




@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    import workbench as wb

    return wb.load(str(save_tiny_llama(tmp_path_factory.mktemp("dpa-llama") / "m", seed=1, layers=3)))


@pytest.fixture(scope="module")
def gpt2_gelu():
    return tiny_gpt2(seed=2, act_fn="gelu_new", layers=3)


@pytest.fixture(scope="module")
def gpt2_relu():
    return tiny_gpt2(seed=3, act_fn="relu")


def _cases(request):
    return [
        (request.getfixturevalue("llama"), PROMPT_LLAMA, "Paris", "London"),
        (request.getfixturevalue("llama"), PROMPT_LLAMA, "Paris", None),
        (request.getfixturevalue("gpt2_gelu"), PROMPT_SYM, "g", "h"),
        (request.getfixturevalue("gpt2_relu"), PROMPT_SYM, "g", None),
    ]


def _logit(model, enc) -> float:
    logits = model.logits(enc.tokens)[0, -1].double()
    value = logits[enc.target_id] - (logits[enc.foil_id] if enc.foil_id is not None else 0.0)
    return float(value)


def test_completeness_llama_and_gpt2(request):
    for model, prompt, target, foil in _cases(request):
        enc = model.encode(prompt, target, foil)
        trace = dpa_all(model, enc, levels=("token",), **COMPLETE)
        logit = _logit(model, enc)
        assert abs(trace.target_logit - logit) < 1e-4
        total = float(trace["token"].double().sum()) + sum(trace.offsets.values())
        assert abs(total - logit) < 1e-4 * max(1.0, abs(logit)), (model.name, total, logit)
        # the check is not vacuous: the tokens carry the logit, and the default split breaks completeness
        assert float(trace["token"].abs().sum()) > 0.1
        default = dpa_all(model, enc, levels=("token",))
        assert abs(default.completeness_error()) > 1e-3


def test_completeness_gpt2_offsets_are_counted(gpt2_gelu):
    """GPT-2 style: biases, LayerNorm betas and positions contribute; leaving them out breaks the sum."""
    enc = gpt2_gelu.encode(PROMPT_SYM, "g")
    trace = dpa_all(gpt2_gelu, enc, levels=("token",), **COMPLETE)
    assert abs(trace.completeness_error()) < 1e-4
    for key in ("attn_out_bias", "attn_value_bias", "mlp_bias", "attn_norm_bias", "mlp_norm_bias",
                "pos_embed", "final_norm_bias", "unembed_bias"):
        assert abs(trace.offsets[key]) > 1e-4, key


def test_completeness_hf_gpt2_fixture(tiny_gpt2):
    """The GPT-2 architecture converted from a Hugging Face directory (LayerNorm, GELU, learned positions)."""
    enc = tiny_gpt2.encode("The capital of France is", " Paris", " Rome")
    trace = dpa_all(tiny_gpt2, enc, levels=("token",), **COMPLETE)
    assert abs(trace.completeness_error()) < 1e-4
    assert abs(trace.target_logit - _logit(tiny_gpt2, enc)) < 1e-4


PARAM_SETS = [
    {},
    COMPLETE,
    {"w_q": 0.7, "w_k": 0.3, "w_v": 0.2, "w_gate": 0.9, "w_up": 0.1},
    {"act_mode": "derivative"},
]


@pytest.mark.parametrize("params", PARAM_SETS, ids=["default", "complete", "custom", "derivative"])
def test_equals_bruteforce_reference(request, params):
    for model, prompt, target, foil in _cases(request):
        enc = model.encode(prompt, target, foil)
        trace = dpa_all(model, enc, **params)
        ref = dpa_reference(model, enc, **params)
        assert abs(trace.target_logit - float(ref["target_logit"])) < 1e-4
        for level in LEVELS:
            got, want = trace[level], ref[level]
            assert got.shape == want.shape, level
            scale = float(want.abs().max())
            assert scale > 1e-3, level  # the comparison is not trivially 0 == 0
            err = float((got - want).abs().max())
            assert err < 1e-4 * max(1.0, scale), (model.name, level, params, err)


def test_paths_change_scores(llama):
    """Path weights are not ignored: each one moves the token scores."""
    enc = llama.encode(PROMPT_LLAMA, "Paris")
    base = dpa_scores(llama, enc, "token").scores
    for key in ("w_q", "w_k", "w_v", "w_gate", "w_up"):
        moved = dpa_scores(llama, enc, "token", **{key: 0.0}).scores
        assert float((moved - base).abs().max()) > 1e-4, key


def test_shapes_through_attribute(llama):
    from attribution import attribute

    a = llama.arch
    enc = llama.encode(PROMPT_LLAMA, "Paris")
    s = enc.seq_len
    want = {"token": (s,), "head": (a.n_layers, a.n_heads, s), "qk": (a.n_layers, a.n_heads, s, s),
            "neuron": (a.n_layers, s, a.d_mlp)}
    trace = dpa_all(llama, enc)
    for level, shape in want.items():
        res = attribute(llama, PROMPT_LLAMA, "Paris", method="dpa", level=level)
        assert tuple(res.scores.shape) == shape and res.axes == LEVEL_AXES[level]
        assert torch.allclose(res.scores, trace[level], atol=1e-6)  # one pass for all levels = one per level
    # edges sum over keys to the head score; edges are causal
    assert torch.allclose(trace["qk"].sum(-1), trace["head"], atol=1e-5)
    assert float(trace["qk"].triu(1).abs().max()) == 0.0


def test_targets_per_layer(llama):
    enc = llama.encode(PROMPT_LLAMA, "Paris")
    trace = dpa_all(llama, enc, keep_targets=True)
    a = llama.arch
    for key in ("resid_pre", "resid_mid", "resid_post"):
        assert tuple(trace.targets[key].shape) == (a.n_layers, enc.seq_len, a.d_model)
    _, cache = llama.run_with_cache(enc.tokens, names_filter=["hook_embed"])
    token = (trace.targets["resid_pre"][0] * cache["hook_embed"][0]).sum(-1)
    assert torch.allclose(token, trace["token"], atol=1e-6)
    # above the last layer only the last position carries the target
    assert float(trace.targets["resid_post"][-1, :-1].abs().max()) == 0.0
    assert torch.equal(trace.targets["resid_pre"][1:], trace.targets["resid_post"][:-1])


def test_one_loop_per_receiver_terms_sum_to_the_update(request):
    """steps.top_down walks every residual point top-down, and its per_head attention terms (the edge
    scorer's q/k/v receivers; grouped-query heads kept apart) sum to the engine's update at every layer."""
    from attribution.dpa.params import DPAParams
    from attribution.dpa.pullback import dpa_cache, logit_target
    from attribution.dpa.steps import At, Update, top_down

    for model, prompt, target, foil in _cases(request)[::2]:
        enc = model.encode(prompt, target, foil)
        p = DPAParams.from_kwargs(w_q=0.7, w_k=0.4, w_v=0.9)
        cache = dpa_cache(model, enc.tokens, p)
        t, _ = logit_target(model, enc, cache)
        with torch.no_grad():
            summed = [s for s in top_down(model, cache, t, p) if isinstance(s, Update) and s.sublayer == "attn"]
            split = list(top_down(model, cache, t, p, per_head=True))
        n = model.arch.n_layers
        points = [s.point for s in split if isinstance(s, At)]
        assert points == [pt for la in reversed(range(n)) for pt in ((la, "post"), (la, "mid"))] + [(-1, "post")]
        terms = [s for s in split if isinstance(s, Update) and s.sublayer == "attn"]
        for whole, parts in zip(summed, terms, strict=True):
            assert parts.update.shape[0] == 3 * model.arch.n_heads
            assert float(whole.update.abs().max()) > 0.01  # not a vacuous comparison
            assert torch.allclose(parts.update.sum(0), whole.update, atol=1e-5)


def test_bad_params_and_memory(llama):
    enc = llama.encode(PROMPT_LLAMA, "Paris")
    with pytest.raises(MethodError, match="no parameter"):
        dpa_scores(llama, enc, "token", w_z=1.0)
    with pytest.raises(MethodError, match="act_mode"):
        dpa_scores(llama, enc, "token", act_mode="cubic")
    with pytest.raises(MethodError, match="number"):
        dpa_scores(llama, enc, "token", w_q="high")
    need = memory_estimate(llama, enc.seq_len)
    budget = (need["token"] + need["qk"]) / 2 / 2**30  # the qk tensor alone does not fit
    with pytest.raises(RangeError, match="levels that fit: token, head, neuron"):
        dpa_scores(llama, enc, "qk", max_gib=budget)
    assert dpa_scores(llama, enc, "head", max_gib=budget).scores.shape[0] == llama.arch.n_layers


def test_batch_equals_one_at_a_time(request):
    """Right-padded batches (prompts of different lengths, with and without foils) give each prompt's own
    scores, offsets and targets, on RoPE/GQA and on LayerNorm/learned-position models."""
    cases = {"llama": [("The capital of France is a b c", "Paris", "London"), ("a b", "Paris", None),
                       ("The capital of", "Paris", "London")],
             "gpt2_gelu": [(PROMPT_SYM, "g", "h"), ("a b c", "g", None), ("a b c d e f a b c", "h", "g")]}
    for fixture, rows in cases.items():
        model = request.getfixturevalue(fixture)
        encs = [model.encode(*row) for row in rows]
        assert len({e.seq_len for e in encs}) == 3  # padding is exercised
        for params in ({}, {"w_q": 0.7, "w_k": 0.3}):
            batch = dpa_batch(model, encs, batch_size=2, keep_targets=True, **params)
            assert len(batch) == len(encs)
            for enc, got in zip(encs, batch, strict=True):
                want = dpa_all(model, enc, keep_targets=True, **params)
                assert got.tokens == want.tokens and abs(got.target_logit - want.target_logit) < 1e-5
                for level in LEVELS:
                    assert got[level].shape == want[level].shape, level
                    assert float(want[level].abs().max()) > 1e-4, level
                    assert torch.allclose(got[level], want[level], atol=1e-5, rtol=1e-4), (fixture, level)
                for key, value in want.offsets.items():
                    assert abs(got.offsets[key] - value) < 1e-5 * max(1.0, abs(value)), key
                for key in want.targets:
                    assert torch.allclose(got.targets[key], want.targets[key], atol=1e-5), key


def test_batch_bad_input(llama):
    enc = llama.encode(PROMPT_LLAMA, "Paris")
    with pytest.raises(MethodError, match="batch_size"):
        dpa_batch(llama, [enc], batch_size=0)
    with pytest.raises(MethodError, match="no level"):
        dpa_batch(llama, [enc], levels=("tokens",))
    assert dpa_batch(llama, []) == []
    # a batch whose edge tensors exceed max_gib runs fewer prompts at a time instead of failing
    one = memory_estimate(llama, enc.seq_len)["qk"] / 2**30
    traces = dpa_batch(llama, [enc] * 3, levels=("qk",), batch_size=3, max_gib=one * 1.5)
    assert len(traces) == 3 and torch.allclose(traces[2]["qk"], traces[0]["qk"])
