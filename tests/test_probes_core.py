"""Probes, control task, geometry and the ICL solvers on synthetic data (no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attribution.probes.activations import load_dataset, parse_layers, word_type
from attribution.probes.geometry import gdv, rdm, rsa, rsa_matrix
from attribution.probes.probe import bootstrap_ci, control_labels, probe_layers, split_examples
from core.errors import DatasetError, RangeError


def _blobs(n=160, d=12, sep=3.0, seed=0):
    rng = np.random.default_rng(seed)
    y = np.array(["a", "b"] * (n // 2))
    X = rng.normal(size=(n, d))
    X[y == "b", 0] += sep
    return torch.tensor(X, dtype=torch.float32), y


def test_probe_reads_a_separable_property_and_control_is_lower():
    X, y = _blobs()
    words = [f"w{i}" for i in range(len(y))]  # every example its own word type: control = chance
    noise = torch.randn_like(X)
    res = probe_layers({"signal": X, "noise": noise}, y, words, n_boot=100)
    sig, noi = res.layers
    assert sig.accuracy > 0.9 and sig.selectivity > 0.3
    assert sig.ci_low <= sig.accuracy <= sig.ci_high
    assert abs(noi.accuracy - 0.5) < 0.2
    assert res.best.hook == "signal"
    out = res.to_json()
    assert out["best_layer"] == "signal" and {
        "accuracy",
        "control_accuracy",
        "selectivity",
        "gdv",
        "ci_low",
        "ci_high",
    } <= set(out["layers"][0])
    assert len(res.plot().data) == 4


def test_split_is_by_example_and_stratified():
    y = np.array(["a"] * 30 + ["b"] * 70)
    train, test = split_examples(y, 0.3, 0)
    assert not set(train) & set(test) and len(train) + len(test) == 100
    assert abs((y[test] == "a").mean() - 0.3) < 0.05


def test_control_labels_are_a_function_of_word_type():
    words = ["x", "y", "x", "z", "y", "x"] * 20
    y = np.array(["p", "n"] * 60)
    ctrl = control_labels(words, y, seed=3)
    for w in set(words):
        assert len({c for c, ww in zip(ctrl, words, strict=True) if ww == w}) == 1
    assert set(ctrl) <= {"p", "n"}


def test_bootstrap_ci_brackets_and_narrows_with_n():
    rng = np.random.default_rng(0)
    small = rng.random(40) < 0.8
    big = rng.random(4000) < 0.8
    lo1, hi1 = bootstrap_ci("logistic", small, np.ones(40, bool), 300)
    lo2, hi2 = bootstrap_ci("logistic", big, np.ones(4000, bool), 300)
    assert lo1 <= small.mean() <= hi1 and (hi2 - lo2) < (hi1 - lo1)


def test_gdv_negative_for_separated_classes_and_near_zero_for_random():
    X, y = _blobs(sep=6.0, d=4)
    assert gdv(X, y) < -0.1
    rng = np.random.default_rng(1)
    assert abs(gdv(X, rng.permutation(y))) < 0.05


def test_rsa_identity_and_invariance():
    X, _ = _blobs(n=40)
    assert rsa(rdm(X), rdm(X)) == pytest.approx(1.0)
    assert rsa(rdm(X), rdm(3 * X + 1)) == pytest.approx(1.0, abs=1e-6)  # RDMs ignore scale and offset
    table = rsa_matrix({"a": X, "b": torch.randn_like(X)})
    assert table.loc["a", "a"] == pytest.approx(1.0) and abs(table.loc["a", "b"]) < 0.3


def test_load_dataset_checks(tmp_path):
    good = tmp_path / "g.jsonl"
    good.write_text("\n".join(json.dumps({"text": f"t {i}.", "label": "ab"[i % 2]}) for i in range(10)))
    ds = load_dataset(good)
    assert len(ds) == 10 and ds.classes == ["a", "b"] and ds.words[0] == "0"
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match="empty"):
        load_dataset(empty)
    one = tmp_path / "o.jsonl"
    one.write_text("\n".join(json.dumps({"text": "x", "label": "a"}) for _ in range(5)))
    with pytest.raises(DatasetError, match="one class"):
        load_dataset(one)
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(DatasetError, match="needs"):
        load_dataset(bad)
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "missing.jsonl")


def test_word_type_and_layers():
    assert word_type("The movie was Great!", None) == "great"
    assert word_type("anything", "Marked") == "marked"
    assert parse_layers("all", 3) == [0, 1, 2] and parse_layers("0,2", 3) == [0, 2]
    assert parse_layers("1-2", 3) == [1, 2]
    with pytest.raises(RangeError):
        parse_layers("5", 3)
    with pytest.raises(RangeError):
        parse_layers("x", 3)


def test_icl_solvers_converge_and_compare_finds_the_generating_solver():
    from attribution.probes.icl_readout import compare, solver_predictions

    gen = torch.Generator().manual_seed(0)
    xs = torch.randn(64, 10, 3, generator=gen)
    ys = torch.einsum("bpd,bd->bp", xs, torch.randn(64, 3, generator=gen))
    sol = solver_predictions(xs, ys, iters=64, lam=1e-4)
    late = ((sol["ridge"][0, :, 6:] - ys[:, 6:]) ** 2).mean()
    assert late < 1e-3  # noiseless linear data: exact after d points
    assert ((sol["gd"][-1] - sol["ridge"][0])[:, 6:] ** 2).mean() < 0.05  # GD approaches least squares
    fake_layers = {"0": sol["gd"][0], "1": sol["precond-richardson"][4], "2": sol["precond-richardson"][20]}
    fits, prof, _ = compare(fake_layers, ys, {k: v for k, v in sol.items() if k != "gd"})
    best = min(fits, key=lambda f: f.distance)
    assert prof.shape == (3, 10)
    assert {f.solver for f in fits} == {"richardson", "precond-richardson", "ridge", "kernel-ridge"}
    pr = next(f for f in fits if f.solver == "precond-richardson")
    assert pr.best_iterates[1:] == [5, 21] and pr.per_layer[1] == pytest.approx(0.0, abs=1e-6)
    assert best.solver in ("precond-richardson", "richardson")
