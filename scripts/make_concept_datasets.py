"""Write the concept datasets data/concepts/sentiment.jsonl and data/concepts/truth.jsonl.

Deterministic (seeded) templates; every line is {"text", "label", "word"} where "word" is the
word that carries the label (marked-token pooling and the control task's word type).
Run: python scripts/make_concept_datasets.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "data" / "concepts"

POSITIVE = [
    "wonderful",
    "excellent",
    "great",
    "delightful",
    "fantastic",
    "lovely",
    "superb",
    "brilliant",
    "amazing",
    "charming",
    "pleasant",
    "enjoyable",
    "beautiful",
    "marvelous",
    "outstanding",
    "perfect",
    "terrific",
    "splendid",
    "fabulous",
    "impressive",
    "uplifting",
    "heartwarming",
    "refreshing",
    "magnificent",
    "glorious",
    "cheerful",
    "satisfying",
    "remarkable",
    "inspiring",
    "exceptional",
]
NEGATIVE = [
    "terrible",
    "awful",
    "horrible",
    "dreadful",
    "disappointing",
    "boring",
    "miserable",
    "poor",
    "unpleasant",
    "disgusting",
    "mediocre",
    "annoying",
    "tedious",
    "painful",
    "ugly",
    "pathetic",
    "lousy",
    "dull",
    "frustrating",
    "depressing",
    "atrocious",
    "abysmal",
    "unbearable",
    "bland",
    "clumsy",
    "shoddy",
    "gloomy",
    "dismal",
    "tiresome",
    "appalling",
]
SUBJECTS = [
    "movie",
    "meal",
    "hotel",
    "concert",
    "book",
    "trip",
    "service",
    "show",
    "game",
    "restaurant",
    "album",
    "performance",
    "class",
    "weekend",
    "party",
    "coffee",
    "apartment",
    "flight",
    "museum",
    "story",
]
TEMPLATES = [
    "The {s} was {w}.",
    "I thought the {s} was {w}.",
    "Honestly, the {s} felt {w} from start to finish.",
    "What a {w} {s} that was.",
    "My friends said the {s} was {w}.",
    "It was a {w} {s}, and I will remember it.",
    "Overall the {s} was {w}.",
    "Everyone agreed that the {s} was {w}.",
    "The {s} turned out to be {w}.",
    "We found the {s} {w}.",
]


def sentiment(rng: random.Random, n_per_class: int = 150) -> list[dict]:
    rows = []
    for label, words in (("positive", POSITIVE), ("negative", NEGATIVE)):
        seen: set[str] = set()
        while len(seen) < n_per_class:
            w, s, t = rng.choice(words), rng.choice(SUBJECTS), rng.choice(TEMPLATES)
            text = t.format(s=s, w=w)
            if text in seen:
                continue
            seen.add(text)
            text = text[0].upper() + text[1:]
            rows.append({"text": text, "label": label, "word": w})
    rng.shuffle(rows)
    return rows


CAPITALS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Japan": "Tokyo",
    "China": "Beijing",
    "Russia": "Moscow",
    "Egypt": "Cairo",
    "Greece": "Athens",
    "Portugal": "Lisbon",
    "Austria": "Vienna",
    "Ireland": "Dublin",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Poland": "Warsaw",
    "Canada": "Ottawa",
    "Kenya": "Nairobi",
    "Thailand": "Bangkok",
    "Peru": "Lima",
    "Cuba": "Havana",
    "Finland": "Helsinki",
    "Hungary": "Budapest",
    "Denmark": "Copenhagen",
    "Belgium": "Brussels",
    "Argentina": "Buenos Aires",
    "Turkey": "Ankara",
    "Iran": "Tehran",
    "Chile": "Santiago",
    "Mexico": "Mexico City",
    "England": "London",
}
ANIMALS = {
    "dog": "mammal",
    "cat": "mammal",
    "whale": "mammal",
    "horse": "mammal",
    "cow": "mammal",
    "eagle": "bird",
    "sparrow": "bird",
    "penguin": "bird",
    "owl": "bird",
    "parrot": "bird",
    "salmon": "fish",
    "shark": "fish",
    "trout": "fish",
    "tuna": "fish",
    "cod": "fish",
    "snake": "reptile",
    "lizard": "reptile",
    "crocodile": "reptile",
    "turtle": "reptile",
    "frog": "amphibian",
    "toad": "amphibian",
    "salamander": "amphibian",
}
NUMBERS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]


def truth(rng: random.Random) -> list[dict]:
    rows = []
    countries = list(CAPITALS)
    for c in countries:
        rows.append({"text": f"The capital of {c} is {CAPITALS[c]}.", "label": "true", "word": CAPITALS[c]})
        other = CAPITALS[rng.choice([x for x in countries if x != c])]
        rows.append({"text": f"The capital of {c} is {other}.", "label": "false", "word": other})
        rows.append({"text": f"{CAPITALS[c]} is the capital of {c}.", "label": "true", "word": c})
        wrong = rng.choice([x for x in countries if x != c])
        rows.append({"text": f"{CAPITALS[c]} is the capital of {wrong}.", "label": "false", "word": wrong})
    kinds = sorted(set(ANIMALS.values()))
    for a, k in ANIMALS.items():
        art = "An" if k[0] in "aeiou" else "A"
        rows.append({"text": f"The {a} is a kind of {k}.", "label": "true", "word": k})
        wrong = rng.choice([x for x in kinds if x != k])
        rows.append({"text": f"The {a} is a kind of {wrong}.", "label": "false", "word": wrong})
        rows.append(
            {"text": f"{art} {k} is what a {a} is.".replace("A a", "An a"), "label": "true", "word": a}
        )
    pairs = set()
    while len(pairs) < 40:
        a, b = rng.randint(1, 6), rng.randint(0, 6)
        pairs.add((a, b))
    for a, b in sorted(pairs):
        rows.append(
            {
                "text": f"{NUMBERS[a].capitalize()} plus {NUMBERS[b]} equals {NUMBERS[a + b]}.",
                "label": "true",
                "word": NUMBERS[a + b],
            }
        )
        wrong = rng.choice([x for x in range(13) if x != a + b])
        rows.append(
            {
                "text": f"{NUMBERS[a].capitalize()} plus {NUMBERS[b]} equals {NUMBERS[wrong]}.",
                "label": "false",
                "word": NUMBERS[wrong],
            }
        )
    rng.shuffle(rows)
    return rows


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("sentiment", sentiment(random.Random(0))), ("truth", truth(random.Random(1)))):
        with open(OUT / f"{name}.jsonl", "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
        counts = {lab: sum(r["label"] == lab for r in rows) for lab in sorted({r["label"] for r in rows})}
        print(f"{name}: {len(rows)} lines {counts}")


if __name__ == "__main__":
    main()
