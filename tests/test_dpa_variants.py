"""DPA's variants: the norm-aware pull-back equals autograd's Jacobian-transpose product through each norm
(RMSNorm and LayerNorm, block and final norms), and counterfactual-aware DPA is the mean of DPA run from
the clean side and from the counterfactual side."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from attribution.dpa.params import DPAParams
from attribution.dpa.steps import OFFSET_KEYS, hook_names, init_target, site_back
from circuits.counterfactual import prepare
from circuits.edges import dpa as dpa_edges
from circuits.graph import CircuitGraph
from circuits.intervene import References
from core.errors import MethodError

pytestmark = pytest.mark.usefixtures("one_thread")
ROW = {"prompt": "The capital of France is", "target": " Paris", "foil": " Rome",
       "corrupt": "The capital of London is"}


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from attribution.dpa.tiny import save_tiny_llama, tiny_gpt2

    llama = wb.load(str(save_tiny_llama(tmp_path_factory.mktemp("variants") / "m", seed=4, layers=2)))
    return [llama, tiny_gpt2(seed=5, act_fn="gelu_new", layers=2)]  # RMSNorm, LayerNorm


def _cache(m, tokens):
    names = hook_names(m, DPAParams(norm="aware"), ("head",)) + ["blocks.1.hook_resid_pre",
                                                                   "blocks.1.hook_resid_mid"]
    cache = {}

    def keep(x, hook):
        cache[hook.name] = x.detach().float().clone()

    m.run_with_hooks(tokens, fwd_hooks=[(n, keep) for n in names], return_type=None)
    return cache


def _vjp(fn, x, g):
    x = x.clone().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad((fn(x) * g).sum(), x)
    return grad


def test_norm_aware_pull_back_is_the_jacobian_transpose(tiny_models):
    for m in tiny_models:
        enc = m.encode(ROW["prompt"], ROW["target"], ROW["foil"])
        tokens = enc.tokens
        cache = _cache(m, tokens)
        block, sites = m.tl.blocks[1], m.norm_sites(1)
        g = torch.randn(cache["blocks.1.hook_resid_pre"].shape, generator=torch.Generator().manual_seed(0))
        for norm, site, x in ((block.ln1, sites["attn_pre"], cache["blocks.1.hook_resid_pre"]),
                              (block.ln2, sites["mlp_pre"], cache["blocks.1.hook_resid_mid"])):
            want = _vjp(norm, x, g)
            aware, _ = site_back(m, site, g, cache, aware=True)
            frozen, _ = site_back(m, site, g, cache)
            assert torch.allclose(aware, want, atol=1e-5 * float(want.abs().max())), m.name
            assert not torch.allclose(frozen, want, atol=1e-3 * float(want.abs().max())), m.name  # not vacuous
        # the final norm: init_target's vector is d(logit target - logit foil) / d(last residual)
        offsets = {k: torch.zeros(1, dtype=torch.float64) for k in OFFSET_KEYS}
        t, _ = init_target(m, [enc], cache, offsets, aware=True)
        resid = cache[f"blocks.{m.arch.n_layers - 1}.hook_resid_post"]
        last, u = enc.query, m.W_U[:, enc.target_id] - m.W_U[:, enc.foil_id]
        pick = torch.zeros_like(resid)
        pick[0, last] = u.float()
        want = _vjp(m.tl.ln_final, resid, pick)
        assert torch.allclose(t, want, atol=1e-5 * float(want.abs().max())), m.name


def test_norm_aware_scores_differ_and_stay_finite(tiny_models):
    row = {k: v for k, v in ROW.items() if k != "corrupt"}
    for m in tiny_models:
        g = CircuitGraph.of(m)
        ps = prepare(m, [row], ablation="zero")
        refs = References(m, g, ps)
        frozen = dpa_edges.score(m, g, ps, refs)
        aware = dpa_edges.score(m, g, ps, refs, norm="aware")
        assert bool(torch.isfinite(aware).all()) and not torch.allclose(frozen, aware, atol=1e-4)
    with pytest.raises(MethodError, match="norm must be one of"):
        DPAParams.from_kwargs(norm="thawed")


def test_cf_is_the_mean_of_dpa_from_either_side(tiny_models):
    """Swapping clean and counterfactual negates the sender difference and moves DPA's targets to the
    counterfactual run, so dpa_cf(clean, cf) = (dpa(clean, cf) - dpa(cf, clean)) / 2."""
    swapped = dict(ROW, prompt=ROW["corrupt"], corrupt=ROW["prompt"])
    for m in tiny_models:
        g = CircuitGraph.of(m)
        ps, back = prepare(m, [ROW], ablation="corrupt"), prepare(m, [swapped], ablation="corrupt")
        refs = References(m, g, ps)
        cf = dpa_edges.score_cf(m, g, ps, refs)
        plain = dpa_edges.score(m, g, ps, refs)
        other = dpa_edges.score(m, g, back, References(m, g, back))
        assert torch.allclose(cf, (plain - other) / 2, atol=1e-5 * float(plain.abs().max()))
        assert not torch.allclose(cf, plain, atol=1e-3 * float(plain.abs().max()))  # the runs do differ
        row = {k: v for k, v in ROW.items() if k != "corrupt"}
        with pytest.raises(MethodError, match="dpa_cf needs counterfactual"):
            dpa_edges.score_cf(m, g, prepare(m, [row], ablation="mean"), refs)


def test_scoring_and_a_cut_pull_back_leave_grad_mode_on(tiny_models):
    """Grad mode is per thread: dpa_cf's two interleaved target passes once exited their no_grad out of order
    and left it off for every later test in the process (28 failures in the suite)."""
    from attribution.dpa.pullback import dpa_cache, pull_back

    m = tiny_models[0]
    g = CircuitGraph.of(m)
    ps = prepare(m, [ROW], ablation="corrupt")
    dpa_edges.score_cf(m, g, ps, References(m, g, ps))
    assert torch.is_grad_enabled()
    cache = dpa_cache(m, m.encode(ROW["prompt"], ROW["target"]).tokens, DPAParams())
    top = (m.arch.n_layers - 1, "post")
    steps = pull_back(m, cache, torch.ones(1, cache["hook_embed"].shape[1], m.arch.d_model), top, DPAParams())
    next(steps)  # the caller stops after one point: a cut pass
    assert torch.is_grad_enabled()
    del steps
    assert torch.is_grad_enabled()
