"""How often a suggested supernode matches a grouping made by hand (issue 37 item 4), on smollm2-135m's feature
graphs of the IOI and facts prompts over the four shipped residual SAEs (L6, L12, L18, L24), drawn as the app
draws them (each row's 8 most influential nodes, the 120 strongest edges: circuits.plot.readable).

    .venv/bin/python scripts/supernode_agreement.py --dump        # the drawn nodes, explanations, suggestions
    .venv/bin/python scripts/supernode_agreement.py               # the agreement table (results/app/supernodes.md)

The reference groupings (REFERENCE) were made once by hand from the dump, before comparing, with the reasons
written beside them; a reference group is matched when a suggestion's member set has Jaccard overlap >= 0.5
with it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = {
    "ioi": ("When Mary and John went to the store, John gave a drink to", " Mary", " John"),
    "facts": ("The Eiffel Tower is located in the city of", " Paris", None),
}
SAES = [f"smollm2-135m-L{layer}-resid-topk2304" for layer in (6, 12, 18, 24)]

# name -> (members, reason); filled from the --dump output (see results/app/supernodes.md)
REFERENCE: dict[str, dict[str, tuple[list[str], str]]] = {
    "ioi": {
        "'to' at the end": (["L6.f1463@p13", "L6.f1112@p13", "L6.f1483@p13", "L12.f1463@p13", "L12.f714@p13",
                             "L18.f1609@p13", "L18.f1318@p13"],
                            "every feature at the last position (' to') whose explanation is the token 'to' or "
                            "prepositions including it, at every layer: one role, 'the name is due next'"),
        "Mary as a name": (["L6.f2231@p1", "L12.f1335@p1", "L18.f552@p1", "L24.f210@p1"],
                           "the features at ' Mary' (position 1) explained as first names, the L24 one also "
                           "promoting pronouns: the indirect object's identity carried up the layers"),
    },
    "facts": {
        "'of' before the answer": (["L6.f1012@p9", "L6.f674@p9", "L12.f316@p9", "L12.f674@p9", "L18.f1103@p9",
                                    "L18.f2145@p9", "L24.f497@p9"],
                                   "every feature at the last position (' of') explained as the token 'of' (L24's "
                                   "as 'of, and, on...'), at every layer"),
        "word pieces of the landmark": (["L12.f632@p2", "L18.f1804@p2"],
                                        "the two features at position 2 (inside 'Eiffel Tower') explained as "
                                        "pieces inside a word"),
    },
}
VARIANTS = {"default (edges 0.3, words 0.5, position 0.2; min similarity 0.5)": {},
            "min similarity 0.6": {"min_similarity": 0.6},
            "no position term (edges 0.5, words 0.5)": {"position_weight": 0.0},
            "edges only (no words, no position)": {"text_weight": 0.0, "position_weight": 0.0}}


def build(model, prompt: str, target: str, foil: str | None):
    from attribution.features.placement import load_dictionaries
    from circuits.feature_graph import feature_graph
    from circuits.plot import readable

    full = feature_graph(model, prompt, load_dictionaries(SAES), target=target, foil=foil, per_layer=16,
                         max_nodes=100_000, max_edges=1_000_000)
    return readable(full, 8, 120)


def explanations(graph) -> dict[str, str]:
    from attribution.sae.dashboard import Dashboards

    dbs = {d["name"]: Dashboards.load(d["path"]) for d in graph.dictionaries}
    return {n.id: dbs[n.metadata["dictionary"]].describe(int(n.feature)) for n in graph.nodes if n.kind == "feature"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", action="store_true")
    args = ap.parse_args()
    import torch

    import workbench as wb
    from circuits import interact as I

    torch.set_num_threads(1)
    model = wb.load("smollm2-135m")
    for name, (prompt, target, foil) in PROMPTS.items():
        graph = build(model, prompt, target, foil)
        text = explanations(graph)
        sub = graph
        got = I.suggest(sub, text)
        if args.dump:
            print(f"## {name}: {prompt!r} -> {target!r}" + (f" minus {foil!r}" if foil else ""))
            for n in sorted(graph.nodes, key=lambda n: (float(n.layer), n.position or 0)):
                print(f"  {n.id:<22} infl {float(n.metadata['influence']):.3f}  {text.get(n.id, '')[:110]}")
            for s in got:
                print(f"  SUGGESTED {s.name}: {s.members} ({s.reason})")
            continue
        ref = REFERENCE[name]
        for variant, kw in VARIANTS.items():
            got = I.suggest(sub, text, **kw)
            score = I.matches([s.members for s in got], [m for m, _ in ref.values()])
            print(f"| {name} | {variant} | {len(got)} | {len(ref)} | {score['recall']:.2f} | "
                  f"{score['precision']:.2f} | "
                  + ", ".join(f"{g} {b:.2f}" for g, b in zip(ref, score["best_jaccard"], strict=True)) + " |")
            for s in got:
                print(f"    suggested {s.name}: {', '.join(s.members)}")


if __name__ == "__main__":
    main()
