"""Issue 17: explain any position (attribute at position N), direct logit attribution, logit and tuned lens."""

from __future__ import annotations

import json

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as run_main
from test_baselines_tiny import PROMPT
from test_baselines_tiny import tiny_gelu as toy_gelu
from test_baselines_tiny import tiny_llama as toy_llama

from attribution import attribute
from attribution.dpa.tiny import save_tiny_llama
from core.errors import RangeError, TokenError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def llama():
    return toy_llama()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return str(save_tiny_llama(tmp_path_factory.mktemp("lens-cli") / "tiny", seed=4))


# -- explain any position --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [toy_llama, toy_gelu])
@pytest.mark.parametrize("level", ["token", "head", "neuron", "qk"])
def test_dpa_at_a_position_equals_dpa_on_the_prompt_cut_there(make, level):
    m = make()
    words = PROMPT.split()
    at = attribute(m, PROMPT, method="dpa", level=level, position=3)
    cut = attribute(m, " ".join(words[:4]), target=words[4], method="dpa", level=level)
    assert at.target == words[4] and at.position == 3 and at.tokens == words  # default target: the next token
    keep = tuple(slice(0, 4) if ax in ("token", "query", "key", "position") else slice(None) for ax in at.axes)
    assert cut.scores.abs().sum() > 0.1  # not vacuous
    assert torch.allclose(at.scores[keep], cut.scores, atol=1e-5)
    later = float(at.scores.abs().sum()) - float(at.scores[keep].abs().sum())
    assert later == pytest.approx(0.0, abs=1e-4)  # later positions cannot affect the prediction at 3
    assert at.target_logit == pytest.approx(cut.target_logit, abs=1e-5)


@pytest.mark.parametrize("method,level", [("gradient", "head"), ("input_x_gradient", "neuron"),
                                          ("rollout", "token"), ("activation_patching", "head")])
def test_other_methods_at_a_position(llama, method, level):
    """Gradients read the position natively; rollout and patching run on the cut prompt (zero-padded)."""
    words = PROMPT.split()
    at = attribute(llama, PROMPT, target="C", foil="A", method=method, level=level, position=-3)
    cut = attribute(llama, " ".join(words[:5]), target="C", foil="A", method=method, level=level)
    keep = tuple(slice(0, 5) if ax in ("token", "query", "key", "position") else slice(None) for ax in at.axes)
    assert at.position == 4 and at.tokens == words
    assert torch.allclose(at.scores[keep], cut.scores, atol=1e-5) and cut.scores.abs().sum() > 0


def test_position_errors(llama):
    with pytest.raises(RangeError, match="position 7 out of range"):
        attribute(llama, PROMPT, target="A", position=7)
    with pytest.raises(RangeError, match="out of range"):
        attribute(llama, PROMPT, target="A", position=-8)
    with pytest.raises(TokenError, match="follows position"):
        attribute(llama, PROMPT, foil="B", position=3)  # the default target B equals the foil


def test_cli_position(model_dir, monkeypatch, capsys):
    prompt = "The capital of France is Paris"
    code, out, err = run_main(monkeypatch, capsys, "attribute", model_dir, prompt, "--position", "3",
                              "--level", "head", "--no-save", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["position"] == 3 and res["target"] == "is" and len(res["scores"][0][0]) == 6
    for args, words in [(["--position", "6", "--target", " Paris"], ["position 6 out of range"]),
                        (["--position", "-1"], ["last token", "--target"]),
                        ([], ["--target"])]:
        code, out, err = run_main(monkeypatch, capsys, "attribute", model_dir, prompt, *args, "--json")
        assert out == ""
        assert_bad(code, err, *words)


# -- direct logit attribution ------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [toy_llama, toy_gelu])
def test_dla_components_sum_to_the_logit_difference(make):
    from attribution.dla import direct_logit_attribution

    m = make()
    res = direct_logit_attribution(m, PROMPT, target="C", foil="A", position=4)
    logits = m.logits(m.to_tokens(PROMPT))[0, 4]
    want = float(logits[m.token_id("C")] - logits[m.token_id("A")])
    assert res.logit_diff == pytest.approx(want, abs=1e-5) and abs(want) > 0.05
    # TransformerLens' decomposition at the cached final-norm scale: components + (LN bias, b_U) = logit diff
    assert float(res.component_scores.sum()) + res.offset == pytest.approx(want, abs=1e-4)
    assert res.components[0] == "embed" and res.components[-1] == f"L{m.arch.n_layers - 1}.mlp"
    assert res.accumulated[-1] == "final" and float(res.accumulated_scores[-1]) == pytest.approx(want, abs=1e-4)
    for layer in range(m.arch.n_layers):  # heads (no b_O in these models) add up to their layer's attention
        attn = float(res.component_scores[res.components.index(f"L{layer}.attn")])
        assert float(res.head_scores[layer].sum()) == pytest.approx(attn, abs=1e-4)


def test_dla_method_and_cli(llama, model_dir, monkeypatch, capsys):
    at = attribute(llama, PROMPT, target="C", foil="A", method="dla", level="head", position=4)
    assert at.scores[..., 5:].abs().sum() == 0 and at.scores[..., 4].abs().sum() > 0
    code, out, err = run_main(monkeypatch, capsys, "dla", model_dir, "The capital of France is", "--target",
                              " Paris", "--foil", " London", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert len(res["head_scores"]) == 2 and len(res["head_scores"][0]) == 4 and "run" in res
    assert sum(res["component_scores"]) + res["offset"] == pytest.approx(res["logit_diff"], abs=1e-4)


# -- logit and tuned lens --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [toy_llama, toy_gelu])
def test_logit_lens_last_layer_is_the_models_output_and_identity_tuned_is_logit(make):
    from attribution.lens import lens_logits, residual_stack
    from attribution.lens.tuned import TunedLens, readout

    m = make()
    tokens = m.to_tokens(PROMPT)
    resid = residual_stack(m, tokens)
    assert resid.shape == (m.arch.n_layers + 1, 1, tokens.shape[1], m.arch.d_model)
    logit = lens_logits(m, resid, "logit")
    assert torch.allclose(logit[-1], m.logits(tokens), atol=1e-4)
    assert not torch.allclose(logit[0], logit[-1], atol=1e-2)  # earlier layers read differently
    assert torch.allclose(readout(m, resid, TunedLens.identity(m)), logit, atol=1e-5)


def test_lens_result_fields_and_save(llama):
    from attribution.lens import lens
    from core.store import RunStore

    res = lens(llama, PROMPT, target="C", top_k=3)
    n = llama.arch.n_layers + 1
    assert res.layers == ["embed", "L0", "L1"] and len(res.top_tokens) == n and len(res.probs[0]) == 7
    assert res.target_rank.shape == (n,) and res.target_rank.min() >= 1 and 0 < float(res.target_prob[-1]) < 1
    final = torch.softmax(llama.logits(llama.to_tokens(PROMPT))[0, -1], -1)
    assert res.top_tokens[-1][-1] == llama.decode([int(final.argmax())])
    assert res.probs[-1][-1] == pytest.approx(float(final.max()), abs=1e-5)
    assert [c["prob"] for c in res.cell(0, 2)] == sorted((c["prob"] for c in res.cell(0, 2)), reverse=True)
    run = res.save()
    assert RunStore().get(run.id).meta["kind"] == "lens"


def test_tuned_lens_training_reduces_kl(tiny_llama):
    """On a tiny random Llama: the closed-form fit and then a few KL steps each lower the KL to the final
    distribution on the training residuals."""
    from attribution.lens.train import TrainConfig, fine_tune_kl, fit_least_squares, kl_per_layer

    cfg = TrainConfig(train_tokens=768, window=64, batch_windows=4, kl_tokens=192, kl_lr=3e-3,
                      kl_seconds=1e9, fit_seconds=1e9)
    lens, cache, fit = fit_least_squares(tiny_llama, cfg, log=lambda _: None)
    assert fit["fit_tokens"] == 12 * 63 and cache.shape == (3, 192, tiny_llama.arch.d_model)
    before = kl_per_layer(tiny_llama, cache, None, bf16=False)[:-1]
    fitted = kl_per_layer(tiny_llama, cache, lens, bf16=False)[:-1]
    assert float(fitted.sum()) < float(before.sum()), (before, fitted)
    from attribution.lens.tuned import TunedLens

    start = TunedLens.identity(tiny_llama)  # a few KL steps from the logit lens, on the whole cache per step
    cfg.kl_max_steps, cfg.kl_batch = 6, 192
    steps = fine_tune_kl(tiny_llama, start, cache, cfg, log=lambda _: None)
    tuned = kl_per_layer(tiny_llama, cache, start, bf16=False)[:-1]
    assert steps["kl_steps"] == 6 and float(tuned.sum()) < 0.9 * float(before.sum()), (before, tuned)


def test_lens_cli_and_bad_input(model_dir, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "lens", model_dir, "The capital of France is",
                              "--target", " Paris", "--top-k", "3", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["tokens"] == ["The", "capital", "of", "France", "is"] and res["layers"] == ["embed", "L0", "L1"]
    assert len(res["top_tokens"]) == 3 and len(res["probs"][2]) == 5 and len(res["target_rank"]) == 3
    assert "run" in res
    for args, words in [(["--kind", "magic"], ["unknown lens kind", "magic"]),
                        (["--kind", "tuned"], ["no tuned lens"]),
                        (["--target", "Paris London"], ["2 tokens"])]:
        code, out, err = run_main(monkeypatch, capsys, "lens", model_dir, "The capital of France is", *args, "--json")
        assert out == ""
        assert_bad(code, err, *words)
    code, out, err = run_main(monkeypatch, capsys, "lens", model_dir, "  ")
    assert_bad(code, err, "empty prompt")


@pytest.mark.real
def test_shipped_tuned_lens_on_smollm2(smollm2):
    """The shipped lens fits smollm2, reads 'The capital of France is' with ' Paris' on top at the output, and
    its table says tuned < logit at every layer but the last."""
    from attribution.lens import lens
    from attribution.lens.tuned import TunedLens, lens_dir

    tl = TunedLens.for_model(smollm2)
    assert tl.weight.shape == (30, 576, 576) and tl.weight.abs().max() > 0
    kl = json.loads((lens_dir("smollm2-135m") / "tuned.json").read_text())["heldout_kl"]
    assert all(t < lo for t, lo in zip(kl["tuned"][:-1], kl["logit"][:-1], strict=True))
    res = {k: lens(smollm2, "The capital of France is", kind=k, target=" Paris") for k in ("logit", "tuned")}
    for r in res.values():
        assert r.top_tokens[-1][-1] == " Paris" and int(r.target_rank[-1]) == 1
    # the tuned lens finds ' Paris' earlier (a better rank summed over the middle layers)
    assert res["tuned"].target_rank[10:25].sum() < res["logit"].target_rank[10:25].sum()


def test_int8_storage_round_trip(tmp_path):
    """Shipped lenses store the weight as int8 with a scale per row; it loads back within half a step."""
    import torch

    from attribution.lens.tuned import TunedLens

    gen = torch.Generator().manual_seed(0)
    lens = TunedLens("m", torch.randn(3, 8, 8, generator=gen) * 0.1, torch.randn(3, 8, generator=gen))
    lens.save(tmp_path)
    back = TunedLens.load(tmp_path)
    step = lens.weight.abs().amax(-1, keepdim=True) / 127
    assert ((back.weight - lens.weight).abs() <= step / 2 + 1e-6).all()
    assert torch.allclose(back.bias, lens.bias, atol=1e-2)
    fp = TunedLens.load(lens.save(tmp_path / "f", int8=False).parent)
    assert torch.allclose(fp.weight, lens.weight, atol=1e-3)
