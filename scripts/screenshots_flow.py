"""Screenshots of the Flow by token page (information flow routes by token position and layer) on smollm2-135m and
gemma3-270m, in headless Chromium, with the last position's highest attention node clicked (its logit lens and
heads below the graph), written small to docs/screenshots/flow-MODEL.png.

    .venv/bin/python scripts/screenshots_flow.py [--out docs/screenshots] [--models smollm2-135m,gemma3-270m]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.serving import app_in_chromium  # noqa: E402
from scripts.screenshots import save_small, settle  # noqa: E402

PROMPT = "When Mary and John went to the store, John gave a drink to"

# The node trace's ids, and where a node is on the screen (plotly's axes map data to pixels).
NODES_JS = "gd => gd.data.filter(t => t.name === 'nodes').map(t => t.customdata)[0] || []"
POINT_JS = """([gd, id]) => {
  const t = gd.data.find(t => t.name === 'nodes'), i = t.customdata.indexOf(id);
  const L = gd._fullLayout, r = gd.getBoundingClientRect();
  return [r.left + L.xaxis._offset + L.xaxis.d2p(t.x[i]), r.top + L.yaxis._offset + L.yaxis.d2p(t.y[i])];
}"""


def last_attention_node(ids: list[str]) -> str:
    """The highest ``A{l}@p`` node at the last drawn position."""
    last = max(int(i.split("@")[1]) for i in ids)
    layers = [int(i.split("@")[0][1:]) for i in ids if i.startswith("A") and i.endswith(f"@{last}")]
    return f"A{max(layers)}@{last}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with app_in_chromium(Path(tempfile.mkdtemp()) / "app.log", 2000, width=1600) as (page, port):
        for model in args.models.split(","):
            query = urllib.parse.urlencode({"model": model, "prompt": PROMPT})
            page.goto(f"http://127.0.0.1:{port}/flow?{query}", timeout=300_000)
            settle(page)
            page.wait_for_selector(".js-plotly-plot .scatterlayer", timeout=300_000)
            gd = page.locator(".js-plotly-plot").first
            node = last_attention_node(gd.evaluate(NODES_JS))
            x, y = page.evaluate(POINT_JS, [gd.element_handle(), node])
            page.mouse.click(x, y)
            settle(page)
            layer = node[1:].split("@")[0]  # the node's panel names it
            page.get_by_text(f"after layer {layer}'s attention").first.wait_for(timeout=120_000)
            page.get_by_text("Heads: share of this sum").first.wait_for(timeout=120_000)
            gd.scroll_into_view_if_needed()
            time.sleep(0.5)
            path = out / f"flow-{model}.png"
            save_small(path, page.screenshot())
            print(f"{path} (clicked {node})", flush=True)


if __name__ == "__main__":
    main()
