"""Train the linear heads of dinov2-small on its frozen class token (data/heads/dinov2-small).

    python scripts/train_dinov2_heads.py [--n-train 1500] [--n-val 300] [--n-test 500] [--threads 2]

Images: the 32 px synthetic and hard sets upsampled (nearest) to 224 px; train from the training stream
(seed 1000), C chosen on validation (seed 1), test accuracy on the held-out seed 2 (the images vit-eval
scores). Features: the final-LayerNorm class token at 224 px.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from attribution.vit import data
from attribution.vit.heads import class_token_features, fit_linear_head
from core.models.dinov2 import heads_dir, load_backbone


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-train", type=int, default=1500)
    ap.add_argument("--n-val", type=int, default=300)
    ap.add_argument("--n-test", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sets", default="synthetic,hard")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_backbone(224)
    for name in args.sets.split(","):
        started = time.time()
        make = data.synthetic if name == "synthetic" else data.hard
        parts = []
        for n, seed in ((args.n_train, data.TRAIN_SEED), (args.n_val, data.VALIDATION_SEED),
                        (args.n_test, data.TEST_SEED)):
            batch = data.at_size(make(n, seed), 224)
            parts.append((class_token_features(model, batch.images), batch.labels))
            print(name, seed, n, f"{time.time() - started:.0f} s", flush=True)
        info = {"dataset": name, "image_size": 224, "feature": "final-LayerNorm class token (frozen backbone)",
                "seeds": {"train": data.TRAIN_SEED, "val": data.VALIDATION_SEED, "test": data.TEST_SEED},
                "trained_by": "scripts/train_dinov2_heads.py (sklearn LogisticRegression, standardised features)"}
        head = fit_linear_head(name, *parts, classes=list(data.CLASSES), info=info)
        head.info["seconds"] = round(time.time() - started, 1)
        head.save(heads_dir())
        print(json.dumps({"name": name, **head.info}), flush=True)


if __name__ == "__main__":
    main()
