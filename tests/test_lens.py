"""Issue 17: explain any position (attribute at position N), direct logit attribution, logit and tuned lens."""

from __future__ import annotations

import json

import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as run_main
from test_baselines_tiny import PROMPT, tiny_gelu, tiny_llama

from attribution import attribute
from attribution.dpa.tiny import save_tiny_llama
from workbench.errors import RangeError, TokenError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def llama():
    return tiny_llama()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return str(save_tiny_llama(tmp_path_factory.mktemp("lens-cli") / "tiny", seed=4))


# -- explain any position --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [tiny_llama, tiny_gelu])
@pytest.mark.parametrize("level", ["token", "head", "neuron", "edge"])
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
