"""The README's figures: the notebook's circuit and feature-graph figures for the README prompt, as PNGs under
docs/figures/ (redo them with ``.venv/bin/python scripts/paper_figures.py``).

For each model: ``wb.circuit(...).plot()`` (DPA edge scores of the one prompt, its top ``--edges`` edges) and,
where dictionaries of the model ship under data/saes (or lie in a ``--saes-root`` folder: gemma3-270m's two
residual SAEs are trained into the user's cache by the commands in docs/figures/README.md, never committed),
``wb.feature_graph(...).plot()`` over its residual SAEs
(built with the app's budget: every node and edge kept, then pruned per layer by the figure, as the app's
Feature graph page does). The PNGs are drawn at ``--scale`` (1.25: sharp at the README's width, about 250 kB
each) and re-encoded with zlib's best effort.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT = "When Mary and John went to the store, John gave a drink to"
TARGET, FOIL = " Mary", " John"
BUDGET = {"max_nodes": 100_000, "max_edges": 1_000_000}  # the Feature graph page's: the figure prunes


def small_png(path: Path) -> int:
    """Re-encode a PNG with zlib's best effort (a palette would lose the legend's thin red swatch and the row
    bands); returns its size in bytes."""
    from PIL import Image

    with Image.open(path) as img:
        rgb = img.convert("RGB")
    buf = io.BytesIO()
    rgb.save(buf, format="PNG", optimize=True)
    path.write_bytes(buf.getvalue())
    return len(buf.getvalue())


def residual_saes(model: str, roots: list[str]) -> list[str]:
    from attribution.sae.dictionary import list_dictionaries

    found = []
    for root in [None, *roots]:  # data/saes, then folders of dictionaries trained into the user's cache
        found += [str(d.path) for d in list_dictionaries(root, model=model) if not d.is_transcoder]
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--out", default="docs/figures")
    ap.add_argument("--edges", type=int, default=50, help="Edges in the circuit figure.")
    ap.add_argument("--scale", type=float, default=1.25, help="PNG pixels per layout pixel.")
    ap.add_argument("--saes-root", action="append", default=[],
                    help="Also use the dictionaries in this folder (gemma3-270m's are trained into the user's cache, "
                         "never committed: Gemma Terms of Use).")
    args = ap.parse_args()

    import workbench as wb
    from core.figures import save_figure

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    row = {"prompt": PROMPT, "target": TARGET, "foil": FOIL}
    for name in args.models.split(","):
        t0 = time.perf_counter()
        model = wb.load(name)
        circuit = wb.circuit(model, [row], method="dpa", edges=args.edges, evaluate=False)
        path = save_figure(circuit.plot(), out / f"{name}-circuit.png", scale=args.scale)
        print(f"{path}: {small_png(path) / 1e3:.0f} kB ({time.perf_counter() - t0:.1f} s)")
        saes = residual_saes(name, args.saes_root)
        if not saes:
            print(f"{name}: no dictionaries under data/saes (`workbench sae list`): no feature graph")
            continue
        t0 = time.perf_counter()
        graph = wb.feature_graph(model, PROMPT, saes, target=TARGET, foil=FOIL, **BUDGET)
        path = save_figure(graph.plot(), out / f"{name}-feature-graph.png", scale=args.scale)
        print(f"{path}: {small_png(path) / 1e3:.0f} kB ({time.perf_counter() - t0:.1f} s; "
              f"{len(saes)} dictionaries, {len(graph.nodes)} nodes before the figure's pruning)")


if __name__ == "__main__":
    main()
