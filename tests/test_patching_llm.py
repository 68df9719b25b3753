"""Activation patching on LLMs (issue 17 item 4): every site per layer and position, batched and started at
the patched layer, equals a plain full forward with the same patch; the CLI and notebook call."""

from __future__ import annotations

import json

import pytest
import torch

from circuits.tools import patching
from core.errors import PromptError, RangeError
from tests.cli_helpers import assert_bad, run_cli

CLEAN = "When Mary and John went to the store, John gave a drink to"


def full_forward(model, clean, corrupted, site_hook, layer, q):
    """The patched logit difference from a whole forward with one site patched at one position."""
    p, bad = patching._pair(model, clean, corrupted, " Mary", " John", -1)
    name = f"blocks.{layer}.hook_{site_hook}"
    _, bad_cache = model.run_with_cache(bad, names_filter=[name])

    def hook(act, hook):
        act[:, q] = bad_cache[name][:, q]
        return act

    return float(patching._metric(model, p.tokens, p, [(name, hook)], 1)[0])


@pytest.mark.parametrize("site, hook", [("resid", "resid_pre"), ("attn", "attn_out"), ("mlp", "mlp_out")])
def test_every_site_matches_a_full_forward(tiny_llama, one_thread, site, hook):
    bad = patching.swap_names(CLEAN, " Mary", " John")
    steps = []
    res = patching.patch(tiny_llama, CLEAN, bad, " Mary", " John", site=site,
                         on_step=lambda d, n: steps.append((d, n)))
    n_tok = tiny_llama.to_tokens(CLEAN).shape[1]
    assert res.effect.shape == (2, n_tok) and res.axes == ("layer", "position")
    assert steps[-1][0] == steps[-1][1] == len(steps)  # progress reaches its total
    for layer in (0, 1):
        for q in (0, 1, n_tok - 1):
            want = full_forward(tiny_llama, CLEAN, bad, hook, layer, q)
            assert float(res.patched[layer, q]) == pytest.approx(want, abs=1e-4)
    # chunked forwards (2 rows each) give the same numbers
    small = patching.patch_residual(tiny_llama, CLEAN, bad, " Mary", " John", site=hook, max_rows=2)
    assert torch.allclose(small.patched, res.patched, atol=1e-5)


def test_heads_and_swap_names(tiny_llama, one_thread):
    bad = patching.swap_names(CLEAN, " Mary", " John")
    assert bad == "When John and Mary went to the store, Mary gave a drink to"
    res = patching.patch(tiny_llama, CLEAN, bad, " Mary", " John", site="heads")
    assert res.effect.shape == (2, 4)
    with pytest.raises(PromptError):
        patching.swap_names(CLEAN, " Alice", " Bob")
    with pytest.raises(RangeError):
        patching.patch(tiny_llama, CLEAN, bad, " Mary", " John", site="nowhere")


def test_cli_patch_sites(monkeypatch, capsys, tiny_llama_dir):
    code, out, err = run_cli(monkeypatch, capsys, "patch", str(tiny_llama_dir), CLEAN, "--target", " Mary",
                             "--foil", " John", "--swap-names", "--site", "attn", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["site"] == "attn_out" and len(r["effect"]) == 2
    assert r["corrupted_prompt"].startswith("When John and Mary")
    code, out, err = run_cli(monkeypatch, capsys, "patch", str(tiny_llama_dir), CLEAN, "--target", " Mary",
                             "--swap-names", "--json")
    assert_bad(code, err, "--foil")
    code, out, err = run_cli(monkeypatch, capsys, "patch", str(tiny_llama_dir), CLEAN, "--target", " Mary",
                             "--site", "bogus", "--swap-names", "--foil", " John")
    assert_bad(code, err, "bogus")
