"""Which efficient-training ingredients pay for the per-layer transcoders (issue 53 item 1), measured on a few
layers of one model: the set builder's recipe against one change at a time (the encoder initialised as the
transpose of a unit-norm decoder; no AuxK, or AuxK from early on; lr warm-up and cosine decay; several epochs over
the one activation cache), then all the winners together. Every variant trains on the same cached tokens (the
set's shard format, one forward for all layers) and is scored on the same held-out tokens in its TopK form:
explained variance of the MLP output, dead features (never in the top k on the held-out tokens), seconds.

    nice -n 19 python scripts/transcoder_recipes.py --model smollm2-135m --layers 3,11,20 --tokens 40000 \\
        --out results/sae/transcoder_recipes.jsonl
    python scripts/transcoder_recipes.py --report results/sae/transcoder_recipes.jsonl
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from itertools import islice
from pathlib import Path

VARIANTS = {
    "set recipe": {},
    "transpose init": {"init": "transpose"},
    "no AuxK": {"aux": False},
    "AuxK early (window 10)": {"aux_window": 10},
    "warm-up 10% + cosine": {"warmup": "10%", "schedule": "cosine"},
    "3 epochs": {"epochs": 3},
    "lr 2e-3": {"lr": 2e-3},
    "lr 2e-3 + 3 epochs": {"lr": 2e-3, "epochs": 3},
    "6 epochs": {"epochs": 6},
    # the set's massive-token rule (SetSpec.massive_above): tokens whose MLP output is over 100x the median norm
    # left out of training; every variant's EV is also reported without them (ev_rule)
    "set recipe, massive left out": {"massive_above": 100},
    "lr 2e-3 + 3 epochs, massive left out": {"lr": 2e-3, "epochs": 3, "massive_above": 100},
    # a lower multiple, to see what it would take beside the ordinary tails (layer 2's reach 73x)
    "lr 2e-3 + 3 epochs, over 50x left out": {"lr": 2e-3, "epochs": 3, "massive_above": 50},
    # BatchTopK: the saved JumpReLU form (one global threshold) fires as training did; per-token TopK at lr 2e-3 and
    # 3 epochs left tokens with large outputs firing 500-800 features in that form (layers 1, 2, 9, 10)
    "BatchTopK, massive left out": {"sparsity": "batchtopk", "massive_above": 100},
    "BatchTopK + lr 2e-3 + 3 epochs, massive left out": {"sparsity": "batchtopk", "lr": 2e-3, "epochs": 3,
                                                         "massive_above": 100},
}
RULE = 100  # the multiple of the median MLP-output norm the rule uses (SetSpec's default)


def _score(w: dict, x, y, limit: float, threshold: float | None = None) -> dict:
    """EV on every held-out token, and (ev_rule) without those over ``limit`` (the rule's MLP-output norm);
    ev_jumprelu: the form the set saves (one global threshold, ``threshold``), without those tokens too."""
    import torch

    with torch.no_grad():
        pre = torch.relu(x @ w["W_enc"] + w["b_enc"])
        vals, idx = pre.topk(int(w["k"]), dim=-1)
        f = torch.zeros_like(pre).scatter(-1, idx, vals)
        y_hat = f @ w["W_dec"] + w["b_dec"] + x @ w["W_skip"].T
        ev = 1 - float(((y - y_hat) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())
        fired = (f > 0).any(0)
        # massive-activation tokens (MLP output norm > 50x the median: smollm2's layer 11 writes ~24,000 at a few
        # position-1 tokens) carry nearly all the variance where they occur; EV without them as well
        norm = y.norm(dim=1)
        ok = norm <= 50 * norm.median()
        yt, yh = y[ok], y_hat[ok]
        ev_typical = 1 - float(((yt - yh) ** 2).sum() / ((yt - yt.mean(0)) ** 2).sum())
        keep = norm <= limit
        yr, yrh = y[keep], y_hat[keep]
        ev_rule = 1 - float(((yr - yrh) ** 2).sum() / ((yr - yr.mean(0)) ** 2).sum())
        ev_jr = l0_jr_max = None
        if threshold is not None:
            fj = torch.relu(x[keep] @ w["W_enc"] + w["b_enc"])
            fj = fj * (fj > threshold)
            yj = fj @ w["W_dec"] + w["b_dec"] + x[keep] @ w["W_skip"].T
            ev_jr = 1 - float(((yr - yj) ** 2).sum() / ((yr - yr.mean(0)) ** 2).sum())
            l0_jr_max = int((fj > 0).sum(1).max())
        skip_only = x @ w["W_skip"].T + w["b_dec"]
        ev_skip = 1 - float(((y - skip_only) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())
    return {"ev": ev, "dead": 1 - float(fired.float().mean()), "ev_skip_only": ev_skip, "ev_typical": ev_typical,
            "massive_tokens": int((~ok).sum()), "ev_rule": ev_rule, "rule_heldout_left_out": int((~keep).sum()),
            "rule_train_left_out": w.get("massive_train"), "median_ratio_max": float(norm.max() / norm.median()),
            "ev_jumprelu": ev_jr, "l0_jumprelu_max": l0_jr_max}


def run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    import workbench as wb
    from attribution.sae.build import threshold_sample
    from attribution.sae.sets import cache_layers, shuffled_docs, transcoder_hooks
    from attribution.sae.train_shards import massive_norm, topk_threshold, train_topk_transcoder

    model = wb.load(args.model)
    layers = [int(x) for x in args.layers.split(",")]
    cache = Path(args.cache)
    t0 = time.time()
    train = cache_layers(model, layers, shuffled_docs("train", 0), cache / "train", args.tokens)
    held = cache_layers(model, layers, shuffled_docs("heldout", 0), cache / "heldout", 8192)
    print(f"cached {args.tokens} + 8192 tokens of layers {layers} in {time.time() - t0:.0f} s", flush=True)
    want = args.variants.split("|") if args.variants else list(VARIANTS)
    with open(args.out, "a") as fh:
        for layer in layers:
            hin, hout = transcoder_hooks(layer)
            x, y = held[layer].tensor(hin).float(), held[layer].tensor(hout).float()
            # the rule's limit as the trainer sets it: RULE x the median of the first training shard's sample
            limit = massive_norm(train[layer].load(0, [hout])[hout][:50_000], RULE)
            for name in want:
                recipe = dict(VARIANTS[name])
                steps = int(recipe.get("epochs", 1)) * args.tokens // 512
                if isinstance(recipe.get("warmup"), str):
                    recipe["warmup"] = max(1, steps * int(recipe["warmup"].rstrip("%")) // 100)
                ckpt = cache / "ckpt" / f"L{layer}-{abs(hash(name))}"
                shutil.rmtree(ckpt, ignore_errors=True)
                t1 = time.time()
                lr = float(recipe.pop("lr", 7e-4))  # the set's lr unless the variant names one
                w = train_topk_transcoder(train[layer], hin, hout, args.width, 32, args.tokens, ckpt, lr=lr,
                                          recipe=recipe, checkpoint_every=10**9)
                recipe["lr"] = lr
                sample = threshold_sample(train[layer], hin, hook_out=hout, massive_norm=w["massive_norm"])
                row = {"model": args.model, "layer": layer, "variant": name, "recipe": recipe, "tokens": args.tokens,
                       "width": args.width, "steps": steps, "seconds": round(time.time() - t1, 1),
                       **_score(w, x, y, limit, topk_threshold(w, sample))}
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(json.dumps(row), flush=True)
                shutil.rmtree(ckpt, ignore_errors=True)


def norms(args: argparse.Namespace) -> None:
    """How the MLP-output norm (and the MLP input's, the normed stream) spreads on every layer, as multiples of
    the layer's median, over ``--norm-tokens`` tokens of each split (position 0 left out, as the shards leave it):
    the data the set's massive-token rule (SetSpec.massive_above) is chosen from."""
    import torch

    torch.set_num_threads(1)
    import workbench as wb
    from attribution.sae.cache import token_windows
    from attribution.sae.sets import shuffled_docs, transcoder_hooks

    model = wb.load(args.model)
    n_layers = model.arch.n_layers
    hooks = [h for lay in range(n_layers) for h in transcoder_hooks(lay)]
    cuts = (10, 30, 100, 300, 1000)
    for split in ("train", "heldout"):
        got: dict[str, list] = {h: [] for h in hooks}
        n = 0
        stream = iter(token_windows(model, shuffled_docs(split, 0), 128))
        while n < args.norm_tokens:
            batch = list(islice(stream, 16))
            if not batch:
                break
            batch = [w for w in batch if len(w) == 128] or batch[:1]
            toks = torch.tensor([w[:min(len(x) for x in batch)] for w in batch])
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                _, cache = model.run_with_cache(toks, names_filter=hooks)
            for h in hooks:
                got[h].append(cache[h][:, 1:].float().norm(dim=-1).flatten())
            n += toks[:, 1:].numel()
        for lay in range(n_layers):
            row = {"split": split, "layer": lay, "tokens": n}
            for part, h in zip(("in", "out"), transcoder_hooks(lay), strict=True):
                v = torch.cat(got[h])
                med = float(v.median())
                r = v / med
                row[part] = {"median": round(med, 2), "p99.9": round(float(r.quantile(0.999)), 1),
                             "max": round(float(r.max()), 1), "over": {c: int((r > c).sum()) for c in cuts}}
            print(json.dumps(row), flush=True)


def report(path: str) -> None:
    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    layers = sorted({r["layer"] for r in rows})
    names = list(dict.fromkeys(r["variant"] for r in rows))
    rule = all(r.get("ev_rule") is not None for r in rows)  # runs since the massive-token rule
    cols = [f"L{x} EV" for x in layers] + ([f"L{x} EV (rule)" for x in layers] if rule else [])
    print("| variant | " + " | ".join(cols) + " | mean EV |" + (" mean EV (rule) |" if rule else "")
          + " mean dead | mean s |")
    print("|---|" + "---:|" * (len(cols) + 3 + rule))
    for n in names:
        rs = {r["layer"]: r for r in rows if r["variant"] == n}
        if len(rs) < len(layers):
            continue
        evs = [rs[x]["ev"] for x in layers]
        cells = [f"{v:.3f}" for v in evs] + [f"{sum(evs) / len(evs):.3f}"]
        if rule:
            evr = [rs[x]["ev_rule"] for x in layers]
            cells = [f"{v:.3f}" for v in evs + evr] + [f"{sum(evs) / len(evs):.3f}", f"{sum(evr) / len(evr):.3f}"]
        print(f"| {n} | " + " | ".join(cells) + f" | {sum(rs[x]['dead'] for x in layers) / len(layers):.1%} | "
              f"{sum(rs[x]['seconds'] for x in layers) / len(layers):.0f} |")
    saved = [r for r in rows if r.get("ev_jumprelu") is not None]
    if saved:  # the form the set saves (JumpReLU, one threshold), massive tokens left out
        print("\n| variant | " + " | ".join(f"L{x} EV saved (max L0)" for x in layers) + " | mean EV saved |")
        print("|---|" + "---:|" * (len(layers) + 1))
        for n in names:
            rs = {r["layer"]: r for r in saved if r["variant"] == n}
            if len(rs) == len(layers):
                evs = [rs[x]["ev_jumprelu"] for x in layers]
                cells = [f"{rs[x]['ev_jumprelu']:.3f} ({rs[x]['l0_jumprelu_max']})" for x in layers]
                print(f"| {n} | " + " | ".join(cells) + f" | {sum(evs) / len(evs):.3f} |")
    if rule:
        for x in layers:
            r = next(r for r in rows if r["layer"] == x)
            left = [q.get("rule_train_left_out") for q in rows if q["layer"] == x and q.get("rule_train_left_out")
                    and q["recipe"].get("massive_above") == RULE]
            print(f"L{x}: largest held-out MLP-output norm {r['median_ratio_max']:.0f}x the median; the rule leaves "
                  f"out {r['rule_heldout_left_out']} held-out and {max(left, default=0)} training tokens")
    base = {r["layer"]: r["ev_skip_only"] for r in rows if r["variant"] == names[0]}
    print(f"\n{names[0]}'s trained skip term alone (features off): "
          + ", ".join(f"L{x} {base[x]:.3f}" for x in layers if x in base))
    typical = [r for r in rows if r.get("ev_typical") is not None]
    for r in typical:
        print(f"L{r['layer']} {r['variant']}: EV {r['ev']:.3f}, without its {r['massive_tokens']} massive-activation "
              f"tokens {r['ev_typical']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--layers", default="3,11,20")
    ap.add_argument("--tokens", type=int, default=40_000)
    ap.add_argument("--width", type=int, default=1152)
    ap.add_argument("--variants", default="", help="names from VARIANTS, separated by '|'")
    ap.add_argument("--cache", default=str(Path.home() / ".cache/workbench/recipes"))
    ap.add_argument("--out", default="/tmp/transcoder_recipes.jsonl")
    ap.add_argument("--report", default="")
    ap.add_argument("--norms", action="store_true", help="print every layer's MLP norm spread (multiples of the "
                    "median) and stop")
    ap.add_argument("--norm-tokens", type=int, default=16_384)
    args = ap.parse_args()
    if args.norms:
        norms(args)
    else:
        report(args.report) if args.report else run(args)


if __name__ == "__main__":
    main()
