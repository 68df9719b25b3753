"""Every public function of the notebook API (``workbench.__all__``) checks its arguments: a missing or unknown
argument, a wrong type and an out-of-range value are each a typed error (a WorkbenchError that is also a
TypeError or a ValueError) with one line naming the function and the argument, raised before any work.

The cases are generated from the functions themselves (their signatures, type hints and ``__checks__`` rules),
so a function added to the facade is covered the day it is added: it only needs a valid call in VALID."""

from __future__ import annotations

import inspect
import math

import pytest

import workbench as wb
from core.errors import ArgumentError, ArgumentTypeError, WorkbenchError
from core.models.zoo import ModelEntry
from workbench.arguments import Rule, type_refusals

TOY = "ioi-attn-1l2h"
P = "N1 and N2 then N2"
ROWS = [{"prompt": P, "target": " N1", "foil": " N2"}]
PROBE_ROWS = [{"text": f"N{i} and N{i + 1}", "label": ("even", "odd")[i % 2]} for i in range(1, 9)]


PUBLIC = sorted(n for n in wb.__all__ if inspect.isfunction(getattr(wb, n)))


@pytest.fixture(scope="module")
def m():
    return wb.load(TOY)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    # a case the checker let through must not reach the network
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def valid(name: str, m) -> dict:
    """A call of each public function that passes the checks (only ever run with one argument spoiled)."""
    entry = ModelEntry(name="x", kind="toy", params=1, source="test", loader="core.models.toy_checkpoint:load")
    spec = {"kind": "sleep", "seconds": 0.01, "steps": 1}
    model_prompt = {"model": m, "prompt": P}
    return {
        "list_models": {}, "models": {}, "runs": {}, "jobs": {}, "saes": {},
        "register": {"entry": entry},
        "export": {"run": "no-such-run", "fmt": "csv", "path": "never-written.csv"},
        "load": {"name_or_path": TOY},
        "remote_model": {"repo_id": "openai-community/gpt2"},
        "attribute": {**model_prompt, "target": " N1"},
        "lens": model_prompt, "dla": model_prompt, "attention": model_prompt, "flow": model_prompt,
        "attribute_set": {"model": m, "prompts": ROWS},
        "circuit": {"model": m, "prompts": ROWS},
        "patch": {"model": m, "clean": P, "corrupted": "N2 and N1 then N1", "target": " N1"},
        "path_patch": {"model": m, "clean": P, "corrupted": "N2 and N1 then N1", "target": " N1"},
        "probe": {"model": m, "data": PROBE_ROWS},
        "feature_attribution": {**model_prompt, "saes": "no-such-sae"},
        "feature_graph": {**model_prompt, "saes": "no-such-sae"},
        "sae_dashboards": {"sae": "no-such-sae"}, "sae_features": {"sae": "no-such-sae"},
        "sae_steer": {"model": m, "sae": "no-such-sae", "feature": 0, "prompt": P},
        "job_spec": {"kind": "sleep"},
        "run_job": {"spec": spec}, "estimate_job": {"spec": spec}, "submit_job": {"spec": spec},
        "vit_explain": {"model": "vit-synth", "image": "no-such.png"},
    }[name]


def assert_typed(exc_info, *words: str, kind: type = Exception) -> None:
    exc = exc_info.value
    assert isinstance(exc, WorkbenchError) and isinstance(exc, (ValueError, TypeError)), repr(exc)
    assert isinstance(exc, kind), repr(exc)
    text = str(exc)
    assert text and "\n" not in text, text
    for w in words:
        assert w in text, text


def test_every_public_function_is_checked_and_listed():
    defined = {n for n, f in vars(wb).items() if inspect.isfunction(f) and not n.startswith("_")
               and f.__module__ == "workbench"}
    assert defined <= set(wb.__all__), sorted(defined - set(wb.__all__))
    assert len(PUBLIC) >= 24
    for name in PUBLIC:
        assert hasattr(getattr(wb, name), "__checks__"), f"wb.{name} has no @checked"


@pytest.mark.parametrize("name", PUBLIC)
def test_unknown_keyword(name, m):
    with pytest.raises(ArgumentTypeError) as info:
        getattr(wb, name)(**valid(name, m), no_such_argument=1)
    assert_typed(info, f"wb.{name}", "no_such_argument")


@pytest.mark.parametrize("name", PUBLIC)
def test_missing_and_surplus_arguments(name, m):
    fn = getattr(wb, name)
    sig = inspect.signature(fn)
    required = [p.name for p in sig.parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    good = valid(name, m)
    assert set(required) <= set(good), f"VALID['{name}'] lacks {set(required) - set(good)}"
    for r in required:
        with pytest.raises(ArgumentTypeError) as info:
            fn(**{k: v for k, v in good.items() if k != r})
        assert_typed(info, f"wb.{name}", r)
    positional = [p for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    with pytest.raises(ArgumentTypeError) as info:
        fn(*[object()] * (len(positional) + 1))
    assert_typed(info, f"wb.{name}")


def _spoilers(name: str) -> list[tuple[str, object]]:
    """(argument, a value it must refuse) for every named argument and every declared extra keyword."""
    checks = getattr(wb, name).__checks__
    out = []
    for pname, param in checks.signature.parameters.items():
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        rule = checks.rules.get(pname)
        hint = checks.hints.get(pname)
        bad = rule.refused() if rule is not None else type_refusals(hint)
        assert bad, f"wb.{name}: argument {pname} is checked by nothing (give it a type hint or a rule)"
        out += [(pname, v) for v in bad]
    if isinstance(checks.extras, dict):
        for key, check in checks.extras.items():
            out += [(key, v) for v in (check.refused() if isinstance(check, Rule) else type_refusals(check))]
    return out


@pytest.mark.parametrize("name", PUBLIC)
def test_wrong_types_and_out_of_range(name, m):
    fn = getattr(wb, name)
    good = valid(name, m)
    for pname, value in _spoilers(name):
        with pytest.raises((ArgumentTypeError, ArgumentError)) as info:
            fn(**{**good, pname: value})
        assert_typed(info, f"wb.{name}", pname)


# The cases of issue 41, class 6, as a user typed them.
def test_issue_cases(m):
    cases = [
        (lambda: wb.load(123), ArgumentTypeError, "name_or_path"),
        (lambda: wb.load(TOY, device="tpu"), ArgumentError, "device 'tpu'"),
        (lambda: wb.load(TOY, bogus=1), ArgumentTypeError, "bogus"),
        (lambda: wb.attribute(None, P, target=" N1"), ArgumentTypeError, "model"),
        (lambda: wb.attribute(TOY, P, target=" N1"), ArgumentTypeError, f"wb.load('{TOY}')"),
        (lambda: wb.attribute(m, [P], target=" N1"), ArgumentTypeError, "prompt must be a string"),
        (lambda: wb.attribute_set(m, [{"prompt": P}]), ArgumentError, "prompts[0] has no 'target'"),
        (lambda: wb.attribute_set(m, ROWS, limit=-1), ArgumentError, "limit"),
        (lambda: wb.feature_graph(m, P, saes=None), ArgumentTypeError, "saes"),
        (lambda: wb.lens(m, P, top_k=0), ArgumentError, "top_k"),
        (lambda: wb.lens(m, P, top_k=-1), ArgumentError, "top_k"),
        (lambda: wb.job_spec("nosuch"), ArgumentError, "kind 'nosuch'"),
        (lambda: wb.job_spec("faithfulness", model=5, rows=ROWS, methods=["dpa"]), ArgumentTypeError, "model"),
        (lambda: wb.attribute(m, P, method="integrated_gradients", bogus=1), ArgumentTypeError, "bogus"),
        (lambda: wb.circuit(m, ROWS, bogus=1), ArgumentTypeError, "bogus"),
        (lambda: wb.patch(m, P, "N2 and N1 then N1", " N1", bogus=1), ArgumentTypeError, "bogus"),
        (lambda: wb.sae_steer(m, "x", 0, P, alpha=math.nan), ArgumentError, "alpha"),
    ]
    import torch

    if not torch.cuda.is_available():
        cases.append((lambda: wb.load(TOY, device="cuda"), ArgumentError, "no CUDA"))
    for call, kind, word in cases:
        with pytest.raises(kind) as info:
            call()
        assert_typed(info, word)


def test_store_and_board_lookups_are_typed(tmp_path):
    """The objects the facade returns refuse a non-name in one typed line too (wb.runs().get(None) was a
    TypeError from pathlib)."""
    from core.errors import RunStoreError

    for bad in (None, 5, "", "../x"):
        with pytest.raises(RunStoreError, match="no run"):
            wb.runs(str(tmp_path / "runs")).get(bad)
    with pytest.raises(WorkbenchError):
        wb.jobs(str(tmp_path / "runs")).get(None)


def test_engine_refusals_are_value_errors_too(m):
    """An engine's own WorkbenchError (a token that is not one, an unknown method or model) leaves the facade as
    its class, made also a ValueError."""
    from core.errors import MethodError, TokenError, UnknownModelError

    for call, cls in [(lambda: wb.attribute(m, P, target="not a token at all"), TokenError),
                      (lambda: wb.attribute(m, P, target=" N1", method="nosuch"), MethodError),
                      (lambda: wb.load("no-such-model-anywhere"), UnknownModelError)]:
        with pytest.raises(cls) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert_typed(info)


def test_checked_calls_still_work(m):
    assert wb.attribute(m, P, target=" N1").scores is not None
    assert wb.lens(m, P, top_k=3) is not None and wb.dla(m, P) is not None
    assert len(wb.attribute_set(m, ROWS, method="random", limit=1).results) == 1
    assert wb.job_spec("sleep", seconds=0.01, steps=2).steps == 2
    path = wb.path_patch(m, P, "N2 and N1 then N1", " N1", " N2", sender=(0, 1))
    assert set(path) >= {"effect"} and path["effect"] == path["effect"]  # a finite number
    probe = wb.probe(m, PROBE_ROWS, n_boot=10)
    assert probe.to_json()["classes"] == ["even", "odd"] and len(probe.to_json()["layers"]) == m.arch.n_layers
