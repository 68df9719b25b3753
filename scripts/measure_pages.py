"""Page first renders in headless Chromium: every page of the app, cold (first visit after the server starts)
and warm (a new session once the page has been seen), and a stored circuit run opened on the Runs page.

A render is timed from navigation to the moment the page's script run is over (the title is drawn and
Streamlit's "running" status has been gone for 0.5 s; the 0.5 s are not counted). With ``--store`` a run store
is filled first (real smollm2 circuits and attributions, plus ``--filler`` small runs) so the Runs page is
measured on a store of some size.

    .venv/bin/python scripts/measure_pages.py [--store DIR] [--filler 300] [--json OUT] [--bench RUN_ID]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.serving import CHROMIUM, CHROMIUM_ARGS, free_port, settle, start_app, stop_app  # noqa: E402

IOI = {"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John"}


def pages() -> list[str]:
    tree = ast.parse((ROOT / "app" / "main.py").read_text())
    found = next(ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PAGES")
    return [Path(path).stem for path, _title, _icon in found]


def fill_store(root: Path, filler: int) -> str:
    """Two smollm2 circuits (dpa, eap; 123k edges each), two attributions and ``filler`` small runs; returns
    the first circuit's id."""
    os.environ["WORKBENCH_RUNS"] = str(root)
    import torch

    import workbench as wb
    from circuits.discover import circuit
    from core.store import RunDraft, RunStore

    store = RunStore(root)
    model = wb.load("smollm2-135m")
    first = None
    for method in ("dpa", "eap"):
        run = circuit(model, [IOI], method=method, edges=100, ablation="zero", evaluate=False).save(store)
        first = first or run.id
    for level in ("token", "head"):
        wb.attribute(model, IOI["prompt"], target=IOI["target"], foil=IOI["foil"], method="dpa",
                     level=level).save(store)
    for i in range(filler):
        store.save(RunDraft(kind="note", model="smollm2-135m", method=f"m{i % 7}", args={"prompt": f"p{i}"},
                            result={"value": i}, tensors={"x": torch.randn(16)}))
    return first


def render(browser, url: str, timeout: float = 300) -> float:
    """Seconds from navigation until the script run is over (see the module docstring)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        started = time.perf_counter()
        page.goto(url, timeout=timeout * 1000)
        return settle(page, timeout=timeout, quiet_s=0.5, poll_s=0.05) - started
    finally:
        page.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="", help="run store to fill and use (default: a temporary one)")
    ap.add_argument("--filler", type=int, default=300, help="small runs added to the store")
    ap.add_argument("--json", default="", help="write the figures here too")
    ap.add_argument("--pages", default="", help="comma-separated page paths (default: all)")
    ap.add_argument("--bench", default="", help="a bench run of the default store, copied in and opened on the "
                    "Circuit benchmark and Runs pages")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    root = Path(args.store or tempfile.mkdtemp(prefix="wb-runs-"))
    started = time.perf_counter()
    from core.store import RunStore

    home = RunStore().root  # the default store, before fill_store points WORKBENCH_RUNS at the new one
    run_id = fill_store(root, args.filler)
    if args.bench:
        import shutil

        shutil.copytree(home / args.bench, root / args.bench, dirs_exist_ok=True)
    print(f"store {root}: filled in {time.perf_counter() - started:.1f} s", flush=True)
    port = free_port()
    log = Path(tempfile.mkdtemp()) / "app.log"
    proc = start_app(port, log, env={"WORKBENCH_RUNS": str(root)})
    base = f"http://127.0.0.1:{port}"
    wanted = [p for p in args.pages.split(",") if p] or pages()
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            for name in wanted:
                cold = render(browser, f"{base}/{name}")
                warm = render(browser, f"{base}/{name}")
                rows.append({"page": name, "cold_s": round(cold, 2), "warm_s": round(warm, 2)})
                print(f"/{name:14s} cold {cold:6.2f} s   warm {warm:6.2f} s", flush=True)
            cold = render(browser, f"{base}/runs?run={run_id}")
            warm = render(browser, f"{base}/runs?run={run_id}")
            rows.append({"page": "runs?run=<smollm2 dpa circuit>", "cold_s": round(cold, 2),
                         "warm_s": round(warm, 2)})
            print(f"/runs?run={run_id}: cold {cold:.2f} s   warm {warm:.2f} s", flush=True)
            for url in ([f"benchmark?run={args.bench}", f"runs?run={args.bench}"] if args.bench else []):
                cold, warm = render(browser, f"{base}/{url}"), render(browser, f"{base}/{url}")
                rows.append({"page": url.replace(args.bench, "<bench run>"), "cold_s": round(cold, 2),
                             "warm_s": round(warm, 2)})
                print(f"/{url}: cold {cold:.2f} s   warm {warm:.2f} s", flush=True)
            browser.close()
    finally:
        stop_app(proc)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "loadavg": load, "store_runs": args.filler + 4},
                                              indent=2))


if __name__ == "__main__":
    main()
