"""DPA's completeness on a real model: with the complete weights (w_v = 1, w_q = w_k = 0, w_gate + w_up = 1)
token scores plus offsets (biases, norm offsets, positions) equal the explained logit (difference).

    python scripts/dpa_completeness.py --model gemma3-270m --prompts data/prompts/gemma3-270m/ioi.jsonl --n 20

Prints one JSON line per prompt and a summary (largest absolute error, seconds per prompt)."""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", default="data/prompts/ioi.jsonl")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()

    import torch

    import workbench as wb
    from attribution.dpa import COMPLETE, dpa_all
    from core.prompt_files import read_prompts

    model = wb.load(args.model, dtype=args.dtype)
    errors, seconds = [], []
    for row in read_prompts(args.prompts, args.n):
        enc = model.encode(row["prompt"], row["target"], row.get("foil"))
        started = time.perf_counter()
        trace = dpa_all(model, enc, levels=("token",), **COMPLETE)
        seconds.append(time.perf_counter() - started)
        with torch.no_grad():
            logits = model.logits(enc.tokens)[0, -1].double()
        logit = float(logits[enc.target_id] - (logits[enc.foil_id] if enc.foil_id is not None else 0.0))
        total = float(trace["token"].double().sum()) + sum(trace.offsets.values())
        errors.append(abs(total - logit))
        print(json.dumps({"prompt": row["prompt"], "logit": round(logit, 5), "tokens_plus_offsets": round(total, 5),
                          "error": abs(total - logit)}), flush=True)
    print(json.dumps({"model": args.model, "dtype": args.dtype, "prompts": len(errors), "max_error": max(errors),
                      "median_seconds": sorted(seconds)[len(seconds) // 2]}))


if __name__ == "__main__":
    main()
