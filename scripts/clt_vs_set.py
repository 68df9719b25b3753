"""A cross-layer transcoder beside a per-layer transcoder set, layer by layer: held-out EV, L0 and dead features of
each (their workbench.json), and how much of the CLT's feature output at each layer comes from earlier layers'
features (measured on text: the mean over tokens of |cross-layer part|^2 / |all features' part|^2).

    python scripts/clt_vs_set.py --clt smollm2-135m-clt-w576-t100k --set smollm2-135m-tc-w1152-t200k-e3-btk
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clt", required=True)
    ap.add_argument("--set", required=True)
    ap.add_argument("--prompts", default="data/prompts/ioi.jsonl,data/prompts/facts.jsonl")
    ap.add_argument("--n", type=int, default=16, help="prompts from each file")
    ap.add_argument("--json", default="", help="also write the rows here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    import workbench as wb
    from attribution.sae.clt import load_clt, resolve_clt
    from attribution.sae.sets import resolve_set, summary

    clt = load_clt(resolve_clt(args.clt))
    model = wb.load(clt.info["model"])
    per_set = {r["layer"]: r for r in summary(resolve_set(args.set))["quality"]}
    texts = []
    for path in args.prompts.split(","):
        rows = [json.loads(x) for x in open(path) if x.strip()][: args.n]
        texts += [r["prompt"] for r in rows]
    L = clt.n_layers  # noqa: N806
    cross = torch.zeros(L, dtype=torch.float64)
    whole = torch.zeros(L, dtype=torch.float64)
    n_tok = 0
    with torch.no_grad():
        for t in texts:
            tokens = model.encode(t).tokens
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("ln2.hook_normalized"))
            xs = torch.stack([cache[f"blocks.{x}.ln2.hook_normalized"][0, 1:] for x in range(L)], 1).float()
            feats = [clt.encode(s, xs[:, s]) for s in range(L)]
            for tgt in range(L):
                own = feats[tgt] @ clt.writes_into(tgt, tgt)
                earlier = sum((feats[s] @ clt.writes_into(s, tgt) for s in range(tgt)), torch.zeros_like(own))
                cross[tgt] += (earlier.norm(dim=1) ** 2).sum().double()
                whole[tgt] += ((own + earlier).norm(dim=1) ** 2).sum().double()
            n_tok += xs.shape[0]
    rows = []
    m = clt.info.get("metrics") or {}
    for layer in range(L):
        c, s = m.get(str(layer)) or {}, per_set.get(layer) or {}
        rows.append({"layer": layer, "set_ev": s.get("explained_variance"), "set_l0": s.get("l0"),
                     "set_dead": s.get("dead_fraction"), "clt_ev": c.get("explained_variance"), "clt_l0": c.get("l0"),
                     "clt_dead": c.get("dead_fraction"),
                     "cross_share": float(cross[layer] / whole[layer]) if whole[layer] > 0 else None})
    fmt = lambda v, spec=".3f": "-" if v is None else format(v, spec)  # noqa: E731
    print(f"CLT {clt.name} ({clt.width} features x {L} layers) against set {args.set}; cross-layer share over "
          f"{n_tok} tokens of {len(texts)} prompts\n")
    print("| layer | set EV | set L0 | set dead | CLT EV | CLT L0 | CLT dead | CLT output from earlier layers |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['layer']} | {fmt(r['set_ev'])} | {fmt(r['set_l0'], '.1f')} | {fmt(r['set_dead'], '.1%')} | "
              f"{fmt(r['clt_ev'])} | {fmt(r['clt_l0'], '.1f')} | {fmt(r['clt_dead'], '.1%')} | "
              f"{fmt(r['cross_share'], '.1%')} |")
    mean = lambda k: sum(r[k] for r in rows if r[k] is not None) / max(1, sum(r[k] is not None for r in rows))  # noqa: E731
    print(f"| mean | {mean('set_ev'):.3f} | {mean('set_l0'):.1f} | {mean('set_dead'):.1%} | {mean('clt_ev'):.3f} | "
          f"{mean('clt_l0'):.1f} | {mean('clt_dead'):.1%} | {mean('cross_share'):.1%} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
