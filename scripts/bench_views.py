"""Benchmark: the views a researcher waits on (issue 27 item 3), on a warm model and a 30-token prompt.

    nice -n 10 python scripts/bench_views.py [--model smollm2-135m] [--reps 3] [--pages] [--out FILE]

Each figure is the median of --reps runs after one warm-up run, with the app server's torch thread setting
(one thread per two cores), printed beside the issue's target and the figure it replaced ("today", where
the issue gave one). Measured: DPA at every level (token, head, neuron) on the 30-token prompt; the
one-prompt IOI circuit (DPA, counterfactual ablation) with its faithfulness curve; the feature graph over
four dictionaries (L6/L12/L18/L24 residual top-k SAEs); the logit-lens grid; greedy generation in ms a token
without and with TransformerLens's KV cache, and steering (20 new tokens, both continuations); with
--pages, each app page's first render through Streamlit's AppTest (the model already loaded). Writes a
Markdown results document (default results/attribution/views_<model>.md) and its JSON twin.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = ("In the small town by the river, the old baker opened his little shop early every single morning, and "
          "the first customer to arrive there was always the")  # 30 tokens on smollm2
IOI = {"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John",
       "corrupt": "When Alice and Bob went to the store, Bob gave a drink to"}
# (what, target in s, today's figure from the issue or None)
TARGETS = {
    "attribution, every level (token+head+neuron)": (2.0, None),
    "one-prompt circuit + faithfulness curve": (5.0, None),
    "feature graph, four dictionaries": (10.0, "40-63 s"),
    "lens grid": (2.0, None),
    "generation, ms/token (no KV cache)": (0.050, "300-500 ms/token (steering)"),
    "generation, ms/token (KV cache)": (0.050, "300-500 ms/token (steering)"),
    "steering, ms/token (20 tokens, both continuations)": (0.050, "300-500 ms/token"),
}


def timed(fn, reps: int) -> tuple[float, object]:
    out = fn()  # warm-up (first-call allocations, lazy imports)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pages", action="store_true", help="also time each app page's first render")
    ap.add_argument("--out", default="")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (default: what the app uses, 1 on a 2-core machine; commands use 2)")
    args = ap.parse_args()

    import torch

    import workbench as wb

    threads = args.threads or (1 if (os.cpu_count() or 2) <= 2 else (os.cpu_count() or 2) // 2)
    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    t = time.perf_counter()
    model = wb.load(args.model)
    load_s = time.perf_counter() - t
    n_tok = model.to_tokens(PROMPT).shape[1]
    target = model.decode([int(model.logits(model.to_tokens(PROMPT))[0, -1].argmax())])
    rows: dict[str, float] = {}
    notes: dict[str, str] = {"prompt tokens": str(n_tok), "target": repr(target), "warm load s": f"{load_s:.2f}"}

    per_level = {}
    for level in ("token", "head", "neuron"):
        per_level[level], _ = timed(lambda lv=level: wb.attribute(model, PROMPT, target=target, level=lv), args.reps)
    rows["attribution, every level (token+head+neuron)"] = sum(per_level.values())
    notes["attribution per level s"] = ", ".join(f"{k} {v:.2f}" for k, v in per_level.items())

    rows["one-prompt circuit + faithfulness curve"], res = timed(
        lambda: wb.circuit(model, [IOI], method="dpa", ablation="corrupt", selection="greedy"), args.reps)
    notes["circuit"] = f"{res.graph.n_edges:,} edges, curve at k={list(res.faithfulness.k)}"

    saes = [str(ROOT / "data" / "saes" / f"{args.model}-L{layer}-resid-topk2304") for layer in (6, 12, 18, 24)]
    if all(Path(s).is_dir() for s in saes):
        rows["feature graph, four dictionaries"], graph = timed(
            lambda: wb.feature_graph(model, IOI["prompt"], saes, target=IOI["target"], foil=IOI["foil"]),
            max(1, args.reps - 2))
        notes["feature graph"] = f"{len(graph.nodes)} nodes, {len(graph.edges)} edges"
    rows["lens grid"], _ = timed(lambda: wb.lens(model, PROMPT, kind="logit"), args.reps)

    n_new = 20
    tokens = model.to_tokens(PROMPT)

    def loop() -> list[int]:  # the old greedy loop: the whole sequence recomputed each step
        seq, new = tokens, []
        with torch.no_grad():
            for _ in range(n_new):
                nxt = int(model.logits(seq)[0, -1].argmax())
                new.append(nxt)
                seq = torch.cat([seq, seq.new_tensor([[nxt]])], dim=1)
        return new

    s_loop, ids_loop = timed(loop, args.reps)
    rows["generation, ms/token (no KV cache)"] = s_loop / n_new
    s_kv, text = timed(lambda: model.generate(PROMPT, max_new_tokens=n_new), args.reps)
    rows["generation, ms/token (KV cache)"] = s_kv / n_new
    notes["generate equal to the loop"] = str(text == model.decode(ids_loop))
    sae = saes[1]
    if Path(sae).is_dir():
        s_steer, _ = timed(lambda: wb.sae_steer(model, sae, 0, PROMPT, alpha=4.0, n_new=n_new), args.reps)
        rows["steering, ms/token (20 tokens, both continuations)"] = s_steer / n_new

    pages: dict[str, float] = {}
    if args.pages:
        import tempfile

        from app.testing import open_page, problems
        from workbench.scheduler.runner import running_here, wait_here

        os.environ["WORKBENCH_RUNS"] = tempfile.mkdtemp(prefix="bench-views-runs-")  # never the user's store
        names = sorted(p.stem for p in (ROOT / "app" / "pages").glob("*.py"))
        state = {"circ_model": args.model}
        for name in names:
            open_page(name, state, timeout=600)  # first: the page's own imports and caches
            for job_id in running_here():  # work it started in this process (the default circuit) ends first
                wait_here(job_id, timeout=600)
            t = time.perf_counter()
            at = open_page(name, state, timeout=600)
            pages[name] = time.perf_counter() - t
            if problems(at):
                notes[f"page {name}"] = "; ".join(problems(at))[:200]

    lines = [f"# Views on {args.model}: what a researcher waits on", "",
             f"`python scripts/bench_views.py --model {args.model} --reps {args.reps}"
             f"{' --pages' if args.pages else ''}` on {platform.node()} ({os.cpu_count()} cores, {threads} torch "
             f"thread(s), load average {load:.1f} at the start), warm model, a {n_tok}-token prompt; medians of "
             f"{args.reps} runs after a warm-up.", "",
             "| view | target | today (issue 27) | measured |", "| --- | --- | --- | --- |"]
    for what, secs in rows.items():
        goal, today = TARGETS[what]
        unit = (lambda x: f"{1000 * x:.0f} ms") if "ms/token" in what else (lambda x: f"{x:.2f} s")
        mark = "meets" if secs <= goal else "misses"
        lines.append(f"| {what} | <= {unit(goal)} | {today or '-'} | {unit(secs)} ({mark}) |")
    for name, secs in pages.items():
        lines.append(f"| page {name}, first render (warm) | <= 3 s | - | {secs:.2f} s "
                     f"({'meets' if secs <= 3 else 'misses'}) |")
    lines += ["", "Notes: " + "; ".join(f"{k}: {v}" for k, v in notes.items()) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out or ROOT / "results" / "attribution" / f"views_{args.model.split('/')[-1]}.md")
    out.write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "pages": pages, "notes": notes,
                                                    "load": load, "threads": threads}, indent=1))


if __name__ == "__main__":
    main()
