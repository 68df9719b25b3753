"""Replacement and completeness scores, intervention agreement and cost of feature graphs: the residual-SAE
graph (DPA) against the per-layer transcoder set's graph (DPA and gradient), on one model's IOI and facts rows.
Writes JSON lines to --out (one per prompt x graph); ``--report FILE`` prints the summary table of such a file.

    python scripts/replacement_study.py --model smollm2-135m --set smollm2-135m-transcoders-w1152 \\
        --source bench --ioi 4 --facts 4 --out results/sae/replacement_bench.jsonl
    python scripts/replacement_study.py --report results/sae/replacement_bench.jsonl

--source bench: the test rows of data/bench/<model>/{ioi,facts}.jsonl (each answered top-1 by that model);
--source prompts: data/prompts/{ioi,facts}.jsonl (the first study's rows). The README's IOI prompt comes first.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

README_IOI = {"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary",
              "foil": " John", "set": "readme"}
RESID = {"smollm2-135m": [f"smollm2-135m-L{x}-resid-topk2304" for x in (6, 12, 18, 24)],
         # no gemma3 dictionary ships (Gemma Terms of Use): the one trained into the user's cache
         # (docs/figures/README.md)
         "gemma3-270m": [str(Path.home() / ".cache/workbench/saes/gemma3-270m-L6-resid-topk2560")]}


def prompts(model: str, source: str, n_ioi: int, n_facts: int) -> list[dict]:
    out = [README_IOI]
    for name, n in (("ioi", n_ioi), ("facts", n_facts)):
        path = Path(f"data/bench/{model}/{name}.jsonl") if source == "bench" else Path(f"data/prompts/{name}.jsonl")
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        if source == "bench":
            rows = [r for r in rows if r.get("split") == "test"]
        out += [{"prompt": r["prompt"], "target": r["target"], "foil": r.get("foil"), "set": name} for r in rows[:n]]
    ioi, facts = [r for r in out if r["set"] == "ioi"], [r for r in out if r["set"] == "facts"]
    mixed = [r for pair in zip(ioi, facts, strict=False) for r in pair]  # alternated: a run cut short has both
    return out[:1] + mixed + ioi[len(facts):] + facts[len(ioi):]


def prompts_of(path: str, n_ioi: int, n_facts: int) -> list[dict]:
    """The prompts of an earlier run's JSON lines, in order (so every graph of a model reads the same rows)."""
    seen: dict[str, dict] = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        if r and r["prompt"] not in seen:
            seen[r["prompt"]] = {k: r[k] for k in ("prompt", "target", "foil", "set")}
    rows = list(seen.values())
    ioi, facts = [r for r in rows if r["set"] == "ioi"][:n_ioi], [r for r in rows if r["set"] == "facts"][:n_facts]
    mixed = [r for pair in zip(ioi, facts, strict=False) for r in pair]  # alternated: a run cut short has both
    rest = ioi[len(facts):] + facts[len(ioi):]
    return [r for r in rows if r["set"] == "readme"] + mixed + rest


def run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    import workbench as wb
    from attribution.features.placement import load_dictionaries
    from circuits.feature_graph import feature_graph, node_influence, prune
    from circuits.replacement import intervention_check

    model = wb.load(args.model)
    want = args.graphs.split(",")
    # the residual SAEs only when a resid graph is asked for (gemma3's is trained into the user's cache)
    resid = (load_dictionaries(args.resid.split(",") if args.resid else RESID[args.model])
             if any(w.startswith("resid") for w in want) else [])
    label = f"{len(resid)} residual SAE{'s' if len(resid) > 1 else ''} (L{','.join(str(d.layer) for d in resid)})"
    tcs = load_dictionaries(f"set:{args.set}") if any(w.startswith("set") for w in want) else []
    clt = load_dictionaries(f"clt:{args.clt}") if "clt-gradient" in want else []
    # set-dpa-held: DPA with the transcoders' skip terms held constant, as before issue 53 (the "before" rows)
    configs = [c for c in [("resid", "dpa", resid), ("set", "dpa", tcs), ("set", "dpa-held", tcs),
                           ("set", "gradient", tcs), ("clt", "gradient", clt)] if f"{c[0]}-{c[1]}" in want]
    with open(args.out, "a") as fh:
        rows = (prompts_of(args.prompts_from, args.ioi, args.facts) if args.prompts_from
                else prompts(args.model, args.source, args.ioi, args.facts))
        for p in rows:
            for dicts_name, method, dicts in configs:
                t0 = time.perf_counter()
                kw = dict(target=p["target"], foil=p.get("foil"), method=method.split("-")[0],
                          per_layer=args.per_layer if dicts_name in ("set", "clt") else 16)
                if method == "dpa-held":
                    kw["live_skip"] = False
                # one unpruned graph: the scores are computed on it either way, the intervention check reads it
                # (at node 0.8 the per-layer graphs keep a feature or two), and circuit-tracer's pruning (node
                # 0.8, edge 0.98, then at most 80 nodes / 400 edges) of its edges gives the features kept
                capped = feature_graph(model, p["prompt"], dicts, **kw, max_nodes=100_000, max_edges=10**6)
                built = time.perf_counter() - t0
                edges: dict[str, dict[str, float]] = {}
                for e in capped.edges:
                    edges.setdefault(e.target, {})[e.source] = e.score
                kinds = {n.id: n.kind for n in capped.nodes}
                kept, _ = prune(edges, node_influence(edges, {"logits": 1.0}), 80, 400, 0.8, 0.98)
                t1 = time.perf_counter()
                check = intervention_check(model, capped, dicts, top=args.top)
                row = {"model": args.model, "source": args.source, "prompt": p["prompt"], "target": p["target"],
                       "foil": p.get("foil"), "set": p["set"], "dicts": dicts_name,
                       "label": {"resid": label, "set": f"{len(tcs)} transcoders ({args.set})",
                                 "clt": f"cross-layer transcoder ({args.clt})"}[dicts_name],
                       "method": method, **{k: capped.graph_scores().get(k) for k in ("replacement", "completeness")},
                       "seconds": round(capped.seconds, 1), "wall_seconds": round(built, 1),
                       "check_seconds": round(time.perf_counter() - t1, 1),
                       "n_passes": capped.n_passes, "nodes": len(kept),
                       "features_kept": sum(kinds.get(n) == "feature" for n in kept),
                       "correlation": check["correlation"], "mean_abs_error": check["mean_abs_error"],
                       "mean_abs_real": check["mean_abs_real"], "pairs": check["pairs"]}
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(json.dumps({k: v for k, v in row.items() if k != "pairs"}), flush=True)


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return None if sx == 0 or sy == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / (sx * sy)


def report(path: str) -> None:
    """Markdown summary per model x prompt set x graph x method ('ioi' includes the README prompt), over the
    prompts on which every graph of the model was run."""
    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    graphs: dict[str, set] = {}  # only the prompts every graph of the model was run on
    for r in rows:
        graphs.setdefault(r["model"], set()).add((r["dicts"], r["method"]))
    done = {(r["model"], r["prompt"]) for r in rows
            if sum(q["model"] == r["model"] and q["prompt"] == r["prompt"] for q in rows) == len(graphs[r["model"]])}
    rows = [r for r in rows if (r["model"], r["prompt"]) in done]
    fmt = lambda v, d=3: "n/a" if v is None else f"{v:.{d}f}"  # noqa: E731
    print("| model | prompt set | graph | method | n | mean replacement | mean completeness | pooled intervention r "
          "| mean abs error | mean abs real | mean build s |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    keys = sorted({(r["model"], r["dicts"], r["method"]) for r in rows}, key=lambda k: (k[0], k[1] != "resid", k[2]))
    for model, dicts, method in keys:
        for pset in ("ioi", "facts", "all"):
            rs = [r for r in rows if (r["model"], r["dicts"], r["method"]) == (model, dicts, method)
                  and (pset == "all" or r["set"] == pset or (pset == "ioi" and r["set"] == "readme"))]
            if not rs:
                continue
            pairs = [q for r in rs for q in r["pairs"]]
            r_pool = _pearson([q["predicted"] for q in pairs], [q["real"] for q in pairs])
            mean = lambda k, rs=rs: sum(r[k] for r in rs) / len(rs)  # noqa: E731
            err = sum(abs(q["predicted"] - q["real"]) for q in pairs) / max(1, len(pairs))
            real = sum(abs(q["real"]) for q in pairs) / max(1, len(pairs))
            print(f"| {model} | {pset} | {rs[0]['label']} | {method} | {len(rs)} | {mean('replacement'):.3f} | "
                  f"{mean('completeness'):.3f} | {fmt(r_pool, 2)} ({len(pairs)} features) | {err:.3f} | {real:.3f} | "
                  f"{mean('seconds'):.1f} |")


# DPA's variants on a replacement model (issue 53 item 3): path weights x the transcoders' skip term
VARIANTS = {"gradient": None,
            "dpa (old: skip held)": dict(live_skip=False),
            "dpa": dict(),
            "dpa frozen attention, skip held": dict(live_skip=False, w_q=0.0, w_k=0.0, w_v=1.0),
            "dpa frozen attention": dict(w_q=0.0, w_k=0.0, w_v=1.0)}


def _sinks(g) -> tuple[dict[str, float], dict[str, float], float]:
    """Where a graph's influence on the logits ends, as graph_scores counts it: per layer the error nodes'
    influence, the embeddings' by position, and the total (token + error)."""
    from circuits.influence import node_influence, node_kind

    edges: dict[str, dict[str, float]] = {}
    for e in g.edges:
        edges.setdefault(e.target, {})[e.source] = float(e.score)
    targets = set(edges)
    edges = {t: {s: v for s, v in row.items() if node_kind(s) != "feature" or s in targets}
             for t, row in edges.items()}
    infl = node_influence(edges, {"logits": 1.0})
    err: dict[str, float] = {}
    emb: dict[str, float] = {}
    for n, v in infl.items():
        if node_kind(n) == "error":
            layer = n.split(".")[0].lstrip("L").rstrip("TM")
            err[layer] = err.get(layer, 0.0) + v
        elif node_kind(n) == "token":
            emb[n] = v
    return err, emb, sum(err.values()) + sum(emb.values())


def anatomy(args: argparse.Namespace) -> None:
    """Per prompt, the gradient graph and DPA's four variants over the set: scores, where the influence on the
    logits ends (per layer's error nodes, the embeddings), how far each DPA variant's edges into the logits are
    from the gradient graph's, and each layer's skip-term share of the logit target (what the old DPA dropped)."""
    import torch

    torch.set_num_threads(1)
    import workbench as wb
    from attribution.dpa.params import DPAParams
    from attribution.dpa.pullback import dpa_cache, logit_target, pull_back
    from attribution.features.placement import load_dictionaries, sources
    from attribution.features.scores import hooks_of
    from circuits.feature_graph import feature_graph, skip_back

    model = wb.load(args.model)
    tcs = load_dictionaries(f"set:{args.set}")
    by_layer = {d.layer: d for d in tcs}
    rows = prompts(args.model, args.source, args.ioi, args.facts)
    with open(args.out, "a") as fh:
        for p in rows:
            graphs = {}
            for name, kw in VARIANTS.items():
                t0 = time.perf_counter()
                method = "gradient" if kw is None else "dpa"
                graphs[name] = feature_graph(model, p["prompt"], tcs, target=p["target"], foil=p.get("foil"),
                                             method=method, per_layer=args.per_layer, max_nodes=100_000,
                                             max_edges=10**6, **(kw or {}))
                graphs[name].metadata["wall"] = time.perf_counter() - t0
            ref = {e.source: e.score for e in graphs["gradient"].edges if e.target == "logits"}
            scale = sum(abs(v) for v in ref.values())
            # each layer's skip term against the logit target at its output (exact, frozen attention: no q/k)
            enc = model.encode(p["prompt"], p["target"], p.get("foil"))
            exact = DPAParams.from_kwargs(w_q=0.0, w_k=0.0, w_v=1.0)
            cache = dpa_cache(model, enc.tokens, exact, hooks_of(tcs))
            t, logit = logit_target(model, enc, cache)
            skip_share: dict[str, float] = {}
            frozen: set[int] = set()
            for point, tv in pull_back(model, cache, t.clone(), (model.arch.n_layers - 1, "post"), exact,
                                       frozen_mlps=frozen):
                layer, where = point
                if where == "post" and layer in by_layer:
                    src = sources(by_layer[layer], cache)
                    skip_share[str(layer)] = float((tv[0] * src.skip).sum())
                    frozen.add(layer)
                    tv.add_(skip_back(model, cache, by_layer[layer], layer, tv))  # as feature_graph's passes do
            out = {"model": args.model, "prompt": p["prompt"], "target": p["target"], "foil": p.get("foil"),
                   "set": p["set"], "logit": logit, "skip_at_output": skip_share, "variants": {}}
            for name, g in graphs.items():
                err, emb, total = _sinks(g)
                mine = {e.source: e.score for e in g.edges if e.target == "logits"}
                diff = sum(abs(mine.get(k, 0.0) - v) for k, v in ref.items())
                out["variants"][name] = {**{k: g.graph_scores().get(k) for k in ("replacement", "completeness")},
                                         "error_by_layer": {k: v / total for k, v in err.items()},
                                         "embeddings": sum(emb.values()) / total,
                                         "logit_edges_l1_from_gradient": diff / scale,
                                         "seconds": round(g.metadata["wall"], 1), "passes": g.n_passes}
            fh.write(json.dumps(out) + "\n")
            fh.flush()
            print(json.dumps({"prompt": p["prompt"], **{k: (v["replacement"], v["logit_edges_l1_from_gradient"])
                                                         for k, v in out["variants"].items()}}), flush=True)


def anatomy_report(path: str) -> None:
    """Markdown tables of an --anatomy run: per prompt and variant, then per layer averaged over the prompts."""
    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    names = list(rows[0]["variants"])
    print("| prompt | variant | replacement | completeness | influence ending in embeddings | logit edges' L1 "
          "distance from the gradient graph (share) | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        for n in names:
            v = r["variants"][n]
            print(f"| {r['prompt'][:40]} ({r['set']}) | {n} | {v['replacement']:.3f} | {v['completeness']:.3f} | "
                  f"{v['embeddings']:.3f} | {v['logit_edges_l1_from_gradient']:.2e} | {v['seconds']:.0f} |")
    layers = sorted({int(k) for r in rows for k in r["skip_at_output"]})
    print(f"\nPer layer, mean over {len(rows)} prompts: share of the influence on the logits that ends in the layer's "
          "error nodes under each graph, and the layer's skip term . (target at its output) / |logit|")
    print("| layer | " + " | ".join(names) + " | skip share of the logit |")
    print("|---:|" + "---:|" * (len(names) + 1))
    for layer in layers:
        cells = [sum(r["variants"][n]["error_by_layer"].get(str(layer), 0.0) for r in rows) / len(rows) for n in names]
        skip = sum(abs(r["skip_at_output"].get(str(layer), 0.0)) / abs(r["logit"]) for r in rows) / len(rows)
        print(f"| {layer} | " + " | ".join(f"{c:.3f}" for c in cells) + f" | {skip:.3f} |")
    emb = [sum(r["variants"][n]["embeddings"] for r in rows) / len(rows) for n in names]
    print("| embeddings | " + " | ".join(f"{c:.3f}" for c in emb) + " | |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--set", default="smollm2-135m-transcoders-w1152")
    ap.add_argument("--clt", default="", help="a cross-layer transcoder (workbench sae build-clt) for clt-gradient")
    ap.add_argument("--resid", default="", help="residual SAEs, comma-separated (default: the model's own)")
    ap.add_argument("--source", choices=("bench", "prompts"), default="bench")
    ap.add_argument("--ioi", type=int, default=3)
    ap.add_argument("--facts", type=int, default=3)
    ap.add_argument("--graphs", default="resid-dpa,set-dpa,set-gradient",
                    help="which graphs, comma-separated (also set-dpa-held, clt-gradient)")
    ap.add_argument("--prompts-from", default="", help="the prompts of an earlier run's JSON lines")
    ap.add_argument("--per-layer", type=int, default=8)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--out", default="/tmp/replacement_study.jsonl")
    ap.add_argument("--report", default="", help="print the summary table of this JSON-lines file and stop")
    ap.add_argument("--anatomy", action="store_true", help="DPA's variants against the gradient graph (issue 53)")
    ap.add_argument("--anatomy-report", default="", help="print the tables of an --anatomy JSON-lines file")
    args = ap.parse_args()
    if args.anatomy_report:
        anatomy_report(args.anatomy_report)
    elif args.anatomy:
        anatomy(args)
    elif args.report:
        report(args.report)
    else:
        run(args)


if __name__ == "__main__":
    main()
