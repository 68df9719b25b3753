"""Token categories and context rules the feature explainer (explain.py) builds its rules from.

A category is a predicate on one token's text (" John" is a first name, "1998" a year); a context rule
looks at the tokens before a position (the token after an opening parenthesis, inside quotation marks).
Each carries the phrase a researcher would write, so a chosen rule reads as English.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from jaxtyping import Bool, Int

# The IOI task's names (circuits/bench/tasks.py) and other common English first names.
FIRST_NAMES = frozenset("""
Mary John Tom James Anna Sarah David Michael Lisa Paul Emma Kate Mark Alice Peter Laura Daniel Jessica Robert
Emily Chris Rachel Andrew Thomas William Richard Charles Joseph George Edward Henry Elizabeth Margaret Jane Susan
Helen Anne Ann Frank Fred Jack Harry Sam Samuel Ben Benjamin Steve Steven Stephen Kevin Brian Jason Matthew
Anthony Joshua Ryan Eric Adam Tim Timothy Jim Jimmy Bob Bill Joe Tony Nick Nicholas Alex Alexander Max Oliver
Jacob Ethan Luke Jonathan Simon Martin Patrick Philip Arthur Albert Walter Harold Ralph Roger Louis Carl Karl
Victor Hugo Oscar Leo Adrian Sophie Sophia Olivia Ava Mia Isabella Charlotte Amelia Grace Lucy Lily Chloe Hannah
Victoria Catherine Katherine Karen Nancy Betty Dorothy Sandra Donna Carol Ruth Sharon Michelle Julia Julie
Amanda Jennifer Linda Barbara Patricia Maria Martha Rose Ellen Clara Diana Eva Eve Ruby Megan Amy Rebecca Claire
Jenny Kelly Kim Lucas Noah Liam Mason Elijah Logan Dan Ted Ron Ken Ray Roy Ian Neil Gary Larry Scott Greg Sean
Kyle Adams Smith Jones Brown Wilson Taylor Johnson Williams Miller Davis
""".split()) - {"Adams", "Smith", "Jones", "Brown", "Wilson", "Taylor", "Johnson", "Williams", "Miller", "Davis"}
MONTHS = frozenset("January February March April May June July August September October November December".split())
DAYS = frozenset("Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split())
ARTICLES = frozenset("the a an".split())
PREPOSITIONS = frozenset("""of in on at to for with by from into onto about over under between through after
before during without within against among upon across behind beyond toward towards around near off since""".split())
PRONOUNS = frozenset("""i me my mine you your yours he him his she her hers it its we us our ours they them their
theirs myself yourself himself herself itself ourselves themselves one""".split())
CONJUNCTIONS = frozenset("and or but nor so yet because although though if unless while whereas whether".split())
AUXILIARIES = frozenset("""is are was were be been being am has have had do does did will would can could shall should
may might must""".split())
RELATIVES = frozenset("that which who whom whose what when where why how".split())
NEGATIONS = frozenset("not no never nothing none nobody n't".split())
CODE_WORDS = frozenset("""def class import return self none true false print lambda elif else for while try except
raise yield async await from as with pass int str dict list len range null var const function""".split())
OPEN_QUOTES, CLOSE_QUOTES = frozenset("“‘«"), frozenset("”’»")
QUOTES = frozenset('"\'`“”‘’«»')


def core(tok: str) -> str:
    """A token's text without its leading whitespace."""
    return tok.lstrip(" \t")


def _word(tok: str) -> str:
    return core(tok).lower()


def _in(words: frozenset[str], lower: bool = True) -> Callable[[str], bool]:
    return (lambda t: _word(t) in words) if lower else (lambda t: core(t) in words)


def _punct(chars: str) -> Callable[[str], bool]:
    return lambda t: bool(core(t).strip()) and all(c in chars for c in core(t).strip())


def _suffix(end: str, n: int) -> Callable[[str], bool]:
    return lambda t: core(t).isalpha() and core(t).islower() and len(core(t)) >= n and core(t).endswith(end)


_NUMBER = re.compile(r"^[0-9][0-9.,]*$")
_YEAR = re.compile(r"^(1[5-9][0-9]{2}|20[0-9]{2})$")
_CODE = re.compile(r"[_{}\[\]=<>;]|\(\)|->|::|\.\w+\(|^\.[a-z_]+$")

# (key, phrase, predicate): the order is also the order of preference among equally good categories
CATEGORIES: list[tuple[str, str, Callable[[str], bool]]] = [
    ("first_names", "first names", _in(FIRST_NAMES, lower=False)),
    ("months", "month names", _in(MONTHS, lower=False)),
    ("days", "days of the week", _in(DAYS, lower=False)),
    ("years", "years", lambda t: bool(_YEAR.match(core(t)))),
    ("numbers", "numbers", lambda t: bool(_NUMBER.match(core(t)))),
    ("articles", "articles (the, a, an)", _in(ARTICLES)),
    ("prepositions", "prepositions", _in(PREPOSITIONS)),
    ("pronouns", "pronouns", _in(PRONOUNS)),
    ("conjunctions", "conjunctions", _in(CONJUNCTIONS)),
    ("auxiliaries", "auxiliary verbs (is, was, have, can)", _in(AUXILIARIES)),
    ("relatives", "wh-words and 'that'", _in(RELATIVES)),
    ("negations", "negations", _in(NEGATIONS)),
    ("ing", "words ending in -ing", _suffix("ing", 5)),
    ("ed", "words ending in -ed", _suffix("ed", 4)),
    ("ly", "words ending in -ly", _suffix("ly", 4)),
    ("tion", "words ending in -tion/-sion", lambda t: _suffix("tion", 5)(t) or _suffix("sion", 5)(t)),
    ("code", "code tokens", lambda t: _word(t) in CODE_WORDS or bool(_CODE.search(core(t)))),
    ("all_caps", "all-caps words", lambda t: core(t).isalpha() and core(t).isupper() and len(core(t)) >= 2),
    ("capitalised", "capitalised words", lambda t: core(t)[:1].isupper() and core(t)[1:].islower()
     and core(t).isalpha()),
    ("commas", "commas", _punct(",")),
    ("periods", "full stops", _punct(".")),
    ("sentence_ends", "sentence ends (. ! ?)", _punct(".!?")),
    ("colons", "colons and semicolons", _punct(":;")),
    ("open_brackets", "opening brackets", _punct("([{")),
    ("close_brackets", "closing brackets", _punct(")]}")),
    ("quotes", "quotation marks", lambda t: bool(core(t).strip()) and all(c in QUOTES for c in core(t).strip())),
    ("dashes", "hyphens and dashes", _punct("-–—")),
    ("punctuation", "punctuation", lambda t: bool(t.strip()) and not any(c.isalnum() for c in t)),
    ("newlines", "line breaks", lambda t: "\n" in t),
    ("word_pieces", "pieces inside a word", lambda t: t[:1].isalpha() and t[:1].islower()),
    ("function_words", "function words", lambda t: _word(t) in (ARTICLES | PREPOSITIONS | PRONOUNS | CONJUNCTIONS
                                                                   | AUXILIARIES | RELATIVES)),
]
PHRASE = {k: p for k, p, _ in CATEGORIES}

# context rules over positions: (key, phrase); the masks come from context_masks
CONTEXTS = [("line_start", "at the start of a line"), ("sentence_start", "at the start of a sentence"),
            ("in_parens", "inside parentheses"), ("in_quotes", "inside quotation marks"),
            ("quote_start", "at the start of a quotation")]
CONTEXT_PHRASE = dict(CONTEXTS)


def category_table(strings: list[str]) -> Bool[np.ndarray, "category unique"]:
    """[n categories, n strings] bool: which category each token text belongs to."""
    return np.array([[bool(pred(s)) for s in strings] for _, _, pred in CATEGORIES], dtype=bool).reshape(
        len(CATEGORIES), len(strings))


def context_masks(strings: list[str], inv: Int[np.ndarray, "window pos"]) -> Bool[np.ndarray, "context window pos"]:
    """[n contexts, W, L] bool for windows of tokens (``inv``: [W, L] indices into ``strings``): each
    position's context rules, judged from the tokens before it in its window."""
    s = np.array([core(x).strip() for x in strings], dtype=object)
    has = lambda f: np.array([f(x) for x in s], dtype=bool)[inv]  # noqa: E731 - a local shorthand
    newline = np.array(["\n" in x for x in strings], dtype=bool)[inv]
    ends = has(lambda x: bool(x) and all(c in ".!?" for c in x))
    opens, closes = has(lambda x: x in ("(", "[")), has(lambda x: x in (")", "]"))
    straight = has(lambda x: x == '"' or x.endswith('"') and not x[:-1].strip('"'))
    cu_open, cu_close = has(lambda x: bool(x) and x[-1] in OPEN_QUOTES), has(lambda x: bool(x) and x[0] in
                                                                          CLOSE_QUOTES)

    def before(m: np.ndarray) -> np.ndarray:  # whether the previous token has m
        out = np.zeros_like(m)
        out[:, 1:] = m[:, :-1]
        return out

    def depth(o: np.ndarray, c: np.ndarray) -> np.ndarray:  # open minus closed before each position
        d = np.cumsum(o.astype(np.int32) - c.astype(np.int32), axis=1)
        return np.concatenate([np.zeros((d.shape[0], 1), np.int32), d[:, :-1]], axis=1)

    line = before(newline)
    sentence = line | before(ends)
    parens = depth(opens, closes) > 0
    n_straight = np.concatenate([np.zeros((inv.shape[0], 1), np.int32), np.cumsum(straight, 1)[:, :-1]], 1)
    quotes = (n_straight % 2 == 1) | (depth(cu_open, cu_close) > 0)
    quote_start = before(cu_open | (straight & (n_straight % 2 == 0)))
    return np.stack([line, sentence, parens, quotes, quote_start])


def show_token(tok: str) -> str:
    """A token as a reader sees it in an explanation: its text without the leading space, in quotes;
    whitespace named."""
    if "\n" in tok:
        return "⏎"
    if not tok.strip():
        return "␣"
    word = core(tok).strip()
    if not any(c.isprintable() for c in word):  # a zero-width or control character would read as “”
        word = word.encode("unicode_escape").decode("ascii")
    return f"“{word}”"
