"""Replacement and completeness scores, intervention agreement and cost of feature graphs on smollm2-135m:
the 4-layer residual-SAE graph (DPA) against the per-layer transcoder set's graph (DPA and gradient).
Writes JSON lines to --out; results/sae/replacement.md reads them.

    python scripts/replacement_study.py --set smollm2-135m-transcoders-w1152 --ioi 3 --facts 3 --out /tmp/rs.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

README_IOI = {"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary",
              "foil": " John", "set": "readme"}
SAE4 = [f"smollm2-135m-L{x}-resid-topk2304" for x in (6, 12, 18, 24)]


def main() -> None:
    import torch

    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="smollm2-135m-transcoders-w1152")
    ap.add_argument("--ioi", type=int, default=3)
    ap.add_argument("--facts", type=int, default=3)
    ap.add_argument("--per-layer", type=int, default=8)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--out", default="/tmp/replacement_study.jsonl")
    args = ap.parse_args()
    import workbench as wb
    from attribution.features.placement import load_dictionaries
    from circuits.feature_graph import feature_graph
    from circuits.replacement import intervention_check

    model = wb.load("smollm2-135m")
    prompts = [README_IOI]
    for name, n in (("ioi", args.ioi), ("facts", args.facts)):
        rows = [json.loads(x) for x in Path(f"data/prompts/{name}.jsonl").read_text().splitlines() if x.strip()]
        prompts += [dict(r, set=name) for r in rows[:n]]
    configs = [("sae4", "dpa", load_dictionaries(SAE4)), ("set", "dpa", load_dictionaries(f"set:{args.set}")),
               ("set", "gradient", load_dictionaries(f"set:{args.set}"))]
    with open(args.out, "a") as fh:
        for p in prompts:
            for dicts_name, method, dicts in configs:
                t0 = time.perf_counter()
                kw = dict(target=p["target"], foil=p.get("foil"), method=method,
                          per_layer=args.per_layer if dicts_name == "set" else 16, max_nodes=80, max_edges=400)
                # circuit-tracer's pruning (node 0.8, edge 0.98) for the graph shown; the scores are the unpruned
                # graph's either way
                g = feature_graph(model, p["prompt"], dicts, node_threshold=0.8, edge_threshold=0.98, **kw)
                built = time.perf_counter() - t0
                # the intervention check reads the unpruned graph: at node 0.8 (or top 80 nodes) the per-layer
                # graphs keep a feature or two (error and token nodes hold most of the influence)
                capped = feature_graph(model, p["prompt"], dicts, **{**kw, "max_nodes": 100_000, "max_edges": 10**6})
                t1 = time.perf_counter()
                check = intervention_check(model, capped, dicts, top=args.top)
                row = {"prompt": p["prompt"], "set": p["set"], "dicts": dicts_name, "method": method,
                       **{k: g.graph_scores().get(k) for k in ("replacement", "completeness")},
                       "seconds": round(built, 1), "check_seconds": round(time.perf_counter() - t1, 1),
                       "n_passes": g.n_passes, "nodes": len(g.nodes), "edges": len(g.edges),
                       "features_kept": sum(n["kind"] == "feature" for n in g.nodes),
                       "correlation": check["correlation"], "mean_abs_error": check["mean_abs_error"],
                       "mean_abs_real": check["mean_abs_real"], "pairs": check["pairs"]}
                if p["set"] == "readme":
                    row["run"] = g.save().id
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(json.dumps({k: v for k, v in row.items() if k != "pairs"}), flush=True)


if __name__ == "__main__":
    main()
