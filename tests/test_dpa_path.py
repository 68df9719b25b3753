"""dpa_path (DPA integrated along the counterfactual -> clean path): one step is dpa bit for bit; on a model
that is linear along the path it is the exact effect of patching each edge; with DPA's weights set to the
gradient's (w_q = w_k = w_v = 1) on an attention-only model without norms it is EAP-IG at the same steps;
and its step count is bounded before any model loads."""

from __future__ import annotations

import pytest
import torch

import workbench as wb
from circuits.counterfactual import prepare
from circuits.edges import dpa as dpa_edges
from circuits.edges import dpa_path, eap_ig, get_method, patching
from circuits.graph import CircuitGraph
from circuits.intervene import References
from core.errors import MethodError

pytestmark = pytest.mark.usefixtures("one_thread")
ROWS = [{"prompt": "The capital of France is", "target": " Paris", "foil": " Rome",
         "corrupt": "The capital of London is"},
        {"prompt": "The capital of Rome is", "target": " Paris", "foil": " London",
         "corrupt": "The capital of Paris is"}]


def _attn_only(seed: int, uniform: bool):
    """An attention-only GPT-2-style toy without norms; uniform: W_Q = W_K = 0, so every pattern is the
    uniform causal one whatever the input, and the logits are linear in the embedding."""
    from transformer_lens import HookedTransformerConfig

    from attribution.dpa.tiny import WORDS
    from core.models.hooked import HookedModel, hooked_transformer
    from core.models.tokens import SymbolTokenizer

    vocab = WORDS[2:]
    cfg = HookedTransformerConfig(n_layers=2, d_model=16, n_heads=2, d_head=8, d_vocab=len(vocab), n_ctx=32,
                                  attn_only=True, normalization_type=None, positional_embedding_type="standard",
                                  seed=seed, device="cpu")
    model = hooked_transformer(cfg, move_to_device=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.normal_(0.0, 0.0 if uniform and ("W_Q" in name or "W_K" in name or "b_Q" in name
                                                  or "b_K" in name) else 0.4)
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return HookedModel(model, SymbolTokenizer(vocab), name=f"attn-only-{seed}", kind="toy")


def _setup(m, rows=ROWS):
    g = CircuitGraph.of(m)
    ps = prepare(m, rows, ablation="corrupt")
    return g, ps, References(m, g, ps)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from attribution.dpa.tiny import save_tiny_llama, tiny_gpt2

    llama = wb.load(str(save_tiny_llama(tmp_path_factory.mktemp("path") / "m", seed=6, layers=2)))
    return [llama, tiny_gpt2(seed=7, act_fn="gelu_new", layers=2)]


def test_one_step_is_dpa_exactly(tiny):
    for m in tiny + [wb.load("ioi-attn-1l2h")]:
        rows = ROWS
        if m.name == "ioi-attn-1l2h":
            from circuits.toy.prompts import task_rows

            rows = task_rows(m)[:6]
        g, ps, refs = _setup(m, rows)
        want = dpa_edges.score(m, g, ps, refs)
        assert float(want.abs().max()) > 1e-3
        assert torch.equal(dpa_path.score(m, g, ps, refs, steps=1), want), m.name
        assert torch.equal(dpa_path.score(m, g, ps, refs, steps=1, w_v=0.7, act_mode="derivative"),
                           dpa_edges.score(m, g, ps, refs, w_v=0.7, act_mode="derivative")), m.name
        more = dpa_path.score(m, g, ps, refs, steps=3)  # the path does move the targets on these models
        assert bool(torch.isfinite(more).all()) and not torch.allclose(more, want, atol=1e-3 * float(want.abs().max()))


def test_linear_along_the_path_is_the_exact_effect():
    """Fixed patterns, no norms, no MLPs: the metric is linear in every receiver input, so with DPA's exact
    weights each edge's score is the metric's drop when that edge alone is patched, at any number of steps,
    and the edges into the logits sum to m(clean) - m(counterfactual)."""
    m = _attn_only(seed=1, uniform=True)
    g, ps, refs = _setup(m)
    exact = patching.score(m, g, ps, refs)
    assert float(exact.abs().max()) > 1e-2
    tol = 1e-4 * float(exact.abs().max())
    for steps in (1, 2, 7):
        got = dpa_path.score(m, g, ps, refs, steps=steps, w_v=1.0, w_q=0.0, w_k=0.0)
        assert torch.allclose(got, exact, atol=tol), steps
    into = torch.tensor([g.edge_name(e)[1] == "logits" for e in range(g.n_edges)])
    total = 0.0
    for batch in ps.batches:
        with torch.no_grad():
            total += float((batch.metric(m.run_with_hooks(batch.tokens, fwd_hooks=[]), ps.metric)
                            - batch.metric(m.run_with_hooks(batch.corrupt, fwd_hooks=[]), ps.metric)).sum())
    assert float(got[into].sum()) == pytest.approx(total / ps.n_prompts, rel=1e-4)


def test_gradient_weights_make_it_eap_ig():
    """Input-dependent patterns (the path does change them): with w_q = w_k = w_v = 1 DPA's target at a
    receiver input is the logit difference's gradient there, so dpa_path at N steps is EAP-IG at N steps
    (the same points alpha = 1/N .. 1 on the same embedding path), and differs from one step."""
    m = _attn_only(seed=2, uniform=False)
    g, ps, refs = _setup(m)
    assert ps.metric == "logit_diff"
    for steps in (1, 4):
        want = eap_ig.score(m, g, ps, refs, steps=steps)
        got = dpa_path.score(m, g, ps, refs, steps=steps, w_v=1.0, w_q=1.0, w_k=1.0)
        assert torch.allclose(got, want, atol=1e-4 * float(want.abs().max())), steps
    assert not torch.allclose(got, dpa_path.score(m, g, ps, refs, steps=1, w_v=1.0, w_q=1.0, w_k=1.0),
                              atol=1e-2 * float(want.abs().max()))


def test_steps_bounded_before_any_model():
    method = get_method("dpa_path")
    assert method.most["steps"] == dpa_path.MAX_STEPS == 256
    assert method.check_params({"steps": 256})["steps"] == 256
    assert method.passes({"steps": 1}) == get_method("dpa").passes()
    for bad in (0, -3, 257, 10**9, 2.5, True, "4"):
        with pytest.raises(MethodError, match="steps"):
            method.check_params({"steps": bad})
        with pytest.raises(MethodError, match="steps"):
            dpa_path.check_steps(bad)


def test_points_grouped_or_one_at_a_time_agree(tiny, monkeypatch):
    """The path's points go through the model ROWS prompt rows at a time: one point per pass or all in one pass
    gives the same scores (the caches of a group are the copies' own, rows in copy order)."""
    for m in tiny:
        g, ps, refs = _setup(m)
        together = dpa_path.score(m, g, ps, refs, steps=5)
        monkeypatch.setattr(dpa_path, "ROWS", 1)
        apart = dpa_path.score(m, g, ps, refs, steps=5)
        monkeypatch.setattr(dpa_path, "ROWS", 64)
        assert torch.allclose(together, apart, atol=1e-5 * float(apart.abs().max())), m.name


def test_token_level_one_step_is_dpa_and_more_steps_move_it(tiny):
    """workbench faithfulness' dpa_path (attribution/dpa/path.py): steps=1 with the zero baseline is DPA's token
    score bit for bit; more steps average the targets over the embedding path (finite, different); bad input is
    a MethodError; the method table lists it at token level."""
    from attribution.dpa.engine import dpa_scores
    from attribution.dpa.path import dpa_path_scores
    from attribution.methods import METHODS

    assert METHODS["dpa_path"].levels == ("token",)
    for m in tiny:
        enc = m.encode(ROWS[0]["prompt"], ROWS[0]["target"], ROWS[0]["foil"])
        want = dpa_scores(m, enc, "token")
        one = dpa_path_scores(m, enc, "token", steps=1)
        assert torch.equal(one.scores, want.scores) and one.target_logit == want.target_logit
        more = dpa_path_scores(m, enc, "token", steps=6, internal_batch_size=4)
        assert bool(torch.isfinite(more.scores).all()) and more.scores.shape == want.scores.shape
        assert not torch.allclose(more.scores, want.scores, atol=1e-3 * float(want.scores.abs().max()))
        batched = dpa_path_scores(m, enc, "token", steps=6, internal_batch_size=6)
        assert torch.allclose(more.scores, batched.scores, atol=1e-5 * float(more.scores.abs().max()))
        for bad in ({"steps": 0}, {"steps": 257}, {"steps": 2.5}, {"internal_batch_size": 0}):
            with pytest.raises(MethodError):
                dpa_path_scores(m, enc, "token", **bad)
        with pytest.raises(MethodError, match="tokens only"):
            dpa_path_scores(m, enc, "head")


def test_mean_and_zero_ablation_paths_start_at_the_reference(tiny):
    """Without counterfactuals the path starts at the reference embedding (the mean, or zero), as EAP-IG's."""
    rows = [{k: v for k, v in r.items() if k != "corrupt"} for r in ROWS]
    m = tiny[1]
    g = CircuitGraph.of(m)
    for ablation in ("mean", "zero"):
        ps = prepare(m, rows, ablation=ablation)
        refs = References(m, g, ps)
        assert torch.equal(dpa_path.score(m, g, ps, refs, steps=1), dpa_edges.score(m, g, ps, refs))
        assert bool(torch.isfinite(dpa_path.score(m, g, ps, refs, steps=3)).all())
