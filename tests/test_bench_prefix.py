"""The evaluation's prefix reuse (circuits/bench/forward.py PrefixReuse): a batch's positions shared with its
counterfactuals run once, every masked forward runs the suffix against their cached keys and values. The
per-prompt metrics must be the whole forwards' own, on a GQA model (split inputs ungroup kv-heads)."""

from __future__ import annotations

import torch

from circuits.graph import CircuitGraph


def test_prefix_reuse_gives_the_whole_forwards_metrics(tiny_llama):
    from circuits.bench.forward import PrefixReuse, prompt_metrics, shared_prefix
    from circuits.bench.prompts import task_prompts
    from circuits.intervene import References

    torch.set_num_threads(1)
    rows = [{"prompt": "When Mary and John went to the store, John gave a drink to",
             "corrupt": "When Mary and John went to the store, Mary gave a drink to", "target": " Mary",
             "foil": " John"},
            {"prompt": "When Anna and Tom went to the park, Tom gave a book to",
             "corrupt": "When Anna and Tom went to the park, Anna gave a book to", "target": " Anna",
             "foil": " Tom"},
            {"prompt": "12 + 21 = 33\n23 + 45 = ", "corrupt": "12 + 21 = 33\n63 + 15 = ", "target": "6",
             "foil": "7"}]
    g = CircuitGraph.of(tiny_llama)
    ps = task_prompts(tiny_llama, rows, batch_size=2)  # a batch of two IOI rows, one of the sum alone
    refs = References(tiny_llama, g, ps)
    assert [shared_prefix(b) for b in ps.batches][0] > 5
    assert PrefixReuse.of(tiny_llama, ps.batches[0]) is not None
    gen = torch.Generator().manual_seed(0)
    fractions = torch.tensor([[0.001], [0.01], [0.3], [0.9]])  # sparse and dense paths both
    keep = torch.stack([g.prune_connected(k) for k in torch.rand(4, g.n_edges, generator=gen) < fractions])
    keep = torch.cat([keep, torch.ones(1, g.n_edges, dtype=torch.bool), torch.zeros(1, g.n_edges, dtype=torch.bool)])
    whole = prompt_metrics(tiny_llama, g, ps, refs, keep, reuse_prefix=False)
    reused = prompt_metrics(tiny_llama, g, ps, refs, keep, reuse_prefix=True)
    assert torch.allclose(reused, whole, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(whole[-2], whole[-1])  # the masks matter: full and empty differ
