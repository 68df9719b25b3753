"""Screenshots of two stored feature graphs of the README's IOI prompt on the Runs page (its header carries
circuit-tracer's replacement and completeness scores): the 4-layer residual-SAE graph (DPA) and the per-layer
transcoder set's replacement-model graph (gradient), written to docs/screenshots/.

    .venv/bin/python scripts/screenshot_replacement.py --sae4 RUN --set RUN
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from app.serving import app_in_chromium  # noqa: E402
from scripts.screenshots import save_small, settle  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sae4", required=True)
    ap.add_argument("--set", required=True)
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    args = ap.parse_args()
    out = Path(args.out)
    with app_in_chromium(Path(tempfile.mkdtemp()) / "app.log", 1150, width=1500) as (page, port):
        for name, run in (("replacement-graph-sae4", args.sae4), ("replacement-graph-set", args.set)):
            page.goto(f"http://127.0.0.1:{port}/runs?run={run}", timeout=180_000)
            settle(page)
            page.locator("text=/Replacement score/").first.evaluate(  # the header at the top, the graph below
                "e => { e.scrollIntoView({block: 'start'}); let p = e.parentElement; "
                "while (p && p.scrollHeight <= p.clientHeight) p = p.parentElement; if (p) p.scrollTop -= 120; }")
            time.sleep(0.5)
            save_small(out / f"{name}.png", page.screenshot())
            print(out / f"{name}.png", flush=True)


if __name__ == "__main__":
    main()
