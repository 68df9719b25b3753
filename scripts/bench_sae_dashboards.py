"""Dashboards of the shipped smollm2-135m dictionaries against issue 15's done-when line: on the IOI
prompt, do the top features (position 0 left out) include features on the name tokens, are their
contexts coherent, and does search by the token " John" find features? Also how fast a stored
dashboard opens (cold load of the file, then one feature's card).

    nice -n 19 .venv/bin/python scripts/bench_sae_dashboards.py [--out results/attribution/sae_dashboards_smollm2.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

IOI = "When Mary and John went to the store, John gave a drink to"
NAMES = (" Mary", " John")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/attribution/sae_dashboards_smollm2.md")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    import workbench as wb
    from attribution.sae.dashboard import Dashboards, has_dashboards
    from attribution.sae.dictionary import list_dictionaries
    from attribution.sae.explore import prompt_features
    from attribution.sae.render import context_text

    model = wb.load("smollm2-135m")
    rows, details = [], []
    for d in list_dictionaries(model="smollm2-135m"):
        if not has_dashboards(d.path):
            print(f"{d.name}: no dashboards, skipped")
            continue
        t0 = time.perf_counter()
        db = Dashboards.load(d.path)
        load_s = time.perf_counter() - t0
        live = [int(f) for f in torch.nonzero(db.tensors["count"] > 0).flatten()[:20]]
        card_s = []
        for f in live:
            t0 = time.perf_counter()
            db.card(f)
            card_s.append(time.perf_counter() - t0)
        out = {"name": d.name, "kind": d.kind, "layer": d.layer, "n_tokens": db.meta["n_tokens"],
               "live": float((db.tensors["count"] > 0).float().mean()), "load_s": load_s,
               "card_ms": 1000 * statistics.median(card_s)}
        for relative in (True, False):
            got = prompt_features(model, d, IOI, db, relative=relative, top=args.top)
            on_names = [r for r in got["rows"] if r["token"] in NAMES]
            out["names_in_top" + ("" if relative else "_raw")] = len(on_names)
            if relative:
                out["top"] = got["rows"]
                out["at_names"] = [r for r in got["per_position"] if r["token"] in NAMES]
        try:
            hits = db.search_token(" John", limit=db.n_units)
        except Exception as exc:  # the token absent from the dashboards' held-out text
            hits, out["search_error"] = [], str(exc)
        out["john_hits"] = len(hits)
        out["john_top"] = hits[:5]
        # the contexts of the name-token features in the top list, and of the top ' John' search hit
        picked = [r["feature"] for r in out["top"] if r["token"] in NAMES][:3] + [h["feature"] for h in hits[:1]]
        out["name_features"] = []
        for f in dict.fromkeys(picked):
            card = db.card(f)
            out["name_features"].append({"feature": f, "label": card["label"],
                                         "contexts": [context_text(c) for c in card["contexts"][:5]]})
        rows.append(out)
        details.append(out)
        print(json.dumps({k: v for k, v in out.items() if k not in ("top",)}, default=str)[:600], flush=True)
    write(Path(args.out), rows)


def write(path: Path, rows: list[dict]) -> None:
    lines = [
        "# Dashboards of the smollm2-135m dictionaries: the IOI done-when line",
        "",
        f"Prompt: `{IOI}`. Top {len(rows[0]['top']) if rows else 12} features per dictionary with position 0 "
        "left out, ranked as the SAE page does by default (activation / the feature's max over the "
        "held-out text); `raw` ranks by activation. Search: `Dashboards.search_token(\" John\")`. "
        "Timing: cold load of dashboards.safetensors, then the median time of one feature's card.",
        "",
        "| dictionary | held-out tokens | live | name-token features in top (raw) | ' John' search hits | "
        "load s | card ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['n_tokens']} | {r['live']:.1%} | {r['names_in_top']} "
                     f"({r['names_in_top_raw']}) | {r['john_hits']} | {r['load_s']:.2f} | {r['card_ms']:.1f} |")
    for r in rows:
        lines += ["", f"## {r['name']}", "", "| feature | label | activation | / max | at |", "|---|---|---|---|---|"]
        for t in r["top"]:
            lines.append(f"| {t['feature']} | `{t['label']}` | {t['activation']:.2f} | {t['relative']:.2f} | "
                         f"{t['position']}:`{t['token']!r}` |")
        if r.get("john_top"):
            lines += ["", "Search ' John': " + "; ".join(f"{h['feature']} `{h['label']}` ({h['max_activation']:.2f})"
                                                       for h in r["john_top"])]
        elif r.get("search_error"):
            lines += ["", f"Search ' John': {r['search_error']}"]
        lines += ["", "Top 3 features at each name token (the page's per-position table): " + "; ".join(
            f"{a['position']}:`{a['token']!r}` {a['feature']} `{a['label']}`" for a in r.get("at_names", []))]
        for nf in r.get("name_features", []):
            lines += ["", f"Top contexts of feature {nf['feature']} (`{nf['label']}`), activating token in [[ ]]:",
                      ""]
            lines += [f"    {c}" for c in nf["contexts"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
