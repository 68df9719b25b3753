"""Circuit discovery on smollm2-135m: faithfulness curves, AUC and cost of eap, eap_ig and dpa edge scores.

    python scripts/bench_circuits.py [--model M] [--prompts-dir data/prompts] [--limit N] [--reps 3]
        [--out results/circuits/circuits_smollm2.md]

Parts, all in one run:
- ioi: data/prompts/ioi.jsonl with its counterfactuals (both names replaced), counterfactual ablation,
  metric logit(IO) - logit(S);
- facts: data/prompts/facts.jsonl, mean ablation, metric logit(target) - logit(foil);
- agreement (``--patching N``): on the first 16 IOI prompts, path patching (the ground truth) of N edges:
  every method's top 40 edges and N random ones, and each method's rank correlation with it.

Scoring time is the median of ``--reps`` timed runs after one warm-up batch, measured in this process with
the methods in a rotating order; faithfulness is taken on the same prompts over a grid of circuit sizes
that includes 1% of the graph's edges. Results go to a Markdown document (the reading is written by hand
under the generated tables).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("eap", "eap_ig", "dpa")


def timed_scores(model, graph, prompts, refs, method: str) -> tuple[object, float]:
    from circuits.edges import get_method

    spec = get_method(method)
    started = time.perf_counter()
    scores = spec.scorer()(model, graph, prompts, refs, **spec.params)
    return scores, time.perf_counter() - started


def run_part(model, rows, ablation: str, grid: list[int], reps: int) -> dict:
    import torch

    from circuits.counterfactual import prepare
    from circuits.evaluate import faithfulness
    from circuits.graph import CircuitGraph
    from circuits.intervene import References

    graph = CircuitGraph.of(model)
    prompts = prepare(model, rows, ablation)
    refs = References(model, graph, prompts)
    warm = prepare(model, rows[:16], ablation)
    for method in METHODS:  # warm-up: first-call allocations are not the method's cost
        timed_scores(model, graph, warm, References(model, graph, warm), method)
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    scores: dict[str, torch.Tensor] = {}
    for rep in range(reps):
        order = METHODS[rep % len(METHODS):] + METHODS[:rep % len(METHODS)]
        for method in order:
            scores[method], seconds = timed_scores(model, graph, prompts, refs, method)
            times[method].append(seconds)
            print(f"  {method}: {seconds:.2f} s", flush=True)
    out = {"n_prompts": prompts.n_prompts, "ablation": prompts.ablation, "metric": prompts.metric, "methods": {}}
    for method in METHODS:
        started = time.perf_counter()
        f = faithfulness(model, graph, prompts, refs, scores[method], grid)
        out["methods"][method] = {"seconds": statistics.median(times[method]), "all_seconds": times[method],
                                  "faithfulness": f.to_json(), "eval_seconds": time.perf_counter() - started,
                                  "top": [list(graph.edge_name(int(e))) + [float(scores[method][e])]
                                          for e in torch.argsort(scores[method].abs(), descending=True)[:10]]}
        print(f"  {method}: AUC {f.auc:.3f}, " + ", ".join(f"{k}:{v:.3f}" for k, v in zip(f.k, f.normalized,
                                                                                         strict=True)), flush=True)
    out["scores"] = scores
    return out


def agreement(model, rows, scores: dict, n_random: int, top: int = 40) -> dict:
    """Spearman correlation of each method's scores with path patching on every method's top edges and
    ``n_random`` random edges."""
    import torch

    from circuits.counterfactual import prepare
    from circuits.edges.patching import score as patch_score
    from circuits.graph import CircuitGraph
    from circuits.intervene import References

    graph = CircuitGraph.of(model)
    chosen = set()
    for s in scores.values():
        chosen |= set(torch.argsort(s.abs(), descending=True)[:top].tolist())
    n_top = len(chosen)
    gen = torch.Generator().manual_seed(0)
    for e in torch.randperm(graph.n_edges, generator=gen).tolist():
        if len(chosen) >= n_top + n_random:
            break
        chosen.add(e)
    ids = torch.tensor(sorted(chosen))
    prompts = prepare(model, rows[:16], "corrupt")
    refs = References(model, graph, prompts)
    started = time.perf_counter()

    truth = patch_score(model, graph, prompts, refs, copies=8, edges=ids)[ids]
    seconds = time.perf_counter() - started

    def spearman(a, b):
        ra, rb = a.argsort().argsort().double(), b.argsort().argsort().double()
        return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])

    sub = {m: score_set for m, score_set in _scores_on(model, graph, prompts, refs, ids).items()}
    return {"n_edges": len(ids), "n_top": n_top, "n_prompts": prompts.n_prompts, "seconds": seconds,
            "spearman": {m: spearman(sub[m], truth) for m in sub},
            "top_overlap": {m: len(set(torch.argsort(sub[m].abs(), descending=True)[:20].tolist())
                                   & set(torch.argsort(truth.abs(), descending=True)[:20].tolist())) for m in sub}}


def _scores_on(model, graph, prompts, refs, ids) -> dict:
    from circuits.edges import get_method

    return {m: get_method(m).scorer()(model, graph, prompts, refs, **get_method(m).params)[ids] for m in METHODS}


def write_doc(path: Path, results: dict, args: argparse.Namespace) -> None:
    lines = [f"# Circuits on {args.model}: edge scores and faithfulness", "",
             f"Generated by `python scripts/bench_circuits.py {' '.join(args.argv)}` on {results['when']} "
             f"({results['machine']}, torch threads {results['threads']}). Graph: {results['graph']['n_nodes']} "
             f"nodes, {results['graph']['n_edges']:,} edges.", ""]
    for part in ("ioi", "facts"):
        if part not in results:
            continue
        r = results[part]
        lines += [f"## {part}: {r['n_prompts']} prompts, {r['ablation']} ablation, {r['metric']}", "",
                  "| method | scoring s (median) | x EAP | x EAP-IG | AUC | " +
                  " | ".join(f"k={k}" for k in r["methods"]["dpa"]["faithfulness"]["k"]) + " |",
                  "|---|---|---|---|---|" + "---|" * len(r["methods"]["dpa"]["faithfulness"]["k"])]
        eap, ig = r["methods"]["eap"]["seconds"], r["methods"]["eap_ig"]["seconds"]
        for m, v in r["methods"].items():
            f = v["faithfulness"]
            lines.append(f"| {m} | {v['seconds']:.2f} | {v['seconds'] / eap:.2f} | {v['seconds'] / ig:.3f} | "
                         f"{f['auc']:.3f} | " + " | ".join(f"{x:.3f}" for x in f["normalized"]) + " |")
        f = r["methods"]["dpa"]["faithfulness"]
        lines += ["", f"Metric intact {f['metric_full']:.3f}, every edge ablated {f['metric_empty']:.3f}. "
                  "Completeness (only the circuit ablated, normalized; near 0 is complete): " +
                  ", ".join(f"{m} " + "/".join(f"{x:.2f}" for x in v["faithfulness"]["complement"])
                            for m, v in r["methods"].items()) + ".", "",
                  "Top edges: " + "; ".join(f"{m}: " + ", ".join(f"{s}->{d} {x:+.2f}" for s, d, x in v["top"][:5])
                                            for m, v in r["methods"].items()) + ".", ""]
    if "agreement" in results:
        a = results["agreement"]
        lines += ["## Agreement with path patching", "",
                  f"{a['n_edges']} edges ({a['n_top']} from the methods' top 40s, the rest at random), "
                  f"{a['n_prompts']} IOI prompts, "
                  f"patched one at a time in {a['seconds']:.0f} s.", "",
                  "| method | Spearman with path patching | overlap of the top 20 |", "|---|---|---|"]
        lines += [f"| {m} | {a['spearman'][m]:.3f} | {a['top_overlap'][m]}/20 |" for m in a["spearman"]]
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    marker = "<!-- reading -->"
    reading = old[old.index(marker):] if marker in old else f"{marker}\n## Reading\n\n(write the reading here)\n"
    path.write_text("\n".join(lines) + "\n" + reading)
    (path.with_suffix(".json")).write_text(json.dumps({k: v for k, v in results.items()}, indent=1, default=str))


def main() -> None:
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--limit", type=int, default=None, help="Prompts per set (default: all).")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--parts", default="ioi,facts")
    parser.add_argument("--patching", type=int, default=0, help="Random edges (beside the methods' top 40s) "
                        "for the path-patching agreement part; 0 skips it.")
    parser.add_argument("--out", default=str(ROOT / "results" / "circuits" / "circuits_smollm2.md"))
    parser.add_argument("--prompts-dir", default=str(ROOT / "data" / "prompts"),
                        help="Where ioi.jsonl and facts.jsonl are (data/prompts/MODEL for another model's sets).")
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    if args.reps < 1 or (args.limit is not None and args.limit < 1) or args.patching < 0:
        parser.error("--reps and --limit must be at least 1, --patching at least 0")

    import torch

    import workbench as wb
    from circuits.graph import CircuitGraph
    from core.prompt_files import read_prompts

    model = wb.load(args.model)
    graph = CircuitGraph.of(model)
    one_percent = max(1, round(graph.n_edges / 100))
    grid = sorted({10, 20, 50, 100, 200, 500, 1000, one_percent, 2000})
    results: dict = {"when": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.machine()}, "
                     f"{torch.get_num_threads()} threads", "threads": torch.get_num_threads(),
                     "graph": graph.summary(), "one_percent_k": one_percent}
    parts = args.parts.split(",")
    for part, file, ablation in (("ioi", "ioi.jsonl", "corrupt"), ("facts", "facts.jsonl", "mean")):
        if part in parts:
            print(f"{part}:", flush=True)
            rows = read_prompts(str(Path(args.prompts_dir) / file), args.limit)
            results[part] = run_part(model, rows, ablation, grid, args.reps)
    if args.patching and "ioi" in results:
        print("agreement:", flush=True)
        rows = read_prompts(str(Path(args.prompts_dir) / "ioi.jsonl"), 16)
        results["agreement"] = agreement(model, rows, results["ioi"]["scores"], args.patching)
        print(results["agreement"], flush=True)
    for part in ("ioi", "facts"):
        results.get(part, {}).pop("scores", None)
    write_doc(Path(args.out), results, args)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
