"""Every supported LLM family on a tiny random config built offline: it loads through the workbench, its
logits equal the Hugging Face model's, DPA equals the brute-force reference at every level, the baselines
run, and the edge graph builds and evaluates (nothing ablated = clean, everything ablated = counterfactual)."""

from __future__ import annotations

import json

import pytest
import torch
from circuit_checks import masked_ends
from family_models import FOIL, IDS, TARGET, save_family

import workbench as wb
from attribution.dpa import COMPLETE, LEVELS, dpa_all
from attribution.dpa.reference import dpa_reference
from attribution.methods import METHODS
from core.errors import ModelFileError

FAMILIES = ("gpt2", "gpt_neox", "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {f: save_family(root / f, f, seed=i) for i, f in enumerate(FAMILIES)}


def _load(path):
    m = wb.load(str(path))
    if m.tokenizer.__class__.__name__ == "Qwen2Tokenizer":
        # transformers picks Qwen2's byte-level BPE class by model type, which cannot read the word-level
        # test vocabulary; a real Qwen2 ships a BPE vocabulary. Only the test's tokenizer is swapped.
        from transformers import PreTrainedTokenizerFast

        m.tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    return m


@pytest.mark.parametrize("family", FAMILIES)
def test_family_loads_and_dpa_equals_reference(family_dirs, family):
    from core.models.files import load_hf_model

    path = family_dirs[family]
    m = _load(path)
    expected = json.loads((path / "config.json").read_text())["architectures"][0]
    assert m.info["architecture"] == expected
    hf, _ = load_hf_model(path)
    tokens = torch.tensor([IDS])
    with torch.no_grad():
        ours, theirs = m.logits(tokens), hf(tokens).logits
    assert float(theirs.abs().max()) > 0.1
    assert float((ours - theirs).abs().max()) < 1e-4, family

    enc = m.encode(IDS, TARGET, FOIL)
    for params in ({}, COMPLETE, {"w_q": 0.7, "w_k": 0.4, "w_v": 0.9, "w_gate": 0.3, "w_up": 0.8}):
        trace = dpa_all(m, enc, levels=LEVELS, **params)
        ref = dpa_reference(m, enc, **params)
        assert abs(trace.target_logit - float(ref["target_logit"])) < 1e-4
        for level in LEVELS:
            scale = float(ref[level].abs().max())
            assert scale > 1e-3, (family, level)  # not a vacuous comparison
            err = float((trace[level] - ref[level]).abs().max())
            assert err <= 1e-4 * scale + 1e-6, (family, level, params, err, scale)
    complete = dpa_all(m, enc, levels=("token",), **COMPLETE)
    assert abs(complete.completeness_error()) < 1e-4 * max(1.0, abs(complete.target_logit))


def test_soft_caps_and_post_norms_are_seen(family_dirs):
    """Gemma 2's caps (0.5 here) bend the q/k paths: dropping their slope would move DPA's scores; and a
    post-norm family's arch facts say where its norms sit."""
    m = _load(family_dirs["gemma2"])
    a = m.arch
    assert (a.attn_softcap, a.logit_softcap, a.norm_placement) == (0.5, 0.5, "pre+post")
    assert _load(family_dirs["olmo2"]).arch.norm_placement == "post"
    assert _load(family_dirs["gpt_neox"]).arch.parallel
    assert _load(family_dirs["qwen3"]).arch.qk_norm == "head"
    enc = m.encode(IDS, TARGET, FOIL)
    with_caps = dpa_all(m, enc, levels=("token",), w_q=1.0, w_k=1.0)["token"]
    object.__setattr__(m.arch, "attn_softcap", None)
    try:
        without = dpa_all(m, enc, levels=("token",), w_q=1.0, w_k=1.0)["token"]
    finally:
        object.__setattr__(m.arch, "attn_softcap", 0.5)
    assert float((with_caps - without).abs().max()) > 1e-3


@pytest.mark.parametrize("family", FAMILIES)
def test_family_baselines_and_circuit_graph(family_dirs, family):
    m = _load(family_dirs[family])
    prompt = "The capital of France is London not Paris w4 w5 w6"  # atp_foil swaps target and foil
    for name, spec in METHODS.items():
        if name == "activation_patching":
            continue  # covered by the patching tests; one forward per item is slow at edge level anyway
        for level in spec.levels:
            if level == "qk" and name not in ("dpa", "atp"):
                continue
            res = wb.attribute(m, prompt, target=" Paris", foil=" London", method=name, level=level)
            assert bool(torch.isfinite(torch.as_tensor(res.scores)).all()), (family, name, level)
    rows = [{"prompt": "The capital of France is w1 w2 w3", "target": " Paris", "foil": " London",
             "corrupt": "The capital of France is w4 w5 w6"},
            {"prompt": "The capital of France is w7 w8 w9", "target": " Rome", "foil": " London",
             "corrupt": "The capital of France is w1 w9 w2"}]
    clean, corrupt = masked_ends(m, rows)
    assert float((clean - corrupt).abs().max()) > 1e-3  # the counterfactual moves the metric


@pytest.mark.parametrize("family", FAMILIES)
def test_family_dpa_edges_equal_reference(family_dirs, family):
    """The circuit scorer's DPA edges (split q/k/v receivers, the steps' norms, caps and parallel blocks) equal
    autograd through the split-input model, edge by edge, and a head's outgoing edges sum to its DPA score."""
    from circuits.discover import circuit
    from circuits.edges.reference import dpa_edge_reference
    from circuits.intervene import head_slot

    m = _load(family_dirs[family])
    row = {"prompt": "The capital of France is w1 w2 w3 w4 w5", "target": " Paris", "foil": " London"}
    params = {"w_q": 0.7, "w_k": 0.4, "w_v": 0.9, "w_gate": 0.3, "w_up": 0.8}
    res = circuit(m, [row], method="dpa", ablation="zero", evaluate=False, **params)
    enc = m.encode(row["prompt"], row["target"], row["foil"])
    ref = dpa_edge_reference(m, enc, **params)
    assert float(ref.abs().max()) > 1e-3
    assert torch.allclose(res.scores, ref, atol=1e-4 * float(ref.abs().max()) + 1e-6), family
    g, dense = res.graph, res.graph.dense(res.scores)
    heads = dpa_all(m, enc, levels=("head",), **params).levels["head"].sum(-1)
    sums = torch.stack([dense[head_slot(g, la):head_slot(g, la) + g.n_heads].sum(1) for la in range(g.n_layers)])
    assert torch.allclose(sums, heads, atol=1e-4 * float(heads.abs().max()) + 1e-6), family


def test_unsupported_architecture_is_one_line(tmp_path, family_dirs):
    import shutil

    path = tmp_path / "bloom"
    shutil.copytree(family_dirs["llama"], path)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["BloomForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFileError, match="not supported; supported families: GPT-2") as err:
        wb.load(str(path))
    assert "\n" not in str(err.value) and "OLMo-2" in str(err.value)


@pytest.mark.parametrize("family", ["gemma3", "olmo2", "gpt_neox"])
def test_dla_heads_sum_to_their_layer_through_post_norms(family_dirs, family):
    """A head's direct effect goes through its layer's post-norm (Gemma, OLMo-2): the heads of a layer sum to
    that layer's attention output read out (these families have no attention output bias)."""
    from attribution.dla import dla_encoded

    m = _load(family_dirs[family])
    res = dla_encoded(m, m.encode(IDS, TARGET, FOIL))
    comps = dict(zip(res.components, res.component_scores.tolist(), strict=True))
    for layer in range(m.arch.n_layers if family != "gpt_neox" else 0):  # NeoX has an output bias: runs only
        heads = float(res.head_scores[layer].sum())
        assert abs(heads - comps[f"L{layer}.attn"]) < 1e-4 * max(1.0, abs(heads)), (family, layer)
    assert abs(float(res.component_scores.sum()) + res.offset - res.logit_diff) < 1e-3 * max(1.0, abs(res.logit_diff))
