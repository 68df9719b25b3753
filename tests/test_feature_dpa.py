"""Feature-level DPA (attribution/features): completeness, the feature graph, the CLI's bad inputs.

A 3-layer random Llama (SwiGLU, RMSNorm with random weights, RoPE, grouped-query attention) and random
SAELens dictionaries saved in SAELens' format: a TopK SAE on blocks.1.hook_resid_post, another on
blocks.2.hook_resid_post and a skip transcoder from blocks.1.ln2.hook_normalized to blocks.1.hook_mlp_out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

PROMPT = "The capital of France is"


def _randomise(sae, scale: float = 0.3):
    with torch.no_grad():
        for p in sae.parameters():
            p.normal_(0.0, scale)
    return sae


def save_dictionary(path: Path, model_name: str, hook: str, hook_out: str | None = None, seed: int = 0) -> Path:
    import sae_lens as sl

    torch.manual_seed(seed)
    if hook_out is None:
        sae = sl.TopKSAE(sl.TopKSAEConfig(d_in=32, d_sae=48, k=6, apply_b_dec_to_input=True))
        kind = "topk"
    else:
        sae = sl.SkipTranscoder(sl.SkipTranscoderConfig(d_in=32, d_sae=48, d_out=32, apply_b_dec_to_input=False))
        kind = "transcoder"
    _randomise(sae).save_model(str(path))
    info = {"model": model_name, "hook": hook, "hook_out": hook_out or hook, "kind": kind}
    (path / "workbench.json").write_text(json.dumps(info))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_thread):
    import workbench as wb
    from attribution.dpa.tiny import save_tiny_llama
    from attribution.features.placement import load_dictionaries

    root = tmp_path_factory.mktemp("feature-dpa")
    model_dir = save_tiny_llama(root / "tiny-llama", layers=3)
    model = wb.load(str(model_dir))
    paths = {
        "sae1": save_dictionary(root / "sae-L1", model.name, "blocks.1.hook_resid_post", seed=1),
        "sae2": save_dictionary(root / "sae-L2", model.name, "blocks.2.hook_resid_post", seed=2),
        "tc1": save_dictionary(root / "tc-L1", model.name, "blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out", 3),
    }
    dicts = {k: load_dictionaries([str(v)])[0] for k, v in paths.items()}
    return model, model_dir, paths, dicts


def test_completeness_sae_equals_target_logit(setup):
    """Residual SAE: features + error + decoder bias = the layer's share = (complete weights, no biases) the
    target logit difference, which DPA's forward computes independently."""
    from attribution.dpa import COMPLETE
    from attribution.features.scores import feature_attribution

    model, _, _, dicts = setup
    for keep_first in (True, False):
        res = feature_attribution(model, PROMPT, [dicts["sae1"], dicts["sae2"]], target=" Paris", foil=" London",
                                  keep_first=keep_first, **COMPLETE)
        for lf in res.layers:
            parts = float(lf.scores.double().sum() + lf.error.double().sum() + lf.bias.double().sum())
            assert abs(parts - res.target_logit) < 1e-4 * max(1.0, abs(res.target_logit)), (lf.name, parts)
            assert len(lf.scores) > 0 and float(lf.scores.abs().sum()) > 1e-3  # not a vacuous split
            assert abs(lf.completeness_error()) < 1e-4
        first = res.layers[0]
        assert keep_first or int(first.positions.min()) >= 1  # position 0 all error unless kept


def test_completeness_transcoder_equals_mlp_share(setup):
    """Transcoder: features + error + skip + bias = the MLP's share = the sum of DPA's neuron scores of
    that layer (default path weights: the split holds whatever the weights)."""
    from attribution.dpa import dpa_all
    from attribution.features.scores import feature_attribution

    model, _, _, dicts = setup
    res = feature_attribution(model, PROMPT, [dicts["tc1"]], target=" Paris", foil=" London", keep_first=True)
    lf = res.layers[0]
    trace = dpa_all(model, model.encode(PROMPT, " Paris", " London"), levels=("neuron",))
    mlp_share = float(trace.levels["neuron"][1].double().sum())
    parts = float(lf.scores.double().sum() + lf.error.double().sum() + lf.skip.double().sum()
                  + lf.bias.double().sum())
    assert abs(parts - mlp_share) < 1e-4 * max(1.0, abs(mlp_share))
    assert abs(float(lf.skip.sum())) > 1e-4 and abs(float(lf.error.sum())) > 1e-4  # every term is exercised


def test_gradient_scores_differ_from_dpa(setup):
    from attribution.features.scores import dpa_feature_scores, gradient_feature_scores

    model, _, _, dicts = setup
    enc = model.encode(PROMPT, " Paris", " London")
    dpa, _ = dpa_feature_scores(model, enc, [dicts["sae1"]])
    grad = gradient_feature_scores(model, enc, [dicts["sae1"]])
    assert torch.equal(dpa[0].features, grad[0].features)
    assert not torch.allclose(dpa[0].scores, grad[0].scores)


def test_feature_graph_connected_to_logits(setup):
    from circuits.feature_graph import feature_graph
    from circuits.runs import subgraph_of
    from core.store import RunStore

    model, _, _, dicts = setup
    g = feature_graph(model, PROMPT, [dicts["sae2"], dicts["sae1"]], target=" Paris", foil=" London",
                      max_nodes=15, max_edges=30, per_layer=4)
    ids = {n.id for n in g.nodes}
    assert "logits" in ids and len(g.edges) > 0 and len(ids) <= 16 and len(g.edges) <= 30
    kinds = {n.kind for n in g.nodes}
    assert "feature" in kinds
    # every node reaches the logits through kept edges; every edge joins kept nodes
    reach, grew = {"logits"}, True
    while grew:
        grew = False
        for e in g.edges:
            if e.target in reach and e.source not in reach:
                reach.add(e.source)
                grew = True
    assert reach == ids
    # edges go upward: L1 sources feed L2 targets or the logits only through L2 (a residual SAE cuts)
    for e in g.edges:
        if e.target == "logits":
            assert e.source.startswith("L2."), e
        if e.source.startswith("L1."):
            assert e.target.startswith("L2."), e
    assert any(e.source.startswith("L1.") for e in g.edges)  # lower features reach higher ones
    assert g.n_passes > 1
    run = g.save()
    back = subgraph_of(RunStore().get(run.id))  # the stored feature-graph run, read back whole
    assert back.nodes == g.nodes and back.edges == g.edges and back.key == g.key
    fig = back.plot()  # drawn as the app draws it: per row its 8 most influential nodes, at most 3 a position
    from circuits.plot import readable

    assert set(fig.data[-1].customdata) == {n.id for n in readable(back, 8, 120).nodes} and "logits" in ids
    assert (run.path / "graph.plotly.json").exists()  # saved with its figure, as a circuit run is
    sub = subgraph_of(run)
    assert {n.id for n in sub.nodes} == ids and len(sub.edges) == len(g.edges)
    assert {n.kind for n in sub.terms} <= {"error"} and sub.provenance.method == "dpa"


def test_transcoder_graph_edges_skip_held_mlp(setup):
    """A transcoder is not a cut: the logits read it directly and the embeddings below it."""
    from circuits.feature_graph import feature_graph

    model, _, _, dicts = setup
    g = feature_graph(model, PROMPT, [dicts["tc1"]], target=" Paris", max_nodes=30, max_edges=60, per_layer=4)
    into_logits = {e.source.split(".")[0] for e in g.edges if e.target == "logits"}
    assert "L1T" in into_logits
    assert any(e.source.startswith("emb@") for e in g.edges)


def test_cli_feature_graph_json(setup, monkeypatch, capsys):
    _, model_dir, paths, _ = setup
    code, out, err = cli(monkeypatch, capsys, "feature-graph", "--model", str(model_dir), "--prompt", PROMPT,
                         "--target", " Paris", "--foil", " London", "--saes", f"{paths['sae1']},{paths['sae2']}",
                         "--nodes", "10", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["nodes"] and r["edges"] and r["seconds"] > 0 and r["run"]


@pytest.mark.parametrize("which, words", [
    ("missing", ("not a dictionary directory",)),
    ("other_model", ("trained on",)),
    ("bad_hook", ("blocks.1.attn.hook_z",)),
    ("no_hook", ("blocks.9",)),
    ("twice", ("--saes", "more than once")),
])
def test_cli_bad_inputs_exit_2(setup, tmp_path, monkeypatch, capsys, which, words):
    _, model_dir, paths, _ = setup
    if which == "missing":
        saes = str(tmp_path / "nowhere")
    elif which == "other_model":
        saes = str(save_dictionary(tmp_path / "other", "smollm2-135m", "blocks.1.hook_resid_post"))
    elif which == "bad_hook":
        saes = str(save_dictionary(tmp_path / "z", Path(model_dir).name, "blocks.1.attn.hook_z"))
    elif which == "no_hook":
        saes = str(save_dictionary(tmp_path / "deep", Path(model_dir).name, "blocks.9.hook_resid_post"))
    else:
        saes = f"{paths['sae1']},{paths['sae1']}"
    code, _, err = cli(monkeypatch, capsys, "feature-graph", "--model", str(model_dir), "--prompt", PROMPT,
                       "--saes", saes, "--json")
    assert_bad(code, err, *words)


def test_faithfulness_curve_and_notebook(setup):
    """Ablating every active feature is the same whatever the ranking; ablating fewer is not."""
    import workbench as wb
    from attribution.features.faithfulness import feature_curve

    model, _, paths, dicts = setup
    rows = [{"prompt": PROMPT, "target": " Paris", "foil": " London"},
            {"prompt": "The capital of Rome is", "target": " Paris", "foil": " London"}]
    c = feature_curve(model, rows, dicts["sae1"], grid=(1, 2, 1000))
    full = [c.drop[m][-1] for m in ("dpa", "gradient", "random")]
    assert max(full) - min(full) < 1e-4 and abs(full[0]) > 1e-3
    assert c.drop["dpa"][0] != c.drop["random"][0]
    assert c.seconds["dpa"] > 0 and c.seconds["gradient"] > 0
    res = wb.feature_attribution(model, PROMPT, str(paths["sae1"]), target=" Paris", foil=" London")
    assert res.layers[0].name == "sae-L1" and len(res.table())
    g = wb.feature_graph(model, PROMPT, [str(paths["sae1"])], target=" Paris", max_nodes=5)
    assert g.nodes[-1].id == "logits" or any(n.id == "logits" for n in g.nodes)
