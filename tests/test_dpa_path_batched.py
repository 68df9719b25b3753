"""dpa_path's points as one batch: at steps=16 and 8 prompts a batch, one forward of the interior points and one
top-down pass per batch (besides dpa's clean + counterfactual forward); the scores equal those of one point per
pass (the computation before the points were batched) to float rounding, on a GQA Llama and a GPT-2."""

from __future__ import annotations

import pytest
import torch

from circuits.counterfactual import prepare
from circuits.edges import dpa as dpa_edges
from circuits.edges import dpa_path
from circuits.graph import CircuitGraph
from circuits.intervene import References

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ["Mary", "John", "Anna", "Tom", "Kate", "Paul", "Ruth", "Mark"]
ROWS = [{"prompt": f"When {a} and {b} went out, {b} gave a book to", "target": f" {a}", "foil": f" {b}",
         "corrupt": f"When {a} and {b} went out, {a} gave a book to"}
        for a, b in zip(NAMES, NAMES[1:] + NAMES[:1], strict=True)]


def _count(monkeypatch):
    """Counts of the path's forwards and of top-down passes."""
    calls = {"forward": 0, "top_down": 0}
    path_cache, targets = dpa_path._path_cache, dpa_path.receiver_targets

    def counted_cache(*a, **k):
        calls["forward"] += 1
        return path_cache(*a, **k)

    def counted_targets(*a, **k):
        calls["top_down"] += 1
        return targets(*a, **k)

    monkeypatch.setattr(dpa_path, "_path_cache", counted_cache)
    monkeypatch.setattr(dpa_path, "receiver_targets", counted_targets)
    return calls


@pytest.mark.parametrize("which", ["tiny_llama", "tiny_gpt2"])
def test_sixteen_points_one_pass_equal_one_point_a_pass(which, request, monkeypatch):
    m = request.getfixturevalue(which)
    g = CircuitGraph.of(m)
    ps = prepare(m, ROWS, ablation="corrupt", batch_size=8)
    refs = References(m, g, ps)
    assert [b.size for b in ps.batches] == [8]
    calls = _count(monkeypatch)
    batched = dpa_path.score(m, g, ps, refs, steps=16)
    assert calls == {"forward": 1, "top_down": 1}  # all 16 points: one forward, one top-down pass
    monkeypatch.setattr(dpa_path, "ROWS", 1)  # one point per forward and top-down pass: the old cost
    apart = dpa_path.score(m, g, ps, refs, steps=16)
    assert calls == {"forward": 1 + 15, "top_down": 1 + 16}
    scale = float(apart.abs().max())
    assert scale > 0
    assert torch.allclose(batched, apart, atol=1e-5 * scale, rtol=1e-4)
    # the path matters: 16 points are not dpa's one
    assert not torch.allclose(batched, dpa_edges.score(m, g, ps, refs), atol=1e-3 * scale)

