"""Screenshots of graph interaction (issue 37 item 4) for the README, in headless Chromium, written small to
docs/screenshots/: on each model, a DPA circuit (smollm2: the Circuits page; gemma3, whose circuit the Circuits
page would run as a job: the Attribution page's Information flow) with a node hovered (its edges lit, the rest
dimmed), a node pinned and two heads grouped into a supernode; on smollm2-135m also the Feature graph (labels
carrying explanations, the top output tokens beside the logits, a suggested group accepted).

    .venv/bin/python scripts/screenshots_interact.py [--models smollm2-135m,gemma3-270m] [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from screenshots import save_small, settle  # noqa: E402

from app.serving import app_in_chromium, group_supernode  # noqa: E402

NODES_JS = "gd => { const t = gd.data[gd.data.length - 1]; return [t.x, t.y, t.customdata]; }"
POINT_JS = """(gd, [x, y]) => { const L = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + L.xaxis._offset + L.xaxis.d2p(x), r.top + L.yaxis._offset + L.yaxis.d2p(y)]; }"""
EDGES_JS = "gd => gd.data.filter(t => t.meta && t.meta.wbEdges).flatMap(t => t.meta.wbEdges)"


def clip(page, locator, pad: int = 8) -> bytes:
    box = locator.bounding_box()
    return page.screenshot(clip={"x": max(box["x"] - pad, 0), "y": max(box["y"] - pad, 0),
                                 "width": box["width"] + 2 * pad, "height": box["height"] + 2 * pad})


def hover_busiest(page, graph, kind: str = ".H") -> str:
    """Hover the node with most edges among those whose name holds ``kind``; returns its name."""
    xs, ys, names = graph.evaluate(NODES_JS)
    edges = graph.evaluate(EDGES_JS)
    cands = [n for n in names if kind in n] or names
    name = max(cands, key=lambda n: sum(n in e for e in edges))
    i = names.index(name)
    graph.scroll_into_view_if_needed()
    page.mouse.move(*graph.evaluate(POINT_JS, [xs[i], ys[i]]))
    page.wait_for_function("([gd, n]) => gd.getAttribute('data-wb-hover') === n", arg=[graph.element_handle(), name],
                           timeout=20_000)
    time.sleep(0.3)
    return name


def circuits(page, base: str, model: str, out: Path, flow: bool = False) -> None:
    """The Circuits page's DPA circuit (``flow``: the Attribution page's Information flow, which runs in the
    app's process where the Circuits page would start a job)."""
    page.goto(f"{base}/{'' if flow else 'circuits'}?model={model}", timeout=120_000)
    settle(page)
    if flow:
        page.get_by_role("tab", name="Information flow").click()
        settle(page)
    title = re.compile(r"DPA circuit: \d+ of" if flow else r"dpa: \d+ of")

    def graph():
        g = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=title)).first
        g.wait_for(timeout=600_000)
        return g

    g = graph()
    xs, ys, names = g.evaluate(NODES_JS)
    edges = g.evaluate(EDGES_JS)
    heads = sorted((n for n in names if ".H" in n), key=lambda n: -sum(n in e for e in edges))
    # pin the busiest head, group the next two strongest of one layer
    i = names.index(heads[0])
    g.scroll_into_view_if_needed()
    page.mouse.click(*g.evaluate(POINT_JS, [xs[i], ys[i]]))
    settle(page)
    page.get_by_role("button", name=f"Pin {heads[0]}").click()
    settle(page)
    layer = {}
    for h in heads[1:]:
        layer.setdefault(h.split(".")[0], []).append(h)
    pair = next((v[:2] for v in layer.values() if len(v) >= 2), heads[1:3])
    page.get_by_text(re.compile(r"Pins and supernodes \(")).first.click()
    group_supernode(page, f"{pair[0].split('.')[0]} pair", pair, settle)
    g = graph()
    hover_busiest(page, g)
    name = f"interact-{'flow' if flow else 'circuits'}-{model}.png"
    save_small(out / name, clip(page, g))
    print(out / name, flush=True)


def feature_graph(page, base: str, model: str, out: Path) -> None:
    page.goto(f"{base}/feature_graph?model={model}", timeout=120_000)
    settle(page)
    page.get_by_role("button", name="Build the feature graph").click()
    settle(page)
    g = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="Feature graph")).first
    g.wait_for(timeout=600_000)
    page.get_by_text(re.compile(r"Pins and supernodes \(")).first.click()
    page.get_by_role("button", name="Suggest groups").click()
    settle(page)
    accept = page.get_by_role("button", name="Accept")
    if accept.count():
        accept.first.click()
        settle(page)
    g = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="Feature graph")).first
    hover_busiest(page, g, ".f")
    save_small(out / f"interact-feature-graph-{model}.png", clip(page, g))
    print(out / f"interact-feature-graph-{model}.png", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {"WORKBENCH_RUNS": tempfile.mkdtemp(), "STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none"}
    with app_in_chromium(Path(tempfile.mkdtemp()) / "app.log", 1400, env=env, width=1500) as (page, port):
        base = f"http://127.0.0.1:{port}"
        for model in args.models.split(","):
            # smollm2's circuit runs in the page; gemma3's would start a job: its Information flow instead
            circuits(page, base, model, out, flow=model != "smollm2-135m")
            if model == "smollm2-135m":
                feature_graph(page, base, model, out)


if __name__ == "__main__":
    main()
