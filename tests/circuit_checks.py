"""Shared check of the edge graph's masked forward: every edge kept gives the clean metric, none kept the
counterfactual's (the two ends every circuit's faithfulness curve is normalised between)."""

from __future__ import annotations

import torch


def masked_ends(model, rows, atol: float = 1e-4) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean, counterfactual) metrics of the first batch, after asserting the masked forward reproduces them."""
    from circuits.counterfactual import prepare
    from circuits.graph import CircuitGraph
    from circuits.intervene import References, run_masked

    g = CircuitGraph.of(model)
    ps = prepare(model, rows)
    batch = ps.batches[0]
    ref = References(model, g, ps).of(batch)
    everything = torch.ones(1, g.n_edges, dtype=torch.bool)
    full, empty = run_masked(model, g, batch, ref, torch.cat([everything, ~everything]), ps.metric)
    with torch.no_grad():
        clean = batch.metric(model(batch.tokens), ps.metric)
        corrupt = batch.metric(model(batch.corrupt), ps.metric)
    assert torch.allclose(full, clean, atol=atol), model.name
    assert torch.allclose(empty, corrupt, atol=atol), model.name
    return clean, corrupt
