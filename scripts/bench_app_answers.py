"""Benchmark: how long a researcher waits in the browser (issue 50 item 7), on the Circuits page.

    python scripts/bench_app_answers.py [--model smollm2-135m] [--reps 3] [--out results/app/answers.md]

Starts `workbench app` on a free port (a fresh run store under a temporary folder), opens the Circuits page in
headless Chromium, waits for the model and the default circuit, then times, --reps times each: a new prompt
typed (Ctrl+Enter) until its one-prompt circuit is drawn (computed in the page, no job; its faithfulness curve is
computed below it afterwards); and graph interactions (a node pinned, two nodes grouped, the pruning threshold
changed), each from the key press or click until the page shows the answer: the new graph's logits node naming
the new target; the Unpin button and the pin in the caption; the supernode in the caption; the caption's new
threshold (polled every 50 ms; the page then settles before the next step, not counted). Run it without nice:
the app server and the browser it starts inherit the priority, and on a loaded machine a niced browser waits
minutes for the CPU. Each figure is printed with the load average read beside it: on a shared machine the load
says how much of a figure is the machine's. Writes a Markdown document and its JSON twin.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = ["The Eiffel Tower is located in the city of", "After Lisa and Tom left the party, Tom handed the keys to",
           "The capital of Japan is the city of", "When Anna and Peter met at the park, Peter threw the ball to"]
TARGETS = {"new prompt -> circuit drawn": 5.0, "pin a node": 1.0, "change the threshold": 1.0,
           "group two nodes": 1.0}
TEXTS_JS = "gd => gd.data[gd.data.length - 1].text"
NODES_JS = "gd => { const t = gd.data[gd.data.length - 1]; return {x: t.x, y: t.y, names: t.customdata}; }"
POINT_JS = """(gd, [x, y]) => { const L = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + L.xaxis._offset + L.xaxis.d2p(x), r.top + L.yaxis._offset + L.yaxis.d2p(y)]; }"""


def load() -> str:
    f = Path("/proc/loadavg")
    return " ".join(f.read_text().split()[:3]) if f.exists() else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "results" / "app" / "answers.md"))
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    from app.serving import CHROMIUM, CHROMIUM_ARGS, RUNNING, free_port, settle, start_app, stop_app

    times: dict[str, list[tuple[float, str]]] = {k: [] for k in TARGETS}
    tmp = Path(tempfile.mkdtemp(prefix="bench_answers_"))
    port = free_port()
    proc = start_app(port, tmp / "app.log", env={"WORKBENCH_RUNS": str(tmp / "runs")})
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 2600})
            t = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/circuits?model={urllib.parse.quote(args.model)}", timeout=600_000)
            settle(page, timeout=900)
            graph = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=re.compile(r"dpa: \d+ of")))
            graph.first.wait_for(timeout=600_000)
            first_open = time.perf_counter() - t
            print(f"first open (model load + default circuit): {first_open:.1f} s, load {load()}", flush=True)

            def timed(what: str, act, done) -> None:
                """From ``act()``'s key press or click to ``done()`` true (polled every 50 ms: the answer on the
                screen); then the page is let settle before the next step."""
                t0 = act()
                deadline = t0 + 300
                while not done():
                    if os.environ.get("BENCH_DEBUG") and int(time.perf_counter() - t0) % 20 == 0:
                        print("waiting:", page.url, quiet(), flush=True)
                    if time.perf_counter() > deadline:
                        page.screenshot(path=str(tmp / "stuck.png"), full_page=True)
                        raise TimeoutError(f"{what}: no answer after 300 s (page {page.url}; {tmp / 'stuck.png'})")
                    time.sleep(0.05)
                secs = time.perf_counter() - t0
                settle(page, timeout=900)
                times[what].append((secs, load()))
                print(f"{what}: {secs:.2f} s (load {load()})", flush=True)

            def body() -> str:
                return page.inner_text("body")

            def quiet() -> bool:
                return not page.locator(RUNNING).count()

            for rep in range(args.reps):
                prompt = PROMPTS[rep % len(PROMPTS)]

                def type_prompt(prompt=prompt) -> float:
                    box = page.get_by_role("textbox", name="Prompt", exact=True).first
                    box.fill(prompt)
                    t0 = time.perf_counter()
                    box.press("Control+Enter")
                    return t0

                before_target = page.get_by_role("textbox", name="Target token", exact=True).input_value()

                def new_graph(before_target=before_target) -> bool:
                    """The circuit of the new prompt on the screen: the graph's logits node names the target the
                    new prompt filled in (the old graph's names another)."""
                    try:
                        target = page.get_by_role("textbox", name="Target token", exact=True).input_value(timeout=500)
                        texts = graph.first.evaluate(TEXTS_JS, timeout=500)
                    except Exception:  # noqa: BLE001 - redrawn meanwhile: not yet
                        return False
                    return target != before_target and any(repr(target) in str(t) for t in texts or [])

                timed("new prompt -> circuit drawn", type_prompt, new_graph)
                g = graph.first
                nodes = g.evaluate(NODES_JS)
                heads = [n for n in nodes["names"] if re.fullmatch(r"L\d+\.(H\d+|mlp)", str(n))]  # heads, MLPs
                i = nodes["names"].index(heads[0])
                g.scroll_into_view_if_needed()
                px, py = g.evaluate(POINT_JS, [nodes["x"][i], nodes["y"][i]])
                page.mouse.click(px, py)
                settle(page, timeout=900)

                button = page.get_by_role("button", name=re.compile(r"^Pin "))
                if not button.count():  # the click fell between nodes: pick the node in the inspector instead
                    page.locator('[data-testid="stSelectbox"]').filter(has_text="Inspect node").first.click()
                    page.get_by_role("option", name=heads[0], exact=True).click()
                    settle(page, timeout=900)

                def pin(button=button) -> float:
                    button.first.wait_for(timeout=120_000)
                    t0 = time.perf_counter()
                    button.first.click()
                    return t0

                unpin = page.get_by_role("button", name=re.compile(r"^Unpin "))
                timed("pin a node", pin,
                      lambda unpin=unpin: unpin.count() > 0 and "pinned (diamonds)" in body())

                summary = page.get_by_text(re.compile(r"Pins and supernodes \(")).first
                label = page.get_by_role("textbox", name="Supernode label")
                if not label.is_visible():
                    summary.click()
                    settle(page, timeout=900)
                label.fill(f"heads {rep}")
                label.press("Enter")
                settle(page, timeout=900)
                picker = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Members").last
                for m in heads[1:3]:
                    if not picker.is_visible():
                        summary.click()
                        settle(page, timeout=900)
                    picker.click()
                    page.get_by_role("option", name=m, exact=True).click()
                    settle(page, timeout=900)
                page.keyboard.press("Escape")

                def group() -> float:
                    t0 = time.perf_counter()
                    page.get_by_role("button", name="Group", exact=True).click()
                    return t0

                timed("group two nodes", group, lambda: "1 supernode drawn as hexagons" in body())

                def threshold(value=("0.5", "0.8", "0.6")[rep % 3]) -> float:
                    box = page.get_by_label("Pruning threshold (cumulative influence)", exact=True)
                    box.fill(value)
                    t0 = time.perf_counter()
                    box.press("Enter")
                    return t0

                value = ("0.5", "0.8", "0.6")[rep % 3]
                timed("change the threshold", threshold,
                      lambda value=value: f"Drawn at threshold {float(value):g}:" in body())
            browser.close()
    finally:
        stop_app(proc)
    write(args, times, first_open)


def write(args: argparse.Namespace, times: dict[str, list[tuple[float, str]]], first_open: float) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = {k: {"median_s": statistics.median(s for s, _ in v) if v else None, "all_s": [round(s, 3) for s, _ in v],
                "load": [ld for _, ld in v], "target_s": TARGETS[k]} for k, v in times.items()}
    meta = {"model": args.model, "reps": args.reps, "cpus": os.cpu_count(), "first_open_s": round(first_open, 2),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "answers": rows}, indent=1))
    lines = [f"# Answers in the browser: Circuits page on {args.model}", "",
             f"`scripts/bench_app_answers.py --model {args.model} --reps {args.reps}` at {meta['when']}, "
             f"{meta['cpus']} CPUs, headless Chromium, a fresh app server. Each time runs from the key press or "
             "click to the moment the answer is on the screen (the new prompt's graph, the pin, the supernode, "
             "the new threshold in the caption). The load average (1, 5, 15 min) was read as each figure was "
             "taken: the machine was shared, so read the figures with it.", "",
             f"First open (model load and the default prompt's circuit): {first_open:.1f} s.", "",
             "| what | target | median | every run (s) | load average at each |", "|---|---|---|---|---|"]
    for k, r in rows.items():
        med = "—" if r["median_s"] is None else f"{r['median_s']:.2f} s"
        lines.append(f"| {k} | {r['target_s']:g} s | {med} | {', '.join(map(str, r['all_s']))} | "
                     f"{'; '.join(r['load'])} |")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
