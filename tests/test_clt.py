"""Cross-layer transcoders (attribution/sae/clt.py, clt_train.py) on a tiny random model: a CLT builds in seconds in
circuit-tracer's file layout (its own loader reads it and decodes as ours does), its features write into later MLPs
in the replacement model (the error nodes are what the cross-layer reconstruction misses, the model is exact, edges
are linear effects), the gradient graph and interventions run on it, DPA refuses it in one line, and bad names,
damaged files and resumes with other settings are one line, exit 2, nothing lost."""

from __future__ import annotations

import shutil

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from attribution.sae.clt import load_clt, load_clt_layers
from attribution.sae.clt_train import CLTSpec, build_clt
from core.errors import MethodError, ModelFileError, RangeError
from core.models.tiny import tiny_model


def _texts(n: int, seed: int = 0):
    return torch.randint(0, 10, (n, 24), generator=torch.Generator().manual_seed(seed)).tolist()


SPEC = dict(width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128, shard_tokens=500, ctx=24, epochs=2)
PROMPT = _texts(1, 5)[0][:12]


@pytest.fixture(scope="module")
def model():
    return tiny_model(layers=3, d_model=16, n_ctx=32)


@pytest.fixture(scope="module")
def built(model, tmp_path_factory):
    root = tmp_path_factory.mktemp("clts") / "tiny-clt"
    texts = {"train": _texts(200), "heldout": _texts(60, 1)}
    out = build_clt(model, CLTSpec(model=model.name, **SPEC), root, texts=texts)
    return root, out, texts


def test_clt_builds_in_circuit_tracers_layout(model, built):
    root, out, _ = built
    assert [r["layer"] for r in out["quality"]] == [0, 1, 2]
    assert all(r["explained_variance"] > 0.3 and 0 < r["l0"] <= 12 for r in out["quality"])
    names = {p.name for p in root.iterdir()}
    assert {f"W_enc_{x}.safetensors" for x in range(3)} | {f"W_dec_{x}.safetensors" for x in range(3)} <= names
    assert not root.with_name(f".{root.name}.build").exists()  # cache and checkpoint gone once built
    clt = load_clt(root)
    assert [tuple(w.shape) for w in clt.W_dec] == [(32, 3, 16), (32, 2, 16), (32, 1, 16)]
    assert float(clt.W_dec[0][:, 2].abs().sum()) > 0  # layer 0's features learned to write into layer 2
    stamp = (root / "W_dec_0.safetensors").stat().st_mtime_ns
    again = build_clt(model, CLTSpec(model=model.name, **SPEC), root, texts=built[2])  # built: its summary
    assert again["quality"] == out["quality"] and (root / "W_dec_0.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(RangeError, match="built with other settings.*width 32"):
        build_clt(model, CLTSpec(model=model.name, **{**SPEC, "width": 64}), root, texts=built[2])


def test_circuit_tracer_reads_it_and_decodes_alike(built):
    ct = pytest.importorskip("circuit_tracer.transcoder.cross_layer_transcoder")
    root = built[0]
    theirs = ct.load_clt(str(root), lazy_decoder=False, device=torch.device("cpu"), dtype=torch.float32)
    ours = load_clt(root)
    x = torch.randn(5, 3, 16)
    with torch.no_grad():
        skip = torch.stack([ours.skip(layer, x[:, layer]) for layer in range(3)], 1)
        mine = ours.reconstruct_all(x) - skip  # circuit-tracer has no file for our skip terms
        feats = theirs.encode(x.transpose(0, 1))  # [layer, batch, feature]
        assert torch.allclose(feats.transpose(0, 1), torch.stack([ours.encode(i, x[:, i]) for i in range(3)], 1),
                              atol=1e-5)
        recon = theirs.decode(feats.to_sparse())
    assert torch.allclose(recon.transpose(0, 1), mine, atol=1e-4)


def test_replacement_model_carries_the_cross_layer_writes(model, built):
    from circuits.replacement import build_replacement, feature_writes, replacement_forward, row, writers

    clt = load_clt(built[0])
    dicts = {d.layer: d for d in load_clt_layers(str(built[0]))}
    assert [s for s, _ in writers(dicts, 2)] == [0, 1, 2]
    tokens = torch.tensor([PROMPT])
    rep = build_replacement(model, tokens, dicts)
    _, cache = model.run_with_cache(tokens)
    xs = torch.stack([cache[f"blocks.{x}.ln2.hook_normalized"][0] for x in range(3)], 1)
    with torch.no_grad():
        recon = clt.reconstruct_all(xs)
    for layer in range(3):  # each error node: the MLP output minus the whole cross-layer reconstruction
        want = cache[f"blocks.{layer}.hook_mlp_out"][0, 1:] - recon[1:, layer]
        assert torch.allclose(rep.layers[layer]["err"][1:].detach(), want, atol=1e-4)
    logits, _ = replacement_forward(model, rep)
    assert torch.allclose(logits.detach(), model.logits(tokens)[0], atol=1e-4)
    value = logits[-1, 3] - logits[-1, 4]
    r = row(value, rep)
    n0 = len(rep.layers[0]["acts"])
    i = int(r[:n0].abs().argmax())  # layer 0's strongest feature: zeroing it moves the target by minus its edge
    with torch.no_grad():
        rep.layers[0]["acts"][i] = 0.0
    moved, _ = replacement_forward(model, rep)
    assert float((moved[-1, 3] - moved[-1, 4] - value).detach()) == pytest.approx(-float(r[i]), abs=1e-4)
    assert [h for h, _ in feature_writes(dicts[0], 0, 1.0)] == [f"blocks.{x}.hook_mlp_out" for x in range(3)]


def test_gradient_graph_and_interventions_run_dpa_refuses(model, built):
    from circuits.feature_graph import choose_method, feature_graph
    from circuits.replacement import intervention_check

    dicts = load_clt_layers(f"clt:{built[0]}")
    assert choose_method("auto", dicts) == "gradient"
    g = feature_graph(model, PROMPT, dicts, method="gradient", per_layer=6, node_threshold=0.8, edge_threshold=0.98)
    sc = g.graph_scores()
    assert g.params["method"] == "gradient" and 0 <= sc["replacement"] <= 1 and 0 <= sc["completeness"] <= 1
    check = intervention_check(model, g, dicts, top=5)
    assert check["pairs"] and all(abs(p["real"]) < 1e3 for p in check["pairs"])
    with pytest.raises(MethodError, match="cross-layer transcoder.*--method gradient"):
        feature_graph(model, PROMPT, dicts, method="dpa")


def test_bad_names_damaged_files_and_other_settings(model, built, tmp_path, monkeypatch):
    root, _, texts = built
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelFileError, match="no cross-layer transcoder 'nosuch'.*build-clt"):
        load_clt_layers("clt:nosuch")
    bad = tmp_path / "bad"
    shutil.copytree(root, bad)
    (bad / "W_dec_1.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(ModelFileError, match="W_dec_1.safetensors is damaged"):
        load_clt(bad)
    # a build started with other settings is refused before anything is cached or trained
    other = tmp_path / "other"
    work = tmp_path / ".other.build"
    work.mkdir()
    (work / "spec.json").write_text('{"width": 64}')
    with pytest.raises(RangeError, match="started with other settings.*width 64"):
        build_clt(model, CLTSpec(model=model.name, **SPEC), other, texts=texts)
    assert sorted(p.name for p in work.iterdir()) == ["spec.json"] and not other.exists()


def test_damaged_cache_on_resume_is_one_line_and_kept(model, tmp_path):
    from core.errors import DatasetError

    texts = {"train": _texts(200), "heldout": _texts(60, 1)}
    root = tmp_path / "c"
    spec = CLTSpec(model=model.name, **SPEC)

    def stop(stage, done, total):  # noqa: ARG001
        if stage.startswith("train"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_clt(model, spec, root, texts=texts, on_progress=stop)
    shard = next((tmp_path / ".c.build" / ".acts" / "train" / "L1").glob("shard_*.safetensors"))
    shard.write_bytes(b"\0" * 32)
    before = sorted(p.name for p in (tmp_path / ".c.build").rglob("*"))
    with pytest.raises(DatasetError, match="damaged.*L1"):
        build_clt(model, spec, root, texts=texts)
    assert sorted(p.name for p in (tmp_path / ".c.build").rglob("*")) == before


def test_cli_refusals_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    code, _, err = cli(monkeypatch, capsys, "sae", "build-clt", "--model", "smollm2-135m", "--k", "700")
    assert_bad(code, err, "--k 700 must be between 1 and the width 576")
    code, _, err = cli(monkeypatch, capsys, "sae", "build-clt", "--model", "smollm2-135m", "--name", "a/b")
    assert_bad(code, err, "plain folder name")
    base = ["feature-graph", "--model", "smollm2-135m", "--prompt", "a b", "--no-save"]
    code, _, err = cli(monkeypatch, capsys, *base, "--saes", "clt:no-such-clt")
    assert_bad(code, err, "no cross-layer transcoder 'no-such-clt'")
    assert not (tmp_path / "clts").exists()
