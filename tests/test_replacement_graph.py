"""Transcoder sets (attribution/sae/sets.py) and the replacement-model graph (circuits/replacement.py) on a tiny
random model: a set builds in seconds and resumes by layer, a set missing or damaging a layer is refused in one
line, the replacement model reproduces the clean logits and its edges are exact linear effects, both graph methods
carry circuit-tracer's scores, and bad thresholds or sets exit 2."""

from __future__ import annotations

import shutil

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from attribution.sae.sets import SetSpec, build_set, load_set
from core.errors import ModelFileError, RangeError
from core.models.tiny import tiny_model


def _texts(n: int, seed: int = 0):
    return torch.randint(0, 10, (n, 24), generator=torch.Generator().manual_seed(seed)).tolist()


SPEC = dict(layers=[0, 1], width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128, shard_tokens=500,
            eval_windows=4, ctx=24)


@pytest.fixture(scope="module")
def model():
    return tiny_model(layers=2, d_model=16, n_ctx=32)


@pytest.fixture(scope="module")
def built(model, tmp_path_factory):
    root = tmp_path_factory.mktemp("sets") / "tiny-set"
    texts = {"train": _texts(200), "heldout": _texts(60, 1)}
    out = build_set(model, SetSpec(model=model.name, **SPEC), root=root, texts=texts)
    return root, out, texts


PROMPT = _texts(1, 5)[0][:12]


def test_set_builds_every_layer_and_resumes(model, built):
    root, out, texts = built
    assert out["complete"] and [r["layer"] for r in out["quality"]] == [0, 1]
    assert all(0 < r["l0"] <= 8 and r["explained_variance"] > 0 for r in out["quality"])
    assert not (root / ".acts").exists()  # the cached activations are deleted once the set is whole
    stamp = (root / "L0" / "workbench.json").stat().st_mtime
    again = build_set(model, SetSpec(model=model.name, **SPEC), root=root, texts=texts)
    assert again["complete"] and (root / "L0" / "workbench.json").stat().st_mtime == stamp  # skipped, not retrained
    with pytest.raises(RangeError, match="width 32"):
        build_set(model, SetSpec(model=model.name, **{**SPEC, "width": 64}), root=root, texts=texts)


def test_set_missing_or_damaged_layer_is_one_line(built, tmp_path):
    root, _, _ = built
    part = tmp_path / "part"
    shutil.copytree(root, part)
    shutil.rmtree(part / "L1")
    with pytest.raises(ModelFileError, match=r"missing layer\(s\) 1"):
        load_set(str(part))
    (part / "L1").mkdir()
    shutil.copy(root / "L0" / "cfg.json", part / "L1")
    shutil.copy(root / "L0" / "workbench.json", part / "L1")
    (part / "L1" / "sae_weights.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(ModelFileError, match="layer 1"):
        load_set(str(part))


def test_replacement_model_is_exact_and_its_edges_linear(model, built):
    from circuits.replacement import build_replacement, replacement_forward, row

    dicts = {d.layer: d for d in load_set(str(built[0]))}
    tokens = torch.tensor([PROMPT])
    rep = build_replacement(model, tokens, dicts)
    logits, _ = replacement_forward(model, rep)
    assert torch.allclose(logits.detach(), model.logits(tokens)[0], atol=1e-4)
    value = logits[-1, 3] - logits[-1, 4]
    r = row(value, rep)
    i = int(r[:rep.n_features].abs().argmax())
    layer = max(x for x in sorted(rep.layers) if sum(len(rep.layers[y]["acts"]) for y in rep.layers if y < x) <= i)
    j = i - sum(len(rep.layers[y]["acts"]) for y in rep.layers if y < layer)
    with torch.no_grad():
        rep.layers[layer]["acts"][j] = 0.0  # zero the strongest feature: the target moves by minus its edge
    moved, _ = replacement_forward(model, rep)
    assert float(moved[-1, 3] - moved[-1, 4] - value) == pytest.approx(-float(r[i]), abs=1e-4)


@pytest.mark.parametrize("method", ["gradient", "dpa"])
def test_graph_methods_carry_scores_and_check(model, built, method):
    from circuits.feature_graph import feature_graph
    from circuits.replacement import intervention_check
    from circuits.subgraph import Subgraph

    dicts = load_set(str(built[0]))
    g = feature_graph(model, PROMPT, dicts, method=method, per_layer=6, node_threshold=0.8, edge_threshold=0.98)
    sc = g.graph_scores()
    assert 0 <= sc["replacement"] <= 1 and 0 <= sc["completeness"] <= 1 and sc["computed_on"] == "unpruned"
    kinds = {n.kind for n in g.nodes}
    assert {"logits", "token"} <= kinds and g.params["method"] == method
    assert g.params["top_logits"] and g.params["top_logits"][0]["prob"] > 0
    assert Subgraph.from_json(g.to_json()).graph_scores() == sc  # the scores travel with the saved graph
    check = intervention_check(model, g, dicts, top=5)
    assert all(abs(p["real"]) < 1e3 and abs(p["predicted"]) < 1e3 for p in check["pairs"])


def test_bad_thresholds_and_methods(model, built):
    from circuits.feature_graph import feature_graph

    dicts = load_set(str(built[0]))
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(RangeError, match="node_threshold must be in"):
            feature_graph(model, PROMPT, dicts, node_threshold=bad)
    with pytest.raises(RangeError, match="unknown feature-graph method"):
        feature_graph(model, PROMPT, dicts, method="ig")


def test_cli_bad_inputs_exit_2(built, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    code, _, err = cli(monkeypatch, capsys, "sae", "build-set", "--model", "smollm2-135m", "--kind", "topk")
    assert_bad(code, err, "transcoder")
    base = ["feature-graph", "--model", "smollm2-135m", "--prompt", "a b", "--no-save"]
    code, _, err = cli(monkeypatch, capsys, *base, "--saes", f"set:{built[0]}", "--edge-threshold", "1.5")
    assert_bad(code, err, "--edge-threshold must be in (0, 1]")
    code, _, err = cli(monkeypatch, capsys, *base, "--saes", "set:no-such-set")
    assert_bad(code, err, "no dictionary set 'no-such-set'")


def _tree(root):
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_cli_bad_sets_exit_2_and_nothing_lost(built, monkeypatch, capsys, tmp_path):
    """A set missing a layer or holding a damaged one: one line, exit 2, the set untouched, no run saved."""
    root, _, _ = built
    runs = tmp_path / "runs"
    monkeypatch.setenv("WORKBENCH_RUNS", str(runs))
    part, bad = tmp_path / "part", tmp_path / "bad"
    shutil.copytree(root, part)
    shutil.rmtree(part / "L1")
    shutil.copytree(root, bad)
    (bad / "L0" / "sae_weights.safetensors").write_bytes(b"\0" * 64)
    base = ["feature-graph", "--model", "smollm2-135m", "--prompt", "a b", "--method", "gradient"]
    for where, words in ((part, (r"missing layer(s) 1",)), (bad, ("layer 0",))):
        before = _tree(where)
        code, _, err = cli(monkeypatch, capsys, *base, "--saes", f"set:{where}")
        assert_bad(code, err, *words)
        assert _tree(where) == before
    assert not runs.exists() or not any(runs.rglob("*.json"))
    code, _, err = cli(monkeypatch, capsys, *base, "--saes", f"set:{root}", "--node-threshold", "0")
    assert_bad(code, err, "--node-threshold must be in (0, 1]")


def test_set_for_another_model_is_refused(built):
    from circuits.feature_graph import feature_graph

    other = tiny_model(layers=2, d_model=16, n_ctx=32, name="tiny-other")
    for method in ("gradient", "dpa"):
        with pytest.raises(ModelFileError, match="trained on tiny, not tiny-other"):
            feature_graph(other, PROMPT, load_set(str(built[0])), method=method)
