"""Circuit tools on tiny random toy models: exact identities each tool must satisfy."""

import math

import pytest
import torch

from circuits.tools import ablation, composition, dla, fourier, patching, patterns, spectra
from circuits.toy.analysis import ablate_task, spectra_over_training
from core.errors import MethodError, RangeError
from core.models.toy import ModelSpec, build_model, hooked
from core.models.toy_tasks import get_task


def make(ffn="dense", layers=2, heads=2, task="modadd", norm="LN", **kw):
    t = get_task(task, p=11) if task == "modadd" else get_task(task)
    spec = ModelSpec(task=task, ffn=ffn, layers=layers, heads=heads, d_model=16, norm=norm, **kw)
    torch.manual_seed(0)
    return hooked(build_model(spec, t, seed=1), spec, t), t


@pytest.fixture(scope="module")
def toy():
    m, t = make()
    b = t.batch("test", 6)
    bad = b.tokens.clone()
    bad[:, 0] = (bad[:, 0] + 3) % 11
    return m, t, b, bad


def test_dla_terms_sum_to_logit_diff(toy):
    m, t, b, _ = toy
    tgt = b.targets[:, 2]
    res = dla.direct_logit_attribution(m, b.tokens, tgt, (tgt + 1) % 11)
    assert res.residual_error == pytest.approx(0, abs=1e-4)
    assert res.head_scores.shape == (2, 2) and res.per_prompt.shape == (6, len(res.components))
    assert torch.allclose(res.per_prompt.mean(0), res.component_scores)
    one = dla.direct_logit_attribution(m, b.tokens[:1], tgt[:1], (tgt[:1] + 1) % 11)  # a batch of one: that prompt
    assert one.per_prompt is None and torch.allclose(one.component_scores, res.per_prompt[0])
    mr, tr = make(norm="RMS", ffn="glu")
    r2 = dla.direct_logit_attribution(mr, tr.batch("test", 3).tokens, 1, 2)
    assert r2.residual_error == pytest.approx(0, abs=1e-4)


def test_residual_patching_identities(toy):
    m, t, b, bad = toy
    tgt = b.targets[:, 2]
    res = patching.patch_residual(m, b.tokens, bad, tgt, (tgt + 1) % 11)
    assert res.effect.shape == (2, 3)
    # position 0 carries the only difference: patching it at layer 0 reproduces the corrupted run
    assert res.effect[0, 0] == pytest.approx(1.0, abs=1e-4)
    assert res.effect[0, 1] == pytest.approx(0.0, abs=1e-5)  # identical token: no effect
    # the patched values are the logit differences the effects are computed from
    assert torch.allclose((res.clean - res.patched) / (res.clean - res.corrupted), res.effect, atol=1e-4)
    assert list(res.table().columns) == ["layer", "position", "effect"]
    res.plot()


def test_head_patching_matches_path_patching_in_one_layer():
    m, t = make(layers=1)
    b = t.batch("test", 5)
    bad = b.tokens.clone()
    bad[:, 1] = (bad[:, 1] + 2) % 11
    tgt = b.targets[:, 2]
    heads = patching.patch_heads(m, b.tokens, bad, tgt, (tgt + 1) % 11)
    direct = patching.path_patch(m, b.tokens, bad, tgt, (tgt + 1) % 11, sender=(0, 1))
    # in one layer with the MLP frozen, the direct path is the head's whole effect minus the MLP's share
    assert heads.patched.shape == (1, 2)
    assert math.isfinite(direct["effect"])


def test_path_patching_receiver(toy):
    m, t, b, bad = toy
    tgt = b.targets[:, 2]
    r = patching.path_patch(m, b.tokens, bad, tgt, None, sender=(0, 0), receivers=[(1, 1)], via="v")
    assert set(r) >= {"clean", "corrupted", "patched", "effect"}
    with pytest.raises(RangeError):
        patching.path_patch(m, b.tokens, bad, tgt, None, sender=(1, 0), receivers=[(0, 1)])
    m1 = patching.patch_mlps(m, b.tokens, bad, tgt, (tgt + 1) % 11)
    assert m1.effect.shape == (2,)


def test_ablation_methods(toy):
    m, t, b, _ = toy
    hooks = ablation.ablation_hooks(m, ["head:1.0"], "zero")
    store = {}
    with m.hooks(hooks):
        m.run_with_hooks(
            b.tokens, fwd_hooks=[("blocks.1.attn.hook_z", lambda z, hook: store.setdefault("z", z))]
        )
    assert store["z"][:, :, 0].abs().max() == 0 and store["z"][:, :, 1].abs().max() > 0
    res = ablate_task(m, b, t, ["head:0.0", "mlp:1", ["attn:0", "attn:1"], "neuron:0.3"], "mean")
    assert len(res.scores) == 4 and "accuracy" in res.scores[0]
    res = ablate_task(m, b, t, ["head:0.1"], "resample")
    assert res.table().shape[0] == 1
    with pytest.raises(MethodError):
        ablation.ablation_hooks(m, ["head:0.0"], "median")
    with pytest.raises(RangeError):
        ablation.ablation_hooks(m, ["expert:0.0"], "zero")
    with pytest.raises(RangeError):
        ablation.ablation_hooks(m, ["head:0.9"], "zero")


def test_expert_ablation_zeroes_its_write():
    m, t = make(ffn="moe", layers=1, top_k=2)
    b = t.batch("test", 4)
    store = {}
    hooks = ablation.ablation_hooks(m, ["expert:0.2"], "zero")
    with m.hooks(hooks):
        m.run_with_hooks(
            b.tokens, fwd_hooks=[("blocks.0.hook_mlp_out", lambda x, hook: store.setdefault("o", x))]
        )
    _, cache = m.run_with_cache(b.tokens)
    eo = cache["blocks.0.mlp.hook_expert_out"]
    assert torch.allclose(store["o"], eo.sum(-2) - eo[..., 2, :], atol=1e-5)
    ablation.ablation_hooks(m, ["neuron:0.1.3"], "mean", reference=b.tokens)


def test_composition_matches_brute_force(toy):
    m, *_ = toy
    w0, w1 = m.weights(0), m.weights(1)
    ov = w0["W_V"][1] @ w0["W_O"][1]
    for kind, right in (
        ("q", w1["W_Q"][0] @ w1["W_K"][0].T),
        ("k", w1["W_K"][0] @ w1["W_Q"][0].T),
        ("v", w1["W_V"][0] @ w1["W_O"][0]),
    ):
        want = (ov @ right).norm() / (ov.norm() * right.norm())
        got = composition.composition_scores(m, kind).scores[0, 1, 1, 0]
        assert float(got) == pytest.approx(float(want), rel=1e-4)
    assert composition.composition_scores(m, "q").scores[1, 0, 0, 0].isnan()
    assert composition.qk_circuit(m, 0, 1).shape == (12, 12)
    assert composition.ov_circuit(m, 1, 0, tokens=[0, 1]).shape == (2, 12)


def test_patterns(toy):
    m, t, b, _ = toy
    ent = patterns.attention_entropy(m, b.tokens)
    assert ent.scores.shape == (2, 2) and (ent.scores <= math.log(3) + 1e-4).all()
    prev = patterns.previous_token_score(m, b.tokens)
    assert ((prev.scores > 0) & (prev.scores <= 1)).all()
    ps = patterns.position_score(m, b.tokens, torch.zeros(6, dtype=torch.long))
    assert ps.scores.shape == (2, 2)
    mi, _ = make(task="histogram")
    assert patterns.induction_score(mi, seq_len=5).scores.shape == (2, 2)


def test_spectra():
    assert spectra.effective_rank(torch.ones(5)) == pytest.approx(5.0)
    assert spectra.effective_rank(torch.tensor([1.0, 0, 0])) == pytest.approx(1.0)
    m, _ = make(heads=2)
    tab = spectra.weight_spectra(m)
    assert set(tab.matrix) == {"W_QK", "W_OV", "W_O"} and len(tab) == 2 * (2 * 2 + 1)
    w = m.weights(0)
    s = torch.linalg.svdvals(w["W_Q"][0] @ w["W_K"][0].T)
    row = tab[(tab["layer"] == 0) & (tab["head"] == 0) & (tab["matrix"] == "W_QK")].iloc[0]
    assert row.top_sv[0] == pytest.approx(float(s[0]), rel=1e-4)


def test_spectra_over_training_plot():
    import workbench as wb

    table = spectra_over_training(wb.load("ioi-attn-2l1h"))
    assert table["step"].nunique() > 1  # shipped snapshots, not just the final weights
    fig = spectra.plot_over_training(table)
    assert len(fig.data) == table.groupby(["layer", "head", "matrix"]).ngroups


def test_fourier_concentration_on_synthetic_neurons():
    p = 13
    a = torch.arange(p)[:, None].float()
    b = torch.arange(p)[None, :].float()
    w = 2 * math.pi / p
    single = torch.stack([torch.cos(w * 3 * (a + b)), torch.sin(w * 5 * a) + torch.cos(w * 5 * b)], -1)
    r = fourier.concentration(single, [3, 5])
    assert r.per_neuron == pytest.approx(1.0, abs=1e-4) and r.subspace == pytest.approx(1.0, abs=1e-4)
    assert r.neuron_freq.tolist() == [3, 5]
    mixed = (torch.cos(w * 3 * a) * torch.cos(w * 5 * b))[..., None]  # a product of two key frequencies
    r2 = fourier.concentration(mixed, [3, 5])
    assert r2.per_neuron < 0.5 and r2.subspace == pytest.approx(1.0, abs=1e-4)
    m, _ = make(ffn="glu", layers=1)
    res = fourier.fourier_analysis(m)
    assert 0 <= res.per_neuron <= 1 and 0 <= res.subspace <= 1 and res.embedding_spectrum.shape == (5,)
