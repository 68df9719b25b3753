"""Build the shipped dictionaries of smollm2-135m: TopK residual SAEs and TopK skip transcoders at
layers 6, 12, 18 and 24, trained on the English corpus with the attention sink left out, saved in
SAELens' format under data/saes/, with a results table (results/attribution/saes_smollm2.md).

    python scripts/build_dictionaries.py [--tokens 700000] [--width 2304] [--k 64] [--layers 6,12,18,24]

One forward pass caches all twelve hooks (residual stream, MLP input, MLP output per layer) into
resumable shards under ~/.cache/workbench/acts/smollm2-135m-english/; each dictionary then trains
from disk and resumes from its checkpoint if the script is stopped and started again. A finished
dictionary is skipped unless --force. ``--workers N`` (or ``--ray-address``) caches the shards as
``sae_cache`` jobs on Ray first (the same files; see workbench/scheduler/kind_sae.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The shipped dictionaries' settings, this script's departures from attribution.sae.config.TrainConfig: the
# options' defaults below (width 2304, k 64, lr 7e-4, 700k tokens) and this batch (data/saes/*/workbench.json).
BATCH_SIZE = 1024
GOALS = {"explained_variance": (">=", 0.8), "l0": ("<=", 64), "dead_fraction": ("<", 0.05),
         "ce_loss_delta": ("<=", 0.3)}


def dict_name(model: str, layer: int, kind: str, width: int) -> str:
    part = f"resid-topk{width}" if kind == "topk" else f"transcoder{width}"
    return f"{model}-L{layer}-{part}"


def table(infos: list[dict]) -> str:
    def mark(key, v):
        op, goal = GOALS[key]
        ok = {">=": v >= goal, "<=": v <= goal, "<": v < goal}[op]
        return f"{v:.3f}" + ("" if ok else " (missed)")

    rows = ["| dictionary | hook -> hook_out | tokens | EV | EV without top-2 dims | L0 | dead | dense "
            "| loss clean | loss spliced | delta (nats) | train s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i in infos:
        m = i["metrics"]
        rows.append(
            f"| {i['name']} | {i['hook']} -> {i['hook_out']} | {i['train_tokens']:,} | "
            f"{mark('explained_variance', m['explained_variance'])} | {m['explained_variance_no_top2']:.3f} | "
            f"{mark('l0', m['l0'])} | {mark('dead_fraction', m['dead_fraction'])} | "
            f"{m['dense_fraction']:.3f} | {m['ce_loss_clean']:.3f} | {m['ce_loss_spliced']:.3f} | "
            f"{mark('ce_loss_delta', m['ce_loss_delta'])} | {i['seconds']['train']:.0f} |")
    return "\n".join(rows)


def main() -> None:
    import torch

    from attribution.sae.build import HELDOUT_TOKENS, BuildSpec, build_dictionary, rethreshold, shards_root
    from attribution.sae.shards import cache_shards
    from core.corpus import english_texts
    from core.models import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--layers", default="6,12,18,24")
    ap.add_argument("--tokens", type=int, default=700_000, help="training tokens per dictionary")
    ap.add_argument("--cache-tokens", type=int, default=1_200_000)
    ap.add_argument("--width", type=int, default=2304)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--lr", type=float, default=7e-4)
    ap.add_argument("--kinds", default="topk,transcoder")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "saes")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--l0-target", type=float, default=None,
                    help="transcoders: L0 their JumpReLU threshold aims at on training text (default k)")
    ap.add_argument("--rethreshold", action="store_true",
                    help="refit the JumpReLU threshold of transcoders already built, and measure them again")
    ap.add_argument("--workers", type=int, default=1,
                    help="cache the activation shards over N Ray workers (each holding the model once)")
    ap.add_argument("--ray-address", default=None, help="cache on the Ray cluster at this address (a job)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = zoo.load(args.model)
    layers = [int(x) for x in args.layers.split(",")]
    hooks = [f"blocks.{L}.{h}" for L in layers for h in ("hook_resid_post", "ln2.hook_normalized", "hook_mlp_out")]
    root = shards_root(model.name)
    t0 = time.time()

    def progress(stage: str, done: int, total: int) -> None:
        if done % 50_000 < 2048 or done >= total:
            print(f"[{time.time() - t0:7.0f}s] {stage}: {done:,}/{total:,}", flush=True)

    if args.workers > 1 or args.ray_address:
        cache_as_jobs(args, hooks, root)  # the passes below then find every shard in place
    held = cache_shards(model, hooks, english_texts("heldout"), root / "heldout", HELDOUT_TOKENS,
                        on_progress=lambda d, t: progress("cache heldout", d, t))
    train = cache_shards(model, hooks, english_texts("train"), root / "train", args.cache_tokens,
                         on_progress=lambda d, t: progress("cache train", d, t))
    infos = []
    for layer in layers:
        for kind in args.kinds.split(","):
            hook = f"blocks.{layer}.hook_resid_post" if kind == "topk" else f"blocks.{layer}.ln2.hook_normalized"
            name = dict_name(model.name, layer, kind, args.width)
            out = args.out / name
            if out.exists() and not args.force:
                if args.rethreshold and kind == "transcoder":
                    info = rethreshold(model, out, train, held, l0=args.l0_target)
                    print(name, "rethresholded", json.dumps(info["metrics"]), flush=True)
                info = json.loads((out / "workbench.json").read_text())
            else:
                spec = BuildSpec(hook=hook, kind=kind, width=args.width, k=args.k, tokens=args.tokens, lr=args.lr,
                                 batch_size=BATCH_SIZE, l0_target=args.l0_target)
                info = build_dictionary(model, spec, out, progress, train, held, half=True)
                print(name, json.dumps(info["metrics"]), flush=True)
            infos.append({**info, "name": name})
            write_results(infos, args)


def cache_as_jobs(args, hooks: list[str], root: Path) -> None:
    """Both splits cached by the sae_cache job (workbench/scheduler/kind_sae.py) with cache_shards' defaults, so
    the files are the ones the single pass writes."""
    from attribution.sae.build import HELDOUT_TOKENS
    from core.corpus import english_path
    from workbench.scheduler import run

    for split, tokens in (("heldout", HELDOUT_TOKENS), ("train", args.cache_tokens)):
        spec = {"kind": "sae_cache", "model": args.model, "hooks": hooks, "split": split,
                "corpus": str(english_path()), "out": str(root / split), "tokens": tokens, "ctx": 128,
                "batch_size": 16, "shard_tokens": 65_536, "skip_first": 1, "bf16": True}
        job, res = run(spec, workers=args.workers, address=args.ray_address)
        print(f"cached {split}: {res.to_json()['tokens']:,} tokens in {res.to_json()['shards']} shards "
              f"(job {job.id})", flush=True)


def write_results(infos: list[dict], args) -> None:
    out = ROOT / "results" / "attribution" / "saes_smollm2.md"
    text = (
        "# Dictionaries of smollm2-135m (held-out text, position 0 excluded)\n\n"
        "Rebuild: `python scripts/build_dictionaries.py "
        f"--tokens {args.tokens} --width {args.width} --k {args.k} --lr {args.lr} "
        f"--l0-target {args.l0_target}`. Corpus: "
        "data/corpus/english.jsonl.gz (scripts/build_english_corpus.py), train split for training, "
        "held-out split (64k tokens) for every figure below. Goals: explained variance >= 0.8, "
        "L0 <= 64, dead < 5%, spliced loss increase <= 0.3 nats; '(missed)' marks a figure that "
        "misses its goal. Residual SAEs reconstruct `hook_resid_post`; transcoders predict "
        "`hook_mlp_out` from `ln2.hook_normalized` (the MLP's input) with a linear skip term. "
        "Dense = active on more than 10% of tokens. Weights are stored in float16 and every figure "
        "is measured on the stored weights.\n\n" + table(infos) + "\n"
    )
    if out.exists() and "\n## Reading" in out.read_text():  # the written reading is kept
        text += "\n## Reading" + out.read_text().split("\n## Reading", 1)[1]
    out.write_text(text)


if __name__ == "__main__":
    main()
