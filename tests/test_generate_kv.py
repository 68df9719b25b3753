"""Greedy generation with TransformerLens's KV cache (issue 27: steering and generate at <= 50 ms a token):
the same ids as recomputing the whole sequence each step, with and without steering hooks."""

from __future__ import annotations

import pytest
import torch

PROMPT = "the cat sat on a mat and the dog ran to"


def _recompute(model, tokens, n: int) -> list[int]:
    new = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(tokens)[0, -1].argmax())
            new.append(nxt)
            tokens = torch.cat([tokens, tokens.new_tensor([[nxt]])], dim=1)
    return new


def test_greedy_with_the_cache_equals_recomputing(tiny_llama, one_thread):
    tokens = tiny_llama.to_tokens(PROMPT)
    assert tiny_llama.greedy(tokens, 12) == _recompute(tiny_llama, tokens, 12)
    assert tiny_llama.generate(PROMPT, 5) == tiny_llama.decode(_recompute(tiny_llama, tokens, 5))
    assert tiny_llama.greedy(tokens, 0) == []


@pytest.mark.parametrize("how", [{"alpha": 30.0}, {"value": 0.0}, {"value": 25.0}])
def test_steered_generation_with_the_cache_equals_recomputing(tiny_llama, one_thread, how):
    """The steering hooks act on every position after the first in a whole pass, and on each cached step's
    one new position: both continuations are the recomputed ones."""
    from attribution.sae.steer import _generate, steering_hooks
    from attribution.sae.units import neuron_dictionary

    d = neuron_dictionary(tiny_llama, 1)
    tokens = tiny_llama.to_tokens(PROMPT)
    with tiny_llama.hooks(fwd_hooks=steering_hooks(d, 7, **how)):
        steered = _generate(tiny_llama, tokens, 10)
        assert steered == _recompute(tiny_llama, tokens, 10)
    assert _generate(tiny_llama, tokens, 10) == _recompute(tiny_llama, tokens, 10)
    if "alpha" in how:
        assert steered != _recompute(tiny_llama, tokens, 10)  # the hook did act on the cached steps
