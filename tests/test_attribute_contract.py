"""The engine contract: the metric comes from the method's own forward, results rebuild from JSON with their
axes checked, methods declare their capabilities, one metric function, no ``.tl`` outside workbench/."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from test_baselines_tiny import PROMPT, tiny_llama

from attribution import AttributionResult, attribute, attribute_levels
from attribution.methods import METHODS
from core.errors import WorkbenchError

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def llama():
    return tiny_llama()


def _count_forwards(model, monkeypatch) -> list[int]:
    calls = [0]
    forward = model.tl.forward

    def counted(*args, **kwargs):
        calls[0] += 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(model.tl, "forward", counted)
    return calls


@pytest.mark.parametrize("method,level,forwards", [
    ("gradient", "token", 1), ("input_x_gradient", "head", 1), ("atp", "neuron", 1), ("dpa", "token", 1),
    ("integrated_gradients", "token", 2),  # the path (one batch of steps) + both end points in one batch
])
def test_attribute_takes_the_metric_from_the_methods_own_forward(llama, monkeypatch, method, level, forwards):
    enc = llama.encode(PROMPT, "F", "C")
    logits = llama.logits(enc.tokens)[0, -1]
    want = float(logits[enc.target_id] - logits[enc.foil_id])
    calls = _count_forwards(llama, monkeypatch)
    res = attribute(llama, PROMPT, "F", "C", method=method, level=level, steps=20) if method == "integrated_gradients" \
        else attribute(llama, PROMPT, "F", "C", method=method, level=level)
    assert calls[0] == forwards
    assert res.target_logit == pytest.approx(want, abs=1e-5)


def test_one_pass_levels(llama, monkeypatch):
    assert METHODS["dpa"].one_pass and METHODS["ifr"].one_pass and not METHODS["gradient"].one_pass
    calls = _count_forwards(llama, monkeypatch)
    got = attribute_levels(llama, PROMPT, "F", "C", method="dpa", levels=("token", "head", "neuron"))
    assert calls[0] == 1 and set(got) == {"token", "head", "neuron"}
    for level, res in got.items():
        single = attribute(llama, PROMPT, "F", "C", method="dpa", level=level)
        assert torch.allclose(res.scores, single.scores, atol=1e-6) and res.target_logit == single.target_logit
    per_level = attribute_levels(llama, PROMPT, "F", "C", method="gradient", levels=("token", "head"))
    assert per_level["head"].scores.shape[0] == llama.arch.n_layers


def test_capabilities():
    assert METHODS["integrated_gradients"].convergence_delta and METHODS["integrated_gradients"].complete
    assert METHODS["dpa"].complete and not METHODS["dpa"].convergence_delta
    assert not any(METHODS[m].convergence_delta for m in ("gradient", "atp", "random", "activation_patching"))


def test_result_round_trips_through_json_and_checks_its_axes(llama):
    res = attribute(llama, PROMPT, "F", "C", method="gradient", level="head")
    back = AttributionResult.from_json(res.to_json() | {"unknown_field": 1})
    assert torch.allclose(back.scores, res.scores) and back.axes == res.axes and back.tokens == res.tokens
    assert back.target_logit == res.target_logit and back.level == "head"
    bad = res.to_json()
    with pytest.raises(WorkbenchError, match="does not match the axes"):
        AttributionResult.from_json(bad, scores=torch.zeros(3, 4))
    with pytest.raises(WorkbenchError, match="entries on axis 'query'"):
        AttributionResult.from_json(bad, scores=torch.zeros(2, 4, 3))
    with pytest.raises(WorkbenchError, match="without"):
        AttributionResult.from_json({k: v for k, v in bad.items() if k != "axes"})


def test_one_metric_function():
    from circuits.tools.common import Prompts, logit_diff
    from core.metric import logit_diff as metric

    logits = torch.randn(3, 5, 7)
    t, f = torch.tensor([1, 2, 3]), torch.tensor([0, 6, 5])
    want = logits[:, -1].gather(1, t[:, None])[:, 0] - logits[:, -1].gather(1, f[:, None])[:, 0]
    assert torch.equal(metric(logits[:, -1], t, f), want)
    assert torch.equal(logit_diff(logits, Prompts(torch.zeros(3, 5), t, f)), want)
    assert torch.equal(metric(logits[:, -1], 2, None), logits[:, -1, 2])
    # written once: the engines' metrics all call it
    for path in ("attribution/baselines/common.py", "attribution/__init__.py", "circuits/tools/common.py",
                 "circuits/counterfactual.py"):
        assert "from core.metric import logit_diff" in (ROOT / path).read_text(), path


def test_no_tl_outside_workbench():
    # scripts/bench_generate.py times TransformerLens' own generate loop against core/models/decode.py:
    # it must reach it
    out = subprocess.run(["grep", "-rnE", r"\.tl\b", "--include=*.py", "--exclude=bench_generate.py", "app",
                          "attribution", "circuits", "scripts"],
                         cwd=ROOT, capture_output=True, text=True).stdout
    assert out == "", out


def test_toy_models_build_without_the_deprecation_warning():
    """TransformerLens 3.9 deprecates HookedTransformer; we keep it (see core/models/backends.py) and silence
    that one warning where we build it, and nothing else."""
    import warnings

    from transformer_lens import HookedTransformerConfig

    from core.models.hooked import hooked_transformer

    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=8, d_head=4, n_heads=2, d_vocab=5, attn_only=True)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        hooked_transformer(cfg)
        tiny_llama(seed=1)
        warnings.warn("another deprecation", DeprecationWarning, stacklevel=1)
    messages = [str(w.message) for w in got]
    assert not any("HookedTransformer is deprecated" in m for m in messages), messages
    assert "another deprecation" in messages


def test_shapes_are_checked_at_run_time_in_the_tests(llama):
    """tests/conftest.py installs jaxtyping's import hook with beartype on the engine interface: a tensor of
    the wrong rank or with dimensions that disagree within one call fails loudly, before any arithmetic."""
    from jaxtyping import TypeCheckError

    from attribution.baselines.integrated_gradients import path_points
    from core.metric import logit_diff

    with pytest.raises(TypeCheckError):
        llama.final_logits(torch.zeros(2, llama.arch.d_model))  # no position axis
    with pytest.raises(TypeCheckError):
        llama.head_writes(torch.zeros(1, 3, llama.arch.n_heads), 0)  # z without d_head
    with pytest.raises(TypeCheckError):
        logit_diff(torch.zeros(2, 3, 7), 1)  # logits with a position axis
    with pytest.raises(TypeCheckError):
        logit_diff(torch.zeros(2, 7), torch.tensor([1, 2, 3]))  # 3 targets for a batch of 2
    with pytest.raises(TypeCheckError):
        path_points("20", "uniform")
    assert llama.final_logits(torch.zeros(2, 3, llama.arch.d_model)).shape == (2, llama.arch.d_vocab)


def test_one_method_table_serves_every_dispatcher():
    """One table (attribution.methods.TABLE) declares every method once; attribute's METHODS, the edge scorers'
    EDGE_METHODS, the feature graph's and feature curve's methods and the ViT methods are its views. DPA is one entry
    from tokens to graph edges, dictionary features and image patches."""
    import importlib

    import attribution.vit
    from attribution.features import faithfulness
    from attribution.methods import EDGE, FEATURE, LEVEL_INPUTS, PATCH, TABLE, canonical
    from attribution.vit.methods import METHODS as VIT
    from circuits import feature_graph
    from circuits.edges import EDGE_METHODS

    assert TABLE["dpa"].levels == ("token", "head", "qk", "neuron", EDGE, FEATURE, PATCH)
    assert feature_graph.METHODS == ("dpa", "gradient") and faithfulness.METHODS == ("dpa", "gradient", "random")
    assert attribution.vit.METHODS == tuple(VIT)
    for name in feature_graph.METHODS:  # every feature-level implementation the table names exists
        module, function = TABLE[name].impls[FEATURE].split(":")
        assert callable(getattr(importlib.import_module(module), function))
    assert set(TABLE["dpa"].levels) <= set(LEVEL_INPUTS)
    for name, spec in METHODS.items():
        assert TABLE[name].impls[spec.levels[0]] == spec.impl and set(spec.levels) <= {"token", "head", "qk", "neuron"}
    for name, method in EDGE_METHODS.items():
        assert TABLE[name].impls[EDGE] == f"{method.module}:{method.function}"
    for name, module in VIT.items():
        assert TABLE[canonical(name)].impls[PATCH] == f"attribution.vit.methods.{module}:run"
    assert {n for n, s in TABLE.items() if len({lv in LEVEL_INPUTS and LEVEL_INPUTS[lv] for lv in s.levels}) > 1} \
        >= {"dpa", "dpa_path", "random", "integrated_gradients", "rollout", "ifr", "activation_patching"}


def test_edge_is_the_old_name_of_the_qk_level(llama):
    """"edge" now means the component graph's edge; the query-key level is "qk", and attribute still takes
    "edge" for it (same scores), as stored runs made before the rename reopen as qk."""
    from attribution import get_method

    qk = attribute(llama, PROMPT, "F", "C", method="dpa", level="qk")
    old = attribute(llama, PROMPT, "F", "C", method="dpa", level="edge")
    assert old.level == "qk" and torch.equal(old.scores, qk.scores) and qk.axes == ("layer", "head", "query", "key")
    assert get_method("atp", "edge")[1] is get_method("atp", "qk")[1]
    stored = {**qk.to_json(), "level": "edge"}
    assert AttributionResult.from_json(stored, scores=qk.scores).level == "qk"
    got = attribute_levels(llama, PROMPT, "F", "C", method="dpa", levels=("token", "edge"))
    assert set(got) == {"token", "qk"} and torch.allclose(got["qk"].scores, qk.scores, atol=1e-6)
