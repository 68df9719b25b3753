"""Readable feature explanations, chosen and scored the way auto-interpretability scores them, without an LLM.

An explanation is a small rule a simulator can run (a token category or a set of tokens, optionally in a
context: "first names", "the tokens “(” and “[” inside parentheses"), rendered as English, with what the
feature promotes through the unembedding. Candidates come from the feature's dashboard (the tokens it
fires on in its top contexts and token index, the tokens before them, its top logit tokens) and from
the categories and context rules of lexicon.py.

The simulator predicts the rule's mean activation where the rule fires and 0 elsewhere; the score is the
Pearson correlation of simulated and true activations over a mix of the feature's top-activating windows
and random windows, all tokens at once (OpenAI's "Language models can explain neurons" correlation
scoring, which Neuronpedia reports). Rules are chosen on one half of fresh held-out windows (never the
dashboards' own) and the score reported is on the other half.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attribution.sae.lexicon import (
    CATEGORIES,
    CONTEXT_PHRASE,
    CONTEXTS,
    PHRASE,
    category_table,
    context_masks,
    core,
    show_token,
)

if TYPE_CHECKING:
    from jaxtyping import Bool, Float, Int, Shaped

N_TOP, N_RANDOM = 10, 10  # windows per feature in the scoring mix
SET_SIZES = (1, 2, 3, 5, 8, 13, 20)  # prefixes of the feature's own token list tried as token sets
PREV_SIZES = (1, 2, 3, 5)
SET_COST, CONTEXT_COST = 0.003, 0.01  # correlation a bigger rule must gain to be preferred (readability)
BROAD = {"capitalised", "punctuation", "word_pieces", "function_words"}  # too broad to name what is promoted
C, K = len(CATEGORIES), len(CONTEXTS)
CAT_INDEX = {k: i for i, (k, _, _) in enumerate(CATEGORIES)}
CTX_INDEX = {k: i for i, (k, _) in enumerate(CONTEXTS)}


@dataclass
class Text:
    """Token windows with what every rule needs precomputed: ``ids`` [W, L], ``inv`` [W, L] indices into
    ``uniq``/``strings``, the category table [C, U] and the global masks [2C + K, W, L] (each category,
    each category at the previous position, each context rule)."""

    ids: Int[np.ndarray, "window pos"]
    uniq: Int[np.ndarray, " unique"]
    inv: Int[np.ndarray, "window pos"]
    strings: list[str]
    table: Bool[np.ndarray, "category unique"]
    masks: Bool[np.ndarray, "rule window pos"]

    @classmethod
    def of(cls, ids: Any, text_of: dict[int, str]) -> Text:
        """``ids``: [W, L] token ids; ``text_of``: each id's text."""
        ids = np.asarray(ids, dtype=np.int64)
        uniq, inv = np.unique(ids, return_inverse=True)
        inv = inv.reshape(ids.shape)
        strings = [text_of[int(i)] for i in uniq]
        table = category_table(strings)
        cats = table[:, inv]
        masks = np.concatenate([cats, shift(cats), context_masks(strings, inv)])
        return cls(ids, uniq, inv, strings, table, masks)

    def token_mask(self, part: dict[str, Any]) -> Bool[np.ndarray, "window pos"]:
        if part["kind"] == "any":
            return np.ones(self.ids.shape, dtype=bool)
        if part["kind"] == "category":
            return self.masks[CAT_INDEX[part["key"]]]
        return np.isin(self.ids, part["ids"])

    def context_mask(self, part: dict[str, Any] | None) -> Bool[np.ndarray, "window pos"]:
        if part is None:
            return np.ones(self.ids.shape, dtype=bool)
        if part["kind"] == "after_category":
            return self.masks[C + CAT_INDEX[part["key"]]]
        if part["kind"] == "context":
            return self.masks[2 * C + CTX_INDEX[part["key"]]]
        return shift(np.isin(self.ids, part["ids"]))


def shift(m: Bool[np.ndarray, "*batch pos"]) -> Bool[np.ndarray, "*batch pos"]:
    """Whether the previous position (along the last axis) has ``m``; False at position 0."""
    out = np.zeros_like(m)
    out[..., 1:] = m[..., :-1]
    return out


def simulate(rule: dict[str, Any], text: Text) -> Float[np.ndarray, "window pos"]:
    """[W, L] simulated activations: the rule's level where it fires, 0 elsewhere."""
    m = text.token_mask(rule["token"]) & text.context_mask(rule.get("context"))
    return m * float(rule.get("level", 1.0))


def pearson(pred: Any, true: Any) -> float | None:
    """Correlation of simulated and true activations over all their tokens at once; None when the true
    activations are constant (nothing to predict), 0.0 when the prediction is."""
    p, t = np.asarray(pred, np.float64).ravel(), np.asarray(true, np.float64).ravel()
    if t.size < 2 or t.std() == 0:
        return None
    if p.std() == 0:
        return 0.0
    return float(np.clip(np.corrcoef(p, t)[0, 1], -1.0, 1.0))


def pearson_masks(masks: Shaped[np.ndarray, "rule n"], a: Float[np.ndarray, " n"]) -> Float[np.ndarray, " rule"]:
    """Correlation of each 0/1 row of ``masks`` [R, N] with ``a`` [N] (0 for a constant row)."""
    m = masks.astype(np.float32)
    p = m.mean(1)
    cov = m @ a / a.size - p * a.mean()
    sd = np.sqrt(p * (1 - p)) * a.std()
    return np.where(sd > 0, cov / np.where(sd > 0, sd, 1), 0.0)


def mix(window_max: Float[np.ndarray, " window"], order: Int[np.ndarray, " window"], n_top: int = N_TOP,
        n_random: int = N_RANDOM) -> Int[np.ndarray, " mixed"]:
    """The scoring mix of one feature: its ``n_top`` windows of largest activation (that fire), then
    ``n_random`` others in the fixed random ``order``."""
    firing = np.flatnonzero(window_max > 0)
    top = firing[np.argsort(-window_max[firing], kind="stable")][:n_top]
    rest = order[~np.isin(order, top)][:n_random]
    return np.concatenate([top, rest])


def score_rule(rule: dict[str, Any], text: Text, acts: Float[np.ndarray, "window pos"],
               order: Int[np.ndarray, " window"]) -> float | None:
    """The simulation score of ``rule`` for one feature's activations ``acts`` [W, L] on ``text``: Pearson
    correlation over its top and random windows, positions 1.. (position 0 is never scored)."""
    sel = mix(acts[:, 1:].max(1), order)
    return pearson(simulate(rule, text)[sel, 1:], acts[sel, 1:])


# -- candidates and choice --------------------------------------------------------------------------
def ranked(ids: list[int], limit: int) -> list[int]:
    return list(dict.fromkeys(ids))[:limit]


def choose(text: Text, acts: Float[np.ndarray, "window pos"], order: Int[np.ndarray, " window"], fire_ids: list[int],
           prev_ids: list[int]) -> tuple[dict[str, Any] | None, float | None]:
    """The rule that best simulates one feature on ``text`` (its activations ``acts`` [W, L]) among the
    categories, the prefixes of ``fire_ids`` (tokens it fires on, from its dashboard), the context rules,
    the prefixes of ``prev_ids`` (tokens before its top activations), and the intersections of the three
    best token-level and three best context candidates; with its correlation on ``text`` (None when the
    feature never fires there)."""
    sel = mix(acts[:, 1:].max(1), order)
    a = acts[sel, 1:].astype(np.float32).ravel()
    if a.std() == 0:
        return None, None
    g = text.masks[:, sel, 1:].reshape(text.masks.shape[0], -1)
    ids = text.ids[sel]
    # candidates: (correlation less its cost, the part, its mask, its cost)
    tok: list[tuple[float, dict[str, Any], np.ndarray, float]] = []
    ctx: list[tuple[float, dict[str, Any], np.ndarray, float]] = []
    r = pearson_masks(g, a)
    for i, (key, _, _) in enumerate(CATEGORIES):
        tok.append((r[i], {"kind": "category", "key": key}, g[i], 0.0))
        ctx.append((r[C + i] - CONTEXT_COST, {"kind": "after_category", "key": key}, g[C + i], CONTEXT_COST))
    for j, (key, _) in enumerate(CONTEXTS):
        ctx.append((r[2 * C + j] - CONTEXT_COST, {"kind": "context", "key": key}, g[2 * C + j], CONTEXT_COST))
    for sizes, source, kind, out in ((SET_SIZES, fire_ids, "tokens", tok), (PREV_SIZES, prev_ids, "after_tokens",
                                                                              ctx)):
        sizes = [k for k in sizes if k <= len(source)] or ([len(source)] if source else [])
        if not sizes:
            continue
        rank = np.full(ids.shape, 1 << 20, dtype=np.int64)
        for n, i in enumerate(source[: sizes[-1]][::-1]):
            rank[ids == i] = sizes[-1] - 1 - n
        if kind == "after_tokens":
            rank = np.concatenate([np.full((rank.shape[0], 1), 1 << 20), rank[:, :-1]], 1)
        rank = rank[:, 1:].ravel()
        ms = np.stack([rank < k for k in sizes])
        for k, rk, m in zip(sizes, pearson_masks(ms, a), ms, strict=True):
            cost = SET_COST * k + (CONTEXT_COST if kind == "after_tokens" else 0.0)
            out.append((rk - cost, {"kind": kind, "ids": [int(x) for x in source[:k]]}, m, cost))
    tok.sort(key=lambda c: -c[0])
    ctx.sort(key=lambda c: -c[0])
    best = [(s, {"token": t}) for s, t, _, _ in tok[:1]] + [(s, {"token": {"kind": "any"}, "context": c})
                                                           for s, c, _, _ in ctx[:1]]
    combos = [(t, c) for t in tok[:3] for c in ctx[:3]]
    if combos:
        ms = np.stack([t[2] & c[2] for t, c in combos])
        for (t, c), rc in zip(combos, pearson_masks(ms, a), strict=True):
            best.append((rc - t[3] - c[3], {"token": t[1], "context": c[1]}))
    rule = max(best, key=lambda b: b[0])[1]
    m = text.token_mask(rule["token"])[sel, 1:] & text.context_mask(rule.get("context"))[sel, 1:]
    rule["level"] = round(float(acts[sel, 1:][m].mean()) if m.any() else 0.0, 4)
    return rule, pearson(m, acts[sel, 1:])


# -- words -----------------------------------------------------------------------------------------
def listing(tokens: list[str], shown: int = 3, more: bool = True) -> str:
    """Tokens as a reader sees them, each once (" bit" and "bit" both read “bit”): the first ``shown``, then
    how many more."""
    words = list(dict.fromkeys(show_token(t) for t in tokens))
    extra = f" and {len(words) - shown} more" if more and len(words) > shown else ""
    return ", ".join(words[:shown]) + extra


def render(rule: dict[str, Any] | None, text_of: dict[int, str], fire_ids: list[int], promotes: str
           ) -> tuple[str, str]:
    """(long, short) English for a rule: "first names (Andrew, Thomas, John); promotes first names"."""
    if rule is None:
        return "no rule: it never fires on the explanation text", "(unexplained)"
    part = rule["token"]
    if part["kind"] == "category":
        pred = CATEGORIES[CAT_INDEX[part["key"]]][2]
        shown = ("⏎" if "\n" in text_of[i] else core(text_of[i]).strip() for i in fire_ids
                 if i in text_of and pred(text_of[i]))
        ex = [w for w in dict.fromkeys(shown) if w][:3]
        long = PHRASE[part["key"]] + (f" ({', '.join(ex)})" if ex and "(" not in PHRASE[part["key"]] else "")
        short = PHRASE[part["key"]].split(" (")[0]
    elif part["kind"] == "tokens":
        toks = [text_of.get(i, f"<{i}>") for i in part["ids"]]
        words = list(dict.fromkeys(show_token(t) for t in toks))
        long = ("the token " if len(words) == 1 else "the tokens ") + listing(toks)
        short = "/".join(words[:2]) + ("…" if len(words) > 2 else "")
    else:
        long = short = "any token"
    c = rule.get("context")
    if c is not None:
        if c["kind"] == "after_category":
            where = "right after " + PHRASE[c["key"]].split(" (")[0]
        elif c["kind"] == "context":
            where = CONTEXT_PHRASE[c["key"]]
        else:
            where = "right after " + listing([text_of.get(i, f"<{i}>") for i in c["ids"]], 2)
        long, short = f"{long} {where}", f"{short} {where}"
    if promotes:
        long += f"; promotes {promotes}"
    return long, short if len(short) <= 40 else short[:39] + "…"


def promoted(logit_strings: list[str]) -> str:
    """What a feature's top logit tokens have in common ("first names"), else its top three tokens."""
    if not logit_strings:
        return ""
    table = category_table(logit_strings)
    for i, (key, phrase, _) in enumerate(CATEGORIES):
        if key not in BROAD and table[i].sum() >= max(3, len(logit_strings) * 0.4):
            return phrase.split(" (")[0]
    return listing(logit_strings, 3, more=False)


# -- ranking features on a prompt ---------------------------------------------------------------------
UNEXPLAINED, TOKEN_LIST = 0.5, 0.5  # weights of a unit's activation (see informative_weights)


def token_list(rule: dict[str, Any] | None) -> bool:
    """Whether a rule only lists tokens, in any context (its row says little beyond the token it sits on)."""
    return bool(rule) and rule["token"]["kind"] == "tokens" and rule.get("context") is None


def informative_weights(explanations: list[dict[str, Any]], ids: Any,
                        text_of: dict[int, str]) -> Float[np.ndarray, "pos unit"]:
    """[L, F] weights that rank a prompt's units by what a reader learns from them: 1, halved where the
    unit's explanation does not predict it at that token (its activation is unaccounted for), and halved
    where the explanation only lists tokens (a category or a context generalises; a token list mostly
    repeats the token the row sits on)."""
    text = Text.of(np.asarray(ids).reshape(1, -1), text_of)
    out = np.ones((text.ids.shape[1], len(explanations)), dtype=np.float32)
    for f, e in enumerate(explanations):
        rule = e.get("rule")
        if not rule:
            continue
        fires = text.token_mask(rule["token"])[0] & text.context_mask(rule.get("context"))[0]
        out[:, f] = np.where(fires, 1.0, UNEXPLAINED) * (TOKEN_LIST if token_list(rule) else 1.0)
    return out
