"""Choosing DAP's defaults on the validation seed (never on the held-out test images).

Stage 1 scores every variant in the grid by localization (pointing game + energy pointing game +
mask IoU) from one cached forward/backward (plus DPA's target propagation for ``prior="dpa"``).
Stage 2 re-scores with deletion and insertion (``composite`` = pointing + energy + IoU + insertion -
deletion), for each prior, its best ``shortlist`` variants among those that beat rollout's validation
pointing game and mask IoU (or its best ``shortlist`` by localization if none does), plus the best
``shortlist`` overall. The pick is the highest composite among the variants that beat rollout on
pointing, mask IoU *and* deletion on validation (``beats_rollout``); if none does, the highest
composite. The whole table is returned so the choice can be inspected.
"""

from __future__ import annotations

import itertools
from typing import Any

from attribution.vit import metrics as M
from attribution.vit.data import ImageBatch
from attribution.vit.methods import dap, explain

GRID = {
    "prior": list(dap.PRIORS),
    "prior_on": ["cols", "rows"],
    "head_fusion": ["mean", "grad"],
    "gamma": [0.5, 1.0],
    "start": [0, 1, 2],
    "identity": [0.5, 1.0, 2.0],
    "final_prior": [None, "first", "last"],
}


def select_dap_defaults(model, batch: ImageBatch, shortlist: int = 8, steps: int = 10,
                        grid: dict[str, list[Any]] | None = None,
                        reference: dict[str, float] | None = None) -> tuple[dict[str, Any], Any]:
    """(best params, pandas table of every variant's validation scores).

    ``reference``: rollout's validation scores (``rollout_reference``; computed when None)."""
    import pandas as pd

    grid = grid or GRID
    ref = reference or rollout_reference(model, batch, steps)
    images, targets = model.check_images(batch.images), batch.labels
    n_layers = model.cfg.n_layers
    full = list(range(n_layers))
    cached = list(dap.capture_for_dap(model, images, targets, full))
    cached.append(dap.dpa_targets(model, images, targets, full)[2] if "dpa" in grid["prior"]
                  else [None] * n_layers)
    frac = M.patch_fraction(batch.masks, model.cfg.patch_size)
    rows = []
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        p = dict(zip(keys, values, strict=True))
        if p["start"] >= n_layers:
            continue
        pats, pgrads, feats, fgrads, ts = (c[p["start"]:] for c in cached)
        maps = dap.propagate(pats, pgrads, feats, fgrads, p["prior"], p["prior_on"], p["head_fusion"],
                             p["gamma"], p["identity"], p["final_prior"], ts)
        loc = {"pointing_game": float(M.pointing_game(maps, frac).mean()),
               "energy_pointing_game": float(M.energy_pointing_game(maps, frac).mean()),
               "mask_iou": float(M.mask_iou(maps, frac).mean())}
        rows.append({**p, **loc, "localization": sum(loc.values()), "_maps": maps})
    rows.sort(key=lambda r: -r["localization"])
    short = {id(r): r for r in rows[:shortlist]}
    for kind in grid["prior"]:
        mine = [r for r in rows if r["prior"] == kind]
        good = [r for r in mine if r["pointing_game"] > ref["pointing_game"] and r["mask_iou"] > ref["mask_iou"]]
        short.update({id(r): r for r in (good or mine)[:shortlist]})
    for r in short.values():
        pert = M.perturbation_scores(model, images, targets, r["_maps"], steps=steps)
        r["deletion_auc"] = float(pert["deletion_auc"].mean())
        r["insertion_auc"] = float(pert["insertion_auc"].mean())
        r["composite"] = r["localization"] + r["insertion_auc"] - r["deletion_auc"]
        r["beats_rollout"] = (r["pointing_game"] > ref["pointing_game"] and r["mask_iou"] > ref["mask_iou"]
                              and r["deletion_auc"] < ref["deletion_auc"])
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "_maps"} for r in rows])
    winners = [r for r in short.values() if r["beats_rollout"]] or list(short.values())
    best = max(winners, key=lambda r: r["composite"])
    return {k: best[k] for k in keys} | {"end": None}, table


def rollout_reference(model, batch: ImageBatch, steps: int = 10) -> dict[str, float]:
    """Rollout's validation scores (same metrics and deletion steps as the DAP table)."""
    pm = explain(model, batch.images, "rollout", batch.labels)
    frac = M.patch_fraction(batch.masks, model.cfg.patch_size)
    images = model.check_images(batch.images)
    pert = M.perturbation_scores(model, images, batch.labels, pm.flat, steps=steps)
    return {"pointing_game": float(M.pointing_game(pm.flat, frac).mean()),
            "energy_pointing_game": float(M.energy_pointing_game(pm.flat, frac).mean()),
            "mask_iou": float(M.mask_iou(pm.flat, frac).mean()),
            "deletion_auc": float(pert["deletion_auc"].mean()),
            "insertion_auc": float(pert["insertion_auc"].mean())}
