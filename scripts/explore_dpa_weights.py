"""DPA path weights on IOI prompts outside the benchmark's first 50 (a validation slice), token level.

    python scripts/explore_dpa_weights.py START STOP '[{}, {"w_q": 1, "w_k": 1, "w_v": 1}]' [signed|abs]

Prints each weight setting's disrupt/recover total next to the gradient norm's on prompts START..STOP-1
(logit difference to the foil, zero ablation). Weights are never tuned on the first 50 prompts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from attribution.faithfulness import evaluate
from core.models.zoo import load

PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts" / "ioi.jsonl"


def main() -> None:
    start, stop, configs = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    rank = sys.argv[4] if len(sys.argv) > 4 else "signed"
    if start < 50:
        sys.exit("error: the first 50 prompts are the benchmark's test slice; start at 50 or later")
    torch.set_num_threads(1)
    model = load("smollm2-135m")
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()][start:stop]
    for cfg in configs:
        res = evaluate(model, rows, ["dpa", "gradient_norm"], level="token", params={"dpa": cfg}, rank=rank)
        print(json.dumps(cfg), {k: round(v.total, 2) for k, v in res.methods.items()}, flush=True)


if __name__ == "__main__":
    main()
