"""The localization benchmark on dinov2-small, both linear heads, in one process (the backbone loaded once):
what results/vit/dinov2_small.md reports.

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
from attribution.vit.evaluate import cost_ratio, evaluate
from core.models.dinov2 import load_backbone, with_head


def merge(out: Path, head: str) -> tuple[str, dict]:
    """One table from the split runs of a head (per-image means; seconds weighted by each run's images)."""
    import pandas as pd

    from attribution.vit.evaluate import METRICS, metrics_markdown

    runs = sorted(out.glob(f"{head}.json")) + sorted(out.glob(f"{head}_from*.json"))
    records = [json.loads(r.read_text()) for r in runs]
    frames = [pd.read_csv(r.with_name(r.stem + "_per_image.csv")) for r in runs]
    per_image = pd.concat(frames, ignore_index=True)
    n = int(per_image["image"].nunique())
    table = {}
    for method in records[0]["methods"]:
        part = per_image[per_image["method"] == method]
        row = {m: float(part[m].mean()) for m in METRICS if m in part}
        row["seconds_per_image"] = sum(r["methods"][method]["seconds_per_image"] * r["n"] for r in records) / n
        table[method] = row
    acc = sum(r["accuracy"] * r["n"] for r in records) / n
    return metrics_markdown(table), {"n": n, "accuracy": acc, "methods": table,
                                                 "runs": [{k: r[k] for k in ("start", "n", "seconds", "cost")
                                                           if k in r} for r in records]}


def where(head: str, n: int, methods: list[str], maps: dict[str, torch.Tensor] | None = None
          ) -> dict[str, dict[str, int]]:
    """Where each method's top patch lands, on the held-out images 0 .. n-1 (the true label explained): on the
    decisive object's visible pixels, else on another object (hard set: its role, from data.hard_scene), else
    on the background (synthetic: no object pixel brighter than 0.3 in the patch). ``maps``: (image, patch)
    maps already computed (a stored vit-eval run's), else each method is run here."""
    from attribution.vit.methods import explain

    make = data.synthetic if head == "synthetic" else data.hard
    if maps is None:
        model = with_head(load_backbone(224), head)
        batch = data.at_size(make(n, data.TEST_SEED), 224)
        maps = {m: explain(model, batch.images, m, batch.labels).flat for m in methods}
    scale = 224 // data.IMAGE_SIZE  # 7: one 14 px patch is 2 x 2 pixels of the 32 px image
    grid = 224 // 14
    counts: dict[str, dict[str, int]] = {}
    for method in methods:
        top = maps[method].reshape(len(maps[method]), -1)[:n].argmax(1).tolist()
        got: dict[str, int] = {}
        for i, t in enumerate(top):
            r, c = divmod(t, grid)
            rows, cols = slice(r * 14 // scale, (r + 1) * 14 // scale), slice(c * 14 // scale, (c + 1) * 14 // scale)
            small = make(1, data.TEST_SEED, start=i)
            if bool(small.masks[0, rows, cols].any()):
                role = "decisive"
            elif head == "hard":
                roles = [o["role"] for o in data.hard_scene(data.TEST_SEED, i)["objects"]
                         if o["pixels"][rows, cols].any()]
                role = next((x for x in ("decoy", "near_red", "distractor", "occluder") if x in roles),
                            "background or clutter")
            else:
                role = "other object" if float(small.images[0, :, rows, cols].max()) > 0.3 else "background"
            got[role] = got.get(role, 0) + 1
        counts[method] = got
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--where", action="store_true", help="Print where each method's top patch lands.")
    ap.add_argument("--run", default=None, help="With --where: read the maps of this stored vit-eval run.")
    ap.add_argument("--merge", action="store_true", help="Print the merged tables of the runs in --out.")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--start", type=int, default=0, help="First image index (runs can be split and merged).")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ig-steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--methods", default="dap,rollout,gae,attention,dpa,ig")
    ap.add_argument("--heads", default="synthetic,hard")
    ap.add_argument("--out", default="/tmp/dinov2_eval")
    args = ap.parse_args()
    out = Path(args.out)
    if args.where:
        torch.set_num_threads(args.threads)
        maps = None
        if args.run:  # a stored `workbench vit-eval` run: its maps (all images), its head
            from core.store import RunStore

            run = RunStore().get(args.run)
            maps = {k[4:]: v for k, v in run.tensors().items() if k.startswith("map_")}
            args.heads = run.meta.get("args", {}).get("head", "synthetic")
        for head in args.heads.split(","):
            print(head, json.dumps(where(head, args.n, args.methods.split(","), maps)), flush=True)
        return
    if args.merge:
        for head in args.heads.split(","):
            md, info = merge(out, head)
            print(f"## {head}\n{md}\n{json.dumps(info)}\n")
        return
    torch.set_num_threads(args.threads)
    out.mkdir(parents=True, exist_ok=True)
    base = load_backbone(224)
    for head in args.heads.split(","):
        model = with_head(base, head)
        make = data.synthetic if head == "synthetic" else data.hard
        batch = data.at_size(make(args.n, data.TEST_SEED, start=args.start), 224)
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
        record["start"] = args.start
        tag = f"{head}" if args.start == 0 else f"{head}_from{args.start}"
        (out / f"{tag}.json").write_text(json.dumps(record, indent=2) + "\n")
        per_image = res.per_image.assign(image=res.per_image["image"] + args.start)
        per_image.to_csv(out / f"{tag}_per_image.csv", index=False)
        print(res.markdown(), flush=True)
        print(json.dumps({k: record[k] for k in ("accuracy", "cost", "seconds")}), flush=True)


if __name__ == "__main__":
    main()
