"""Screenshots of the app for the README: Circuits, Feature graph, Lens, SAE features, Runs and Circuit benchmark
on smollm2-135m, in headless Chromium, written small (palette PNG) to docs/screenshots/.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--store DIR]

``--store`` is a run store holding a smollm2 circuit (scripts/measure_pages.py fills one); the Runs shot opens
its newest circuit run, the benchmark shot the leaderboard of its newest bench run (copy one in).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from app import serving  # noqa: E402
from app.serving import app_in_chromium  # noqa: E402


def settle(page) -> None:
    serving.settle(page, timeout=600, quiet_s=1.5, poll_s=0.2)


def save_small(path: Path, raw: bytes) -> None:
    """A palette PNG (a few hundred kB at most) from Chromium's screenshot bytes."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(raw)).convert("RGB")
    img = img.resize((img.width * 3 // 4, img.height * 3 // 4), Image.LANCZOS)
    img.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(path, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--store", default="")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {"WORKBENCH_RUNS": args.store} if args.store else {}
    with app_in_chromium(Path(tempfile.mkdtemp()) / "app.log", 1150, env=env, width=1500) as (page, port):
        base = f"http://127.0.0.1:{port}"

        def shot(name: str, scroll_to: str | None = None, top: bool = False) -> None:
            if scroll_to:
                target = page.locator(scroll_to).first
                if top:  # the element at the top of the window, what follows it below
                    target.evaluate("e => { e.scrollIntoView({block: 'start'}); let p = e.parentElement; "
                                    "while (p && p.scrollHeight <= p.clientHeight) p = p.parentElement; "
                                    "if (p) p.scrollTop -= 90; }")
                else:
                    target.scroll_into_view_if_needed()
                time.sleep(0.5)
            save_small(out / f"{name}.png", page.screenshot())
            print(f"{out / name}.png", flush=True)

        page.goto(f"{base}/circuits", timeout=120_000)
        settle(page)
        shot("circuits", ".js-plotly-plot")
        page.goto(f"{base}/feature_graph", timeout=120_000)
        settle(page)
        page.get_by_role("button", name="Build the feature graph").click()
        settle(page)
        shot("feature-graph", ".js-plotly-plot")
        page.goto(f"{base}/lens?prompt=When+Mary+and+John+went+to+the+store%2C+John+gave+a+drink+to"
                  "&target=+Mary", timeout=120_000)
        settle(page)
        shot("lens", ".js-plotly-plot")
        page.goto(f"{base}/sae", timeout=120_000)
        settle(page)
        shot("sae", ".js-plotly-plot")
        run, bench = "", ""
        if args.store:
            runs = sorted(n for n in os.listdir(args.store) if "-circuit-" in n)
            run = runs[-1] if runs else ""
            benches = sorted(n for n in os.listdir(args.store) if "-bench-" in n)
            bench = benches[-1] if benches else ""
        if bench:  # the leaderboard (a cell's circuit opens below it)
            page.goto(f"{base}/benchmark?run={bench}", timeout=120_000)
            settle(page)
            shot("benchmark")
        page.goto(f"{base}/runs" + (f"?run={run}" if run else ""), timeout=120_000)
        settle(page)
        shot("runs", "text=/· kind/" if run else None, top=True)


if __name__ == "__main__":
    main()
