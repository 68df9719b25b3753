"""The localization benchmark on dinov2-small, both linear heads, in one process (the backbone loaded once):
what attribution/vit/results/dinov2_small.md reports.

    python scripts/eval_dinov2.py [--n 8] [--steps 10] [--ig-steps 10] [--threads 1] [--out DIR]

Each head on the held-out images (seed 2) of the set it was trained on, upsampled to 224 px (nearest), the
maps explaining the true label, as `workbench vit-eval --model dinov2-small --head NAME` computes them (the
CLI has no per-method parameters, hence this script for IG's step count); JSON and markdown per head.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from attribution.vit import data
from attribution.vit.dinov2 import load_backbone, with_head
from attribution.vit.evaluate import cost_ratio, evaluate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ig-steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--methods", default="dap,rollout,gae,attention,dpa,ig")
    ap.add_argument("--heads", default="synthetic,hard")
    ap.add_argument("--out", default="/tmp/dinov2_eval")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = load_backbone(224)
    for head in args.heads.split(","):
        model = with_head(base, head)
        batch = data.at_size(data.sample_images(head, args.n, data.TEST_SEED), 224)
        started = time.time()

        def progress(name, done, head=head, started=started):
            print(f"{head} {name} {done}/{args.n} {time.time() - started:.0f} s", flush=True)

        res = evaluate(model, batch, args.methods.split(","), model_name=f"dinov2-small ({head} head)",
                       params={"ig": {"steps": args.ig_steps}}, batch_size=args.batch_size, seed=data.TEST_SEED,
                       steps=args.steps, keep_maps=False, on_progress=progress)
        k = min(args.batch_size, args.n)
        res.cost = cost_ratio(model, batch.images[:k], batch.labels[:k], "dap", repeats=3)
        record = {**res.to_json(), "head": head, "steps": args.steps, "ig_steps": args.ig_steps,
                  "threads": args.threads, "seconds": round(time.time() - started, 1), "markdown": res.markdown()}
        (out / f"{head}.json").write_text(json.dumps(record, indent=2) + "\n")
        res.per_image.to_csv(out / f"{head}_per_image.csv", index=False)
        print(res.markdown(), flush=True)
        print(json.dumps({k: record[k] for k in ("accuracy", "cost", "seconds")}), flush=True)


if __name__ == "__main__":
    main()
