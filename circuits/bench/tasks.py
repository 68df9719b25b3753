"""Benchmark tasks with counterfactuals, built per model (no dataset comes from a hub).

Every row is ``{"prompt", "corrupt", "target", "foil", "split"}`` (greater-than adds ``"good"`` and ``"bad"``
token lists): ``corrupt`` is the counterfactual, the same number of tokens as the prompt; ``target`` is the
clean answer and ``foil`` the counterfactual's answer (MIB's label pair, so the metric is the logit
difference clean answer - counterfactual answer), except IOI, whose foil is the subject (its classic metric).

Candidates come from each task's generator; ``build`` keeps a row when (1) prompt and counterfactual have
the same token length, (2) target and foil are single, different tokens, (3) the model's top-1 answer to the
clean prompt is the target and (4) its top-1 answer to the counterfactual is not (the counterfactual changes
the answer). Kept rows are shuffled with a seed and split train / validation / test.

- ioi: Wang et al. 2022 templates, with MIB's counterfactual kinds as a task parameter
  (``ioi:counterfactual=KIND``, ``parse_task``): ``s2_io`` (the default, MIB's default) replaces the
  second mention of the subject by the indirect object, so the name mentioned once, the answer, flips to the
  subject (the foil); ``abc`` replaces all three mentions by three new, different names (no answer is
  favoured); ``names`` replaces both names consistently (data/prompts' convention, the shipped leaderboards'
  IOI until issue 39). Each row says its kind (``"counterfactual"``) and ``check_counterfactual`` verifies
  it word by word; the file of kind KIND is ``ioi.jsonl`` for s2_io, ``ioi.KIND.jsonl`` otherwise.
- facts: capitals, languages, currencies, cities' countries; the counterfactual is the same template with
  another subject of the same kind whose answer differs.
- add, sub: "12 + 21 = 33\n23 + 45 = " (one solved example first, one of four) -> first digit of the result (the
  tokenizer writes digits one by one); the counterfactual changes one operand so that this digit changes
  (MIB's arithmetic counterfactual).
- mcqa: copy-colours multiple choice with lettered options after one solved example ("Question: The pen
  is blue. What color is the pen? A: red B: blue Answer:" -> " B"); the counterfactual permutes the
  options, so the answer letter changes.
- greater_than: Hanna et al. 2023, "The war lasted from the year 1732 to the year 17"; the counterfactual
  starts in 1701. With a digit-by-digit tokenizer the next token is the end year's decade: the metric is
  the probability mass on decades above the start decade minus the mass below it (years inside the start
  decade need a second token and count on neither side). ``good`` / ``bad`` list those digit tokens; target
  and foil are the model's top-1 decade on the clean and the counterfactual prompt (DPA explains their
  logit difference, a linear stand-in for the probability metric).
- induction: a random sequence of single-token words, then its first k words again -> word k+1; the
  counterfactual changes that word in the first occurrence, so the copied answer changes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import MethodError, PromptError, WorkbenchError

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Task:
    name: str
    summary: str
    candidates: Callable[[random.Random, int], list[dict]]
    metric: str = "logit_diff"  # or prob_diff (greater_than: good - bad probability mass)


# -- IOI ---------------------------------------------------------------------------------------------
NAMES = ["Mary", "John", "Tom", "James", "Anna", "Sarah", "David", "Michael", "Lisa", "Paul", "Emma", "Kate",
         "Mark", "Alice", "Peter", "Laura", "Daniel", "Jessica", "Robert", "Emily", "Chris", "Rachel"]
PLACES = ["store", "park", "school", "office", "garden", "beach", "restaurant", "hospital", "library"]
OBJECTS = ["drink", "book", "ring", "ball", "gift", "letter", "bottle", "key"]
IOI_TEMPLATES = [
    "When {A} and {B} went to the {P}, {B} gave a {O} to",
    "After {A} and {B} went to the {P}, {B} gave a {O} to",
    "When {A} and {B} arrived at the {P}, {B} handed a {O} to",
    "While {A} and {B} were at the {P}, {B} gave a {O} to",
    "{A} and {B} went to the {P}. {B} passed a {O} to",
]


IOI_KINDS = ("s2_io", "abc", "names")  # MIB's S2 -> IO flip (default), MIB's ABC, both names replaced
IOI_DEFAULT = "s2_io"


def ioi_candidates(rng: random.Random, n: int, counterfactual: str = IOI_DEFAULT) -> list[dict]:
    """IOI rows: A (the indirect object, the answer) named once, B (the subject, the foil) twice."""
    check_ioi_kind(counterfactual)
    out = []
    for _ in range(n):
        a, b, c, d, e = rng.sample(NAMES, 5)
        template = rng.choice(IOI_TEMPLATES)
        fill = {"P": rng.choice(PLACES), "O": rng.choice(OBJECTS)}
        prompt = template.format(A=a, B=b, **fill)
        if counterfactual == "s2_io":  # the second B becomes A: B is now the name mentioned once
            head, _, tail = prompt.rpartition(f" {b} ")
            corrupt = f"{head} {a} {tail}"
        elif counterfactual == "abc":
            corrupt = _three_names(template, c, d, e, fill)
        else:
            corrupt = template.format(A=c, B=d, **fill)
        out.append({"prompt": prompt, "corrupt": corrupt, "target": " " + a, "foil": " " + b,
                    "counterfactual": counterfactual})
    return out


def _three_names(template: str, c: str, d: str, e: str, fill: dict[str, str]) -> str:
    """The template with its A, first B and second B slots filled by three different names."""
    first, _, rest = template.partition("{B}")
    return (first + d + rest.replace("{B}", e, 1)).format(A=c, **fill)


def check_ioi_kind(kind: str) -> str:
    if kind not in IOI_KINDS:
        raise MethodError(f"unknown IOI counterfactual {kind!r}; choose one of {', '.join(IOI_KINDS)}")
    return kind


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"[A-Za-z]+|\S", text)


def check_counterfactual(row: dict, kind: str) -> bool:
    """Whether an IOI row's counterfactual is of this kind, word by word: the answer (target) named once in
    the prompt, the subject (foil) twice; s2_io changes only the subject's second mention, into the answer;
    abc changes the three mentions into three new, different names; names changes them into two new names,
    the subject's two mentions alike."""
    check_ioi_kind(kind)
    p, c = _words(row.get("prompt", "")), _words(row.get("corrupt", ""))
    a, b = str(row.get("target", "")).strip(), str(row.get("foil", "")).strip()
    if len(p) != len(c) or p.count(a) != 1 or p.count(b) != 2:
        return False
    slots = [p.index(a)] + [i for i, w in enumerate(p) if w == b]
    differs = [i for i in range(len(p)) if p[i] != c[i]]
    if kind == "s2_io":
        return differs == [slots[2]] and c[slots[2]] == a
    new = [c[i] for i in slots]
    if sorted(differs) != sorted(slots) or {a, b} & set(new):
        return False
    return len(set(new)) == 3 if kind == "abc" else (new[1] == new[2] != new[0])


# -- facts -------------------------------------------------------------------------------------------
FACTS = {
    "capital": ({"France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
                 "Russia": "Moscow", "China": "Beijing", "England": "London", "Egypt": "Cairo",
                 "Greece": "Athens", "Austria": "Vienna", "Ireland": "Dublin", "Portugal": "Lisbon",
                 "Poland": "Warsaw", "Norway": "Oslo", "Cuba": "Havana", "Kenya": "Nairobi",
                 "Thailand": "Bangkok", "Canada": "Ottawa", "Hungary": "Budapest", "Peru": "Lima",
                 "Sweden": "Stockholm", "Finland": "Helsinki", "Denmark": "Copenhagen", "Belgium": "Brussels",
                 "Turkey": "Ankara", "Iran": "Tehran", "Iraq": "Baghdad", "Chile": "Santiago",
                 "Colombia": "Bogota", "Venezuela": "Caracas", "Australia": "Canberra", "Syria": "Damascus",
                 "Lebanon": "Beirut", "Israel": "Jerusalem", "Ukraine": "Kyiv", "Romania": "Bucharest",
                 "Bulgaria": "Sofia", "Serbia": "Belgrade", "Croatia": "Zagreb", "Vietnam": "Hanoi",
                 "Indonesia": "Jakarta", "Pakistan": "Islamabad", "Afghanistan": "Kabul", "Morocco": "Rabat",
                 "Scotland": "Edinburgh", "Wales": "Cardiff", "Iceland": "Reykjavik", "Latvia": "Riga",
                 "Belarus": "Minsk", "Nepal": "Kathmandu", "Bangladesh": "Dhaka", "Qatar": "Doha",
                 "Jordan": "Amman", "Uganda": "Kampala", "Sudan": "Khartoum", "Libya": "Tripoli",
                 "Tunisia": "Tunis", "Algeria": "Algiers", "Senegal": "Dakar", "Ecuador": "Quito",
                 "Uruguay": "Montevideo", "Jamaica": "Kingston", "Cyprus": "Nicosia", "Albania": "Tirana",
                 "Slovakia": "Bratislava", "Georgia": "Tbilisi", "Armenia": "Yerevan", "Ghana": "Accra"},
                ["The capital of {X} is", "The capital city of {X} is", "{X}'s capital city is",
                 "{X}'s capital is", "The capital of {X} is the city of", "The government of {X} sits in"]),
    "language": ({"France": "French", "Germany": "German", "Italy": "Italian", "Spain": "Spanish",
                  "Japan": "Japanese", "Russia": "Russian", "China": "Chinese", "Portugal": "Portuguese",
                  "Greece": "Greek", "Poland": "Polish", "Sweden": "Swedish", "Turkey": "Turkish",
                  "Korea": "Korean", "Netherlands": "Dutch", "Finland": "Finnish", "Brazil": "Portuguese",
                  "Mexico": "Spanish", "Austria": "German", "Denmark": "Danish", "Norway": "Norwegian",
                  "Israel": "Hebrew", "Iran": "Persian", "Egypt": "Arabic", "Vietnam": "Vietnamese",
                  "Thailand": "Thai", "Hungary": "Hungarian", "Ukraine": "Ukrainian", "Romania": "Romanian",
                  "Indonesia": "Indonesian", "Iceland": "Icelandic", "Chile": "Spanish", "Peru": "Spanish",
                  "Cuba": "Spanish", "England": "English", "Australia": "English", "Argentina": "Spanish",
                  "Colombia": "Spanish", "Syria": "Arabic", "Iraq": "Arabic", "Bulgaria": "Bulgarian",
                  "Croatia": "Croatian", "Serbia": "Serbian", "Albania": "Albanian", "Latvia": "Latvian"},
                 ["The official language of {X} is", "People in {X} speak", "In {X}, most people speak",
                  "The main language spoken in {X} is", "In {X}, people speak", "The language of {X} is"]),
    "currency": ({"Japan": "yen", "England": "pound", "India": "rupee", "Russia": "ruble", "Mexico": "peso",
                  "Germany": "euro", "China": "yuan", "Thailand": "baht", "Korea": "won", "Poland": "zloty",
                  "Sweden": "krona", "Brazil": "real", "Switzerland": "franc", "Israel": "shekel",
                  "Vietnam": "dong", "Turkey": "lira", "Hungary": "forint", "America": "dollar",
                  "Canada": "dollar", "Nigeria": "naira", "Iran": "rial", "France": "euro", "Italy": "euro",
                  "Spain": "euro", "Australia": "dollar", "Argentina": "peso", "Chile": "peso"},
                 ["The currency of {X} is the", "In {X}, people pay with the", "The official currency of {X} is the",
                  "The money used in {X} is the", "In {X}, prices are given in the"]),
    "country": ({"Paris": "France", "Berlin": "Germany", "Rome": "Italy", "Madrid": "Spain", "Tokyo": "Japan",
                 "Moscow": "Russia", "London": "England", "Cairo": "Egypt", "Athens": "Greece",
                 "Toronto": "Canada", "Sydney": "Australia", "Mumbai": "India", "Vienna": "Austria",
                 "Barcelona": "Spain", "Munich": "Germany", "Milan": "Italy", "Osaka": "Japan",
                 "Shanghai": "China", "Beijing": "China", "Delhi": "India", "Lyon": "France", "Hamburg": "Germany",
                 "Naples": "Italy", "Venice": "Italy", "Kyoto": "Japan", "Seoul": "Korea", "Bangkok": "Thailand",
                 "Istanbul": "Turkey", "Dublin": "Ireland", "Lisbon": "Portugal", "Warsaw": "Poland",
                 "Stockholm": "Sweden", "Oslo": "Norway", "Budapest": "Hungary", "Melbourne": "Australia",
                 "Vancouver": "Canada", "Montreal": "Canada", "Havana": "Cuba", "Lima": "Peru",
                 "Nairobi": "Kenya", "Manchester": "England", "Liverpool": "England", "Edinburgh": "Scotland",
                 "Glasgow": "Scotland", "Geneva": "Switzerland", "Zurich": "Switzerland", "Brussels": "Belgium",
                 "Copenhagen": "Denmark", "Helsinki": "Finland", "Santiago": "Chile", "Tehran": "Iran",
                 "Baghdad": "Iraq", "Karachi": "Pakistan", "Lagos": "Nigeria", "Jakarta": "Indonesia",
                 "Hanoi": "Vietnam", "Marseille": "France", "Seville": "Spain", "Florence": "Italy"},
                ["{X} is a city in the country of", "The city of {X} is in", "{X} is located in the country of",
                 "The city of {X} lies in", "{X} is a large city in"]),
}


def fact_candidates(rng: random.Random, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        table, templates = FACTS[rng.choice(sorted(FACTS))]
        x, y = rng.sample(sorted(table), 2)
        if table[x] == table[y]:
            continue
        template = rng.choice(templates)
        out.append({"prompt": template.format(X=x), "corrupt": template.format(X=y),
                    "target": " " + table[x], "foil": " " + table[y]})
    return out


# -- arithmetic --------------------------------------------------------------------------------------
# one solved example first, drawn from a few (0-shot, smollm2 kept 5 of 640; the pool widens the prompts)
ARITH_SHOTS = {"+": ("12 + 21 = 33\n", "24 + 15 = 39\n", "31 + 42 = 73\n", "53 + 26 = 79\n"),
               "-": ("35 - 12 = 23\n", "47 - 21 = 26\n", "68 - 35 = 33\n", "89 - 54 = 35\n")}


def _arith(rng: random.Random, n: int, op: str) -> list[dict]:
    out = []
    for _ in range(n):
        if op == "+":
            a, b = rng.randint(10, 89), rng.randint(10, 89)
            if a + b > 99:
                continue
        else:
            a, b = rng.randint(20, 99), rng.randint(10, 89)
            if a - b < 10:
                continue
        value = a + b if op == "+" else a - b
        # the counterfactual changes one operand's tens digit, keeping two digits and a valid result
        for _ in range(10):
            if rng.random() < 0.5:
                a2, b2 = rng.randint(1, 9) * 10 + a % 10, b
            else:
                a2, b2 = a, rng.randint(1, 9) * 10 + b % 10
            v2 = a2 + b2 if op == "+" else a2 - b2
            if 10 <= v2 <= 99 and str(v2)[0] != str(value)[0]:
                shot = rng.choice(ARITH_SHOTS[op])
                out.append({"prompt": f"{shot}{a} {op} {b} = ", "corrupt": f"{shot}{a2} {op} {b2} = ",
                            "target": str(value)[0], "foil": str(v2)[0]})
                break
    return out


def add_candidates(rng: random.Random, n: int) -> list[dict]:
    return _arith(rng, n, "+")


def sub_candidates(rng: random.Random, n: int) -> list[dict]:
    return _arith(rng, n, "-")


# -- multiple-choice QA ------------------------------------------------------------------------------
COLORS = ["red", "blue", "green", "yellow", "black", "white", "brown", "pink", "orange", "purple"]
THINGS = ["pen", "car", "ball", "hat", "cup", "box", "shirt", "bag", "door", "chair", "bike", "book"]


# one solved example: without it smollm2 answers "<|im_end|>" or " The", never a letter
MCQA_SHOT = "Question: The cup is green. What color is the cup?\nA: white\nB: green\nAnswer: B\n"


def mcqa_candidates(rng: random.Random, n: int) -> list[dict]:
    out = []
    letters = "AB"
    for _ in range(n):
        thing = rng.choice(THINGS)
        options = rng.sample(COLORS, len(letters))
        right = rng.randrange(len(letters))
        perm = options[1:] + options[:1]  # a cyclic permutation: the right colour moves to another letter
        head = MCQA_SHOT + f"Question: The {thing} is {options[right]}. What color is the {thing}?\n"

        def body(opts: list[str], head: str = head) -> str:
            return head + "".join(f"{letter}: {c}\n" for letter, c in zip(letters, opts, strict=True)) + "Answer:"

        out.append({"prompt": body(options), "corrupt": body(perm), "target": " " + letters[right],
                    "foil": " " + letters[perm.index(options[right])]})
    return out


# -- greater-than ------------------------------------------------------------------------------------
NOUNS = ["war", "expedition", "siege", "drought", "reign", "journey", "conflict", "voyage", "plague", "famine"]


def greater_than_candidates(rng: random.Random, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        century, decade, unit = rng.randint(11, 18), rng.randint(2, 7), rng.randint(2, 8)
        noun = rng.choice(NOUNS)

        def text(yy: str, noun: str = noun, century: int = century) -> str:
            return f"The {noun} lasted from the year {century}{yy} to the year {century}"

        out.append({"prompt": text(f"{decade}{unit}"), "corrupt": text("01"),
                    "good": [str(d) for d in range(decade + 1, 10)], "bad": [str(d) for d in range(decade)]})
    return out


# -- induction ---------------------------------------------------------------------------------------
WORDS = [" apple", " river", " stone", " cloud", " horse", " music", " paper", " table", " green", " light",
         " water", " house", " money", " night", " plant", " glass", " bread", " train", " chair", " dream",
         " field", " storm", " sugar", " metal", " smile", " beach", " tiger", " watch", " clock", " smoke"]


def induction_candidates(rng: random.Random, n: int, length: int = 6) -> list[dict]:
    out = []
    for _ in range(n):
        seq = rng.sample(WORDS, length)
        k = rng.randint(2, length - 1)  # the answer is seq[k]
        other = rng.choice([w for w in WORDS if w not in seq])
        changed = seq[:k] + [other] + seq[k + 1:]
        out.append({"prompt": "".join(seq + seq[:k]).lstrip(), "corrupt": "".join(changed + seq[:k]).lstrip(),
                    "target": seq[k], "foil": other})
    return out


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("ioi", "indirect object identification (MIB's S2 -> IO flip; ioi:counterfactual=abc|names)",
         ioi_candidates),
    Task("facts", "factual recall (another subject of the same kind)", fact_candidates),
    Task("add", "two-operand addition, first digit (an operand changed)", add_candidates),
    Task("sub", "two-operand subtraction, first digit (an operand changed)", sub_candidates),
    Task("mcqa", "copy-colours multiple choice, lettered options (options permuted)", mcqa_candidates),
    Task("greater_than", "greater-than years (start year 01), probability mass above", greater_than_candidates,
         "prob_diff"),
    Task("induction", "induction on random word sequences (the copied word changed)", induction_candidates),
)}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise MethodError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


TASK_PARAMS = {"ioi": {"counterfactual": IOI_KINDS}}  # a built-in task's parameters and their values


def parse_task(spec: str) -> tuple[str, dict[str, str]]:
    """(task, parameters) of ``NAME`` or ``NAME:key=value`` (``ioi:counterfactual=abc``); IOI's counterfactual
    defaults to s2_io. Unknown tasks, parameters or values: MethodError (one line)."""
    name, *pairs = spec.split(":")
    get_task(name)
    allowed = TASK_PARAMS.get(name, {})
    params = {"counterfactual": IOI_DEFAULT} if name == "ioi" else {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in allowed:
            have = ", ".join(f"{k}=" + "|".join(v) for k, v in allowed.items()) or "none"
            raise MethodError(f"task {spec!r}: {name} has no parameter {pair!r}; parameters: {have}")
        if value not in allowed[key]:
            raise MethodError(f"task {spec!r}: unknown {name} {key} {value!r}; choose one of "
                              f"{', '.join(allowed[key])}")
        params[key] = value
    return name, params


def is_task(spec: str) -> bool:
    """Whether a spec names a built-in task (with or without parameters), not a .jsonl file."""
    return spec.split(":")[0] in TASKS


def task_file_stem(spec: str) -> str:
    """The data file's stem of a built-in task spec: ``ioi`` for the default counterfactual, ``ioi.abc``."""
    name, params = parse_task(spec)
    kind = params.get("counterfactual", IOI_DEFAULT)
    return name if kind == IOI_DEFAULT else f"{name}.{kind}"


def check_claimed_kinds(rows: list[dict], source: str, kind: str | None = None) -> None:
    """Each IOI row's counterfactual is the kind it claims (its ``counterfactual`` field) and, given ``kind``,
    the kind asked for (rows without the field are checked against ``kind``); PromptError (one line) naming
    the first row that is not."""
    for i, row in enumerate(rows, 1):
        claimed = row.get("counterfactual", kind)
        if claimed is None:
            continue
        if claimed not in IOI_KINDS:
            raise PromptError(f"{source}: row {i} claims an unknown counterfactual kind {claimed!r}; "
                              f"known: {', '.join(IOI_KINDS)}")
        if kind is not None and claimed != kind:
            raise PromptError(f"{source}: row {i} is a {claimed} counterfactual, not the {kind} asked for")
        if not check_counterfactual(row, claimed):
            raise PromptError(f"{source}: row {i}'s counterfactual is not the {claimed} kind it claims "
                              f"({row.get('prompt')!r} -> {row.get('corrupt')!r})")


# -- the filter --------------------------------------------------------------------------------------
def _single(model: Any, text: str) -> int | None:
    try:
        return model.token_id(text)
    except WorkbenchError:
        return None


def check_row(model: Any, row: dict) -> tuple[list[int], list[int]] | None:
    """The row's token ids (prompt, counterfactual) when its static invariants hold, else None."""
    clean, bad = model.to_tokens(row["prompt"])[0].tolist(), model.to_tokens(row["corrupt"])[0].tolist()
    if len(clean) != len(bad) or clean == bad:
        return None
    if "good" in row:
        return clean, bad
    t = _single(model, row["target"])
    f = _single(model, row["foil"]) if row.get("foil") is not None else -1  # a custom row may have no foil
    if t is None or f is None or t == f:
        return None
    return clean, bad


def last_logits(model: Any, tokens: Any) -> Any:
    """The last position's logits [batch, vocab]: the blocks, then the final norm and the unembedding of that
    position only where the model can stop before its head (the unembedding of every position is most of a
    forward with a large vocabulary: gemma3's 262k), else the whole forward's last position."""
    import torch

    with torch.no_grad():
        if getattr(model, "can_stop_at_layer", False) and hasattr(model, "final_logits"):
            return model.final_logits(model(tokens, stop_at_layer=model.arch.n_layers))
        return model.logits(tokens)[:, -1]


def keep_rows(model: Any, rows: list[dict], batch_size: int = 32) -> list[dict]:
    """Rows whose invariants hold and whose clean answer is the model's top-1 while the counterfactual's
    top-1 is not (greater-than: the clean top-1 decade is above the start decade, the counterfactual's is
    another digit); their target/foil are then the model's answers there."""
    import torch

    ok = [(row, ids) for row in rows if (ids := check_row(model, row)) is not None]
    kept: list[dict] = []
    for start in range(0, len(ok), batch_size):
        chunk = ok[start:start + batch_size]
        by_len: dict[int, list[int]] = {}
        for i, (_, (clean, _)) in enumerate(chunk):
            by_len.setdefault(len(clean), []).append(i)
        top: dict[int, tuple[int, int]] = {}
        for idx in by_len.values():
            tokens = torch.tensor([chunk[i][1][0] for i in idx] + [chunk[i][1][1] for i in idx], device=model.device)
            best = last_logits(model, tokens).argmax(-1).tolist()
            for j, i in enumerate(idx):
                top[i] = (best[j], best[j + len(idx)])
        for i, (row, _) in enumerate(chunk):
            clean_top, bad_top = top[i]
            if "good" in row:
                good = {_single(model, g) for g in row["good"]}
                if clean_top in good and bad_top != clean_top:
                    row = dict(row, target=model.tokenizer.decode([clean_top]),
                               foil=model.tokenizer.decode([bad_top]))
                    if _single(model, row["target"]) == clean_top and _single(model, row["foil"]) == bad_top:
                        kept.append(row)
            elif clean_top == model.token_id(row["target"]) and bad_top != clean_top:
                kept.append(row)
    return kept


def build(model: Any, task: str, n: int = 120, seed: int = 0, fractions: tuple[float, float, float] = (0.4, 0.2, 0.4),
          max_candidates: int = 3000) -> list[dict]:
    """Up to ``n`` kept rows of a task (a spec: ``ioi:counterfactual=abc``), each with its split (shuffled with
    ``seed``)."""
    name, params = parse_task(task)
    spec = get_task(name)
    rng = random.Random(f"{task_file_stem(task)}-{seed}")
    seen: set[str] = set()
    kept: list[dict] = []
    tried = 0
    while len(kept) < n and tried < max_candidates:
        fresh = []
        for row in spec.candidates(rng, 64, **params):
            if row["prompt"] not in seen:
                seen.add(row["prompt"])
                fresh.append(row)
        tried += 64
        kept += keep_rows(model, fresh)
    kept = kept[:n]
    rng.shuffle(kept)
    cuts = [round(len(kept) * sum(fractions[:i + 1])) for i in range(3)]
    return [dict(row, split=SPLITS[next(j for j, c in enumerate(cuts) if i < c)]) for i, row in enumerate(kept)]


def split_rows(rows: list[dict], split: str) -> list[dict]:
    if split not in SPLITS:
        raise MethodError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return [r for r in rows if r.get("split") == split]

