"""Build data/prompts/ioi.jsonl and data/prompts/facts.jsonl: templates x fillers, kept only when the
model answers the target top-1 (the filter stays in this script, so the sets can be rebuilt for another
model). Targets and foils are single tokens with their leading space.

    python scripts/build_prompts.py [--model smollm2-135m] [--out data/prompts] [--n 150]

IOI (Wang et al. 2022): "When Mary and John went to the store, John gave a drink to" -> " Mary" (the
indirect object), foil " John" (the subject); "corrupt" is the same prompt with both names replaced by
two other names of the same token length ("When Alice and Peter went to the store, Peter gave a drink
to"), the counterfactual circuit discovery ablates to (``workbench circuit discover``). Facts: capitals,
languages, currencies and similar single-token answers; the foil is the model's best-ranked other answer of
the same kind.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from circuits.bench.tasks import NAMES, OBJECTS, PLACES  # one list of fillers for these sets and the benchmark's

IOI_TEMPLATES = [
    "When {A} and {B} went to the {P}, {B} gave a {O} to",
    "After {A} and {B} went to the {P}, {B} gave a {O} to",
    "When {A} and {B} arrived at the {P}, {B} handed a {O} to",
    "While {A} and {B} were at the {P}, {B} gave a {O} to",
    "Then, {A} and {B} had a long day at the {P}. {B} gave a {O} to",
    "{A} and {B} went to the {P}. {B} passed a {O} to",
]

CAPITALS = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
            "Russia": "Moscow", "China": "Beijing", "England": "London", "Egypt": "Cairo", "Greece": "Athens",
            "Austria": "Vienna", "Ireland": "Dublin", "Portugal": "Lisbon", "Poland": "Warsaw",
            "Norway": "Oslo",
            "Sweden": "Stockholm", "Cuba": "Havana", "Kenya": "Nairobi", "Thailand": "Bangkok",
            "Turkey": "Ankara", "Canada": "Ottawa", "Hungary": "Budapest", "Peru": "Lima", "Iran": "Tehran",
            "Belgium": "Brussels", "Denmark": "Copenhagen", "Finland": "Helsinki", "Iraq": "Baghdad"}
LANGUAGES = {"France": "French", "Germany": "German", "Italy": "Italian", "Spain": "Spanish",
             "Japan": "Japanese", "Russia": "Russian", "China": "Chinese", "Portugal": "Portuguese",
             "Greece": "Greek", "Poland": "Polish", "Sweden": "Swedish", "Turkey": "Turkish",
             "Brazil": "Portuguese", "Mexico": "Spanish", "England": "English", "Korea": "Korean",
             "Egypt": "Arabic", "Netherlands": "Dutch", "Finland": "Finnish", "Norway": "Norwegian"}
CURRENCIES = {"Japan": "yen", "England": "pound", "India": "rupee", "Russia": "ruble", "Mexico": "peso",
              "Germany": "euro", "France": "euro", "Italy": "euro", "Spain": "euro", "China": "yuan"}
CITY_COUNTRY = {"Paris": "France", "Berlin": "Germany", "Rome": "Italy", "Madrid": "Spain", "Tokyo": "Japan",
                "Moscow": "Russia", "London": "England", "Cairo": "Egypt", "Athens": "Greece",
                "Toronto": "Canada", "Sydney": "Australia", "Chicago": "America", "Mumbai": "India",
                "Beijing": "China", "Vienna": "Austria", "Dublin": "Ireland", "Lisbon": "Portugal"}
FACT_TEMPLATES = {
    "capital": (CAPITALS, ["The capital of {X} is", "The capital city of {X} is", "{X}'s capital city is",
                           "The city that is the capital of {X} is"]),
    "language": (LANGUAGES, ["The official language of {X} is", "People in {X} speak",
                             "In {X}, most people speak", "The main language spoken in {X} is"]),
    "currency": (CURRENCIES, ["The currency of {X} is the", "In {X}, people pay with the"]),
    "country": (CITY_COUNTRY, ["{X} is a city in the country of", "{X} is located in the country of",
                               "The city of {X} is in"]),
}


def ioi_candidates(rng: random.Random) -> list[dict]:
    out = []
    for template in IOI_TEMPLATES:
        for _ in range(60):
            a, b = rng.sample(NAMES, 2)
            prompt = template.format(A=a, B=b, P=rng.choice(PLACES), O=rng.choice(OBJECTS))
            out.append({"prompt": prompt, "target": " " + a, "foil": " " + b})
    return out


def ioi_counterfactual(model, row: dict, rng: random.Random) -> str | None:
    """The prompt with the IO and S names replaced by two other names, keeping the token count."""
    import re

    a, b = row["target"].strip(), row["foil"].strip()
    length = model.to_tokens(row["prompt"]).shape[1]
    others = [n for n in NAMES if n not in (a, b)]
    for _ in range(40):
        c, d = rng.sample(others, 2)
        swapped = re.sub(rf"\b({a}|{b})\b", lambda m, c=c, d=d: c if m.group(1) == a else d, row["prompt"])
        if model.to_tokens(swapped).shape[1] == length:
            return swapped
    return None


def fact_candidates() -> list[dict]:
    out = []
    for kind, (table, templates) in FACT_TEMPLATES.items():
        answers = sorted(set(table.values()))
        for template in templates:
            for x, y in table.items():
                out.append({"prompt": template.format(X=x), "target": " " + y, "kind": kind,
                            "others": [" " + a for a in answers if a != y]})
    return out


def keep_correct(model, rows: list[dict], facts: bool) -> list[dict]:
    """The filter: single-token target (and foil), answered top-1 by the model."""
    import torch

    from core.errors import WorkbenchError

    kept = []
    for row in rows:
        try:
            enc = model.encode(row["prompt"], row["target"], row.get("foil"))
        except WorkbenchError:
            continue
        with torch.no_grad():
            logits = model.logits(enc.tokens)[0, -1]
        if int(logits.argmax()) != enc.target_id:
            continue
        if facts:  # foil: the best-ranked other answer of the same kind that is one token
            others = []
            for o in row["others"]:
                try:
                    others.append((float(logits[model.token_id(o)]), o))
                except WorkbenchError:
                    continue
            if not others:
                continue
            row = {"prompt": row["prompt"], "target": row["target"], "foil": max(others)[1]}
        kept.append({"prompt": row["prompt"], "target": row["target"], "foil": row["foil"]})
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "data" / "prompts"))
    parser.add_argument("--n", type=int, default=150, help="At most this many prompts per set.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from core.models.zoo import load

    torch.set_num_threads(1)
    model = load(args.model)
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows, facts in (("ioi", ioi_candidates(rng), False), ("facts", fact_candidates(), True)):
        seen, unique = set(), []
        for r in rows:
            if r["prompt"] not in seen:
                seen.add(r["prompt"])
                unique.append(r)
        rng.shuffle(unique)  # so that "the first 50" mixes templates
        kept = keep_correct(model, unique, facts)[: args.n]
        if not facts:  # counterfactuals from their own generator: the prompts stay those of the seed
            names_rng = random.Random(args.seed + 1)
            kept = [dict(r, corrupt=c) for r in kept if (c := ioi_counterfactual(model, r, names_rng))]
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
        print(f"{name}: {len(kept)} of {len(unique)} candidates kept -> {out / (name + '.jsonl')}")


if __name__ == "__main__":
    main()
