"""The Attribution page's inputs: the prompt's one forward pass, the explained position (a token strip:
click a token), and target and foil that follow the prompt and position until the user types one.

Session keys: ``attr_target``, ``attr_foil``, ``attr_position`` (widgets); ``_attr_pass`` (the latest
prompt's PromptPass), ``_attr_typed`` (the boxes the user typed in), ``_attr_suggested_for``.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import readouts as R
from app import shared as SH


def prompt_pass(loaded: Any, prompt: str) -> Any | None:
    """The prompt's PromptPass (top predictions per position, heads' patterns), one per prompt."""
    sig = (loaded.name, prompt)
    held = st.session_state.get("_attr_pass")
    if not held or held[0] != sig:
        got = SH.shared(("prompt_pass", *sig), lambda: C.attempt("Cannot read the prompt", R.prompt_pass, loaded,
                                                                  prompt))
        if got is None:
            return None
        held = (sig, got)
        st.session_state["_attr_pass"] = held  # only the latest prompt: it can be a few MB
    return held[1]


def on_typed(key: str) -> None:
    """on_change of the target and foil boxes: the user's value is kept when the prompt changes."""
    typed = st.session_state.setdefault("_attr_typed", set())
    typed.add(key)
    C.remember(key)()


def mark_typed(keys: list[str]) -> None:
    """A link's target and foil count as typed (they are the view's arguments)."""
    typed = st.session_state.setdefault("_attr_typed", set())
    typed.update(k for k in keys if k in ("attr_target", "attr_foil"))


def suggestions(ppass: Any, position: int) -> tuple[str, str]:
    """(target, foil) for a position: the prompt's own next token there (the model's top prediction at the
    last position), and as foil the model's most likely other token that occurs in the prompt and is shaped
    like the target (on an IOI prompt the other name, ' John', not a filler such as ' the'), else the most
    likely one shaped like it, else its most likely other token."""
    tops = ppass.tops[position] if ppass.tops else ppass.top
    last = position == len(ppass.tokens) - 1 or not ppass.tokens
    target = tops[0][0] if last else ppass.tokens[position + 1]
    seen = set(ppass.tokens[: position + 1])
    others = [t for t, _ in tops if t != target]
    if not others:
        return target, ""

    def shape(t: str) -> tuple[bool, bool, bool]:  # leading space, capitalised, a word
        w = t.strip()
        return t[:1].isspace(), w[:1].isupper(), w.isalpha()

    # the first of: a token of the prompt shaped like the target (' John' for ' Mary'), a token shaped like
    # it (' London' for ' Paris'), the model's best other token; each in the model's order
    rank = {t: (not (t in seen and shape(t) == shape(target)), shape(t) != shape(target)) for t in others}
    return target, min(others, key=lambda t: rank[t])


def follow(loaded: Any, prompt: str, ppass: Any, position: int) -> None:
    """Fill target and foil from the suggestions for a new prompt or position, except a box the user
    typed in (an emptied target box follows again; an emptied foil box stays empty: no foil). A typed foil
    survives a new prompt, but not a new position of the same prompt unless the target was typed too."""
    sig = (loaded.name, prompt, position)
    typed = st.session_state.setdefault("_attr_typed", set())
    if not st.session_state.get("attr_target"):
        typed.discard("attr_target")
    before = st.session_state.get("_attr_suggested_for")
    if before != sig:
        st.session_state["_attr_suggested_for"] = sig
        if before is not None and before[:2] == sig[:2] and "attr_target" not in typed:
            # another position of the same prompt: the target follows it, so the foil typed against the old
            # target follows too (' gave' against ' John' explains nothing)
            typed.discard("attr_foil")
        target, foil = suggestions(ppass, position)
        for key, value in (("attr_target", target), ("attr_foil", foil)):
            if key not in typed:
                st.session_state[key] = st.session_state[f"_keep_{key}"] = value
    C.keep("attr_target", ppass.top[0][0])
    C.keep("attr_foil", "")


SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def token_label(tok: str, position: int) -> str:
    """A token as a pill: spaces and newlines made visible, markdown characters escaped, its position as a
    subscript (repeated tokens such as the two ' John's stay apart)."""
    shown = tok.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"
    shown = "".join("\\" + ch if ch in "\\`*_{}[]()#+-.!|<>~$" else ch for ch in shown)
    return shown + str(position).translate(SUBSCRIPT)


def position_strip(tokens: list[str], prompt_sig: Any) -> int:
    """Click a token to explain the prediction made there (the next token); the last one by default.

    A new prompt moves the choice to its last token unless the user picked an earlier position that still
    exists."""
    n = len(tokens)
    key = "attr_position"
    held = st.session_state.get("_attr_position_for")
    value = st.session_state.get(key)
    if not isinstance(value, int) or not 0 <= value < n or (held != prompt_sig and value == held_last()):
        st.session_state[key] = n - 1
    st.session_state["_attr_position_for"] = prompt_sig
    st.session_state["_attr_position_last"] = n - 1
    picked = st.pills(
        "Explain the prediction made at (click a token)", list(range(n)), key=key, required=True,
        format_func=lambda i: token_label(tokens[i], i),
        help="Attribution explains the model's next-token prediction at the chosen token; the last token "
             "(the prompt's continuation) by default. Before the last, the default target is the prompt's "
             "own next token.")
    return int(picked if picked is not None else n - 1)


def held_last() -> int | None:
    return st.session_state.get("_attr_position_last")


def leading_space_hint(model: Any, key: str, role: str) -> None:
    """Warn when a target or foil has no leading space but the spaced word is one token of the model
    (inside a sentence the model predicts " Mary", not "Mary"), and offer the spaced one."""
    value = st.session_state.get(key) or ""
    if not value or value[0].isspace() or getattr(model, "kind", "llm") == "toy":
        return
    spaced = " " + value
    try:
        model.token_id(spaced, role)
    except Exception:  # noqa: BLE001 - the spaced form is no single token: nothing to offer
        return
    c1, c2 = st.columns([4, 1])
    c1.warning(f"The {role} {C.quoted(value)} has no leading space: after a word the model predicts "
               f"{C.quoted(spaced)}, "
               "a different token.")
    c2.button(f"Use {C.quoted(spaced)}", key=f"{key}_spaced", on_click=_use, args=(key, spaced))


def _use(key: str, value: str) -> None:
    st.session_state[key] = st.session_state[f"_keep_{key}"] = value
    st.session_state.setdefault("_attr_typed", set()).add(key)
