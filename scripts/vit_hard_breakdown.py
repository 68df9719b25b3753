"""Where each method's top patch lands on the hard set, and pointing by occlusion / correctness.

    workbench vit-eval --model vit-synth-hard --dataset hard --n 200 --seed 2 --threads 1 --json  # -> run id
    python scripts/vit_hard_breakdown.py RUN_ID [RUN_ID ...]

Reads the runs' stored maps and per-image table (the run store of WORKBENCH_RUNS) and the layout of
every image from ``data.hard_scene``; prints the two tables of results/vit/hard_seed2.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ORDER = ["dap", "attention", "rollout", "gae", "gradcam", "tam", "ig", "random", "dpa"]
ROLES = ["target", "occluder", "decoy", "near_red", "distractor", "background"]


def _table(head: list[str], rows: list[tuple[str, list[float]]]) -> str:
    lines = ["| method | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals) + " |" for name, vals in rows]
    return "\n".join(lines)


def main(run_ids: list[str]) -> None:
    import numpy as np
    import pandas as pd
    import torch

    import workbench as wb
    from attribution.vit import data
    from core.store import RunStore

    store = RunStore()
    runs = [store.get(r) for r in run_ids]
    n, seed = int(runs[0].meta.get("args", {}).get("n", 200)), int(runs[0].meta.get("args", {}).get("seed", 2))
    tens: dict = {}
    for r in runs:
        tens.update(r.tensors())
    scenes = [data.hard_scene(seed, i) for i in range(n)]
    methods = [m for m in ORDER if f"map_{m}" in tens]
    rows = []
    for m in methods:
        maps = tens[f"map_{m}"].reshape(n, -1)
        cnt = dict.fromkeys(ROLES, 0)
        for i, sc in enumerate(scenes):
            r, c = divmod(int(maps[i].argmax()), 8)
            patch = np.zeros((32, 32), bool)
            patch[r * 4:r * 4 + 4, c * 4:c * 4 + 4] = True
            hit = "target" if (patch & sc["mask"]).any() else "background"
            if hit != "target":
                for o in sc["objects"]:  # the last-drawn object under the patch
                    if o["role"] != "target" and (o["pixels"] & patch).any():
                        hit = o["role"]
            cnt[hit] += 1
        rows.append((m, [cnt[k] / n for k in ROLES]))
    print(_table(ROLES, rows), "\n")

    model = wb.load("vit-synth-hard")
    batch = data.hard(n, seed)
    with torch.no_grad():
        ok = (model(batch.images).argmax(-1) == batch.labels).numpy()
    occl = np.array([any(o["role"] == "occluder" for o in sc["objects"]) for sc in scenes])
    df = pd.concat([r.table("per_image") for r in runs])
    df["correct"], df["occluded"] = ok[df["image"].values], occl[df["image"].values]
    parts = [("all", df), ("correct", df[df.correct]), ("misclassified", df[~df.correct]),
             ("occluded", df[df.occluded]), ("not occluded", df[~df.occluded])]
    head = [f"pointing ({k}, {int(len(d) / len(methods))})" for k, d in parts] + ["mask IoU (correct)",
                                                                                    "deletion (correct)"]
    rows = []
    for m in methods:
        vals = [float(d[d.method == m]["pointing_game"].mean()) for _, d in parts]
        good = df[(df.method == m) & df.correct]
        rows.append((m, vals + [float(good["mask_iou"].mean()), float(good["deletion_auc"].mean())]))
    print(_table(head, rows))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
