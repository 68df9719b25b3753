"""Pick DAP's defaults on the validation seed and print the variant table.

    python scripts/select_dap.py [--model vit-synth] [--n 200] [--out results/vit/dap_selection_val.csv]

Validation seed only (data.VALIDATION_SEED); the held-out test seed is never read here. Prints the
shortlisted variants (those scored on deletion too) and, as JSON, the pick, rollout's and raw
attention's validation scores and how many variants beat rollout on pointing, mask IoU and deletion.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vit-synth")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    import workbench
    from attribution.vit import data
    from attribution.vit import metrics as M
    from attribution.vit.methods import explain
    from attribution.vit.tune import rollout_reference, select_dap_defaults

    model = workbench.load(a.model)
    val = data.synthetic(a.n, data.VALIDATION_SEED)
    ref = rollout_reference(model, val)
    best, table = select_dap_defaults(model, val, reference=ref)
    if a.out:
        table.to_csv(a.out, index=False)
    scored = table[table["deletion_auc"].notna()].sort_values("composite", ascending=False)
    print(scored.to_string(), file=sys.stderr)
    att = explain(model, val.images, "attention", val.labels).flat
    frac = M.patch_fraction(val.masks, model.cfg.patch_size)
    attention = {"pointing_game": float(M.pointing_game(att, frac).mean()),
                 "mask_iou": float(M.mask_iou(att, frac).mean())}
    print(json.dumps({"best": best, "rollout": ref, "attention": attention,
                      "n_beat_rollout": int(scored["beats_rollout"].astype(bool).sum()),
                      "n_scored": len(scored), "n_variants": len(table)}))


if __name__ == "__main__":
    main()
