"""Pick DAP's defaults on the validation seed and print the variant table.

    python scripts/select_dap.py [--model vit-synth] [--n 200] [--out docs/dap_selection.csv]
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
    from attribution.vit.tune import rollout_reference, select_dap_defaults

    model = workbench.load(a.model)
    val = data.synthetic(a.n, data.VALIDATION_SEED)
    best, table = select_dap_defaults(model, val)
    if a.out:
        table.to_csv(a.out, index=False)
    print(table.head(20).to_string(), file=sys.stderr)
    print(json.dumps({"best": best, "rollout": rollout_reference(model, val)}))


if __name__ == "__main__":
    main()
