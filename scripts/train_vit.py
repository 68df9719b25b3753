"""Train the shipped ViT checkpoint (data/models/vit-synth) or a digits one.

    python scripts/train_vit.py                       # synthetic set -> data/models/vit-synth
    python scripts/train_vit.py --dataset digits --out data/models/vit-digits
    python scripts/train_vit.py --dataset hard --init data/models/vit-synth --steps 2000 --lr 1e-3
                                                      # hard set -> data/models/vit-synth-hard

Same as ``workbench train-vit``; kept as a script so the checkpoint can be rebuilt without the CLI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="synthetic", choices=["synthetic", "hard", "digits"])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--patch-size", type=int, default=4)
    ap.add_argument("--init", default=None, help="start from this checkpoint directory (fine-tune)")
    a = ap.parse_args()
    from attribution.vit.train import save_trained, train_vit
    from core.models.vit import ViTConfig

    cfg = None
    if a.patch_size != 4:
        n = 4 if a.dataset != "digits" else 10
        names = ["plus", "ring", "triangle", "x"] if n == 4 else [str(i) for i in range(10)]
        cfg = ViTConfig(patch_size=a.patch_size, n_classes=n, class_names=names)
    model, metrics = train_vit(a.dataset, a.steps, a.batch_size, a.lr, a.seed, a.threads, cfg=cfg, init=a.init,
                               log=lambda s: print(s, file=sys.stderr, flush=True))
    out = save_trained(model, metrics, a.out)
    print(json.dumps({"path": str(out), **{k: v for k, v in metrics.items() if k != "config"}}))


if __name__ == "__main__":
    main()
