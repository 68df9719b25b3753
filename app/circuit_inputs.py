"""Where the Circuits page's prompts come from: one prompt with its counterfactual, a prompt file, or
(toy models) the model's own task."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app.prompt_source import pick_rows
from circuits.tools.patching import swap_names  # noqa: F401 - the pages' one swap (IOI names)
from core.errors import PromptError

DEFAULT = {
    "circ_prompt": "When Mary and John went to the store, John gave a drink to",
    "circ_target": " Mary",
    "circ_foil": " John",
    "circ_corrupt": "When Alice and Bob went to the store, Bob gave a drink to",
}
SINGLE, FILE = "one prompt", "prompt file"


FOLLOWED = ("target", "foil", "corrupt")  # the fields a new prompt fills unless the user typed them


def on_typed(key: str) -> None:
    """on_change of target, foil and counterfactual: the user's value is kept when the prompt changes."""
    st.session_state.setdefault("_typed_fields", set()).add(key)
    C.remember(key)()


def mark_typed(keys: list[str]) -> None:
    """Fields a link filled count as typed (they are the view's arguments)."""
    st.session_state.setdefault("_typed_fields", set()).update(
        k for k in keys if k.rsplit("_", 1)[-1] in FOLLOWED)


def suggested(loaded: Any, prompt: str) -> dict[str, str] | None:
    """Target, foil and counterfactual for a prompt from the model's own prediction, as the Attribution page
    fills them: target its top next token, foil its runner-up (a token of the prompt shaped like the target
    when there is one: the other name of an IOI prompt), counterfactual the prompt with the two names swapped
    when both occur in it and the swap keeps the token count (the IOI builder), else none. None after a message
    (a prompt the model cannot read: longer than its context, ...)."""
    import re

    from app import attr_inputs as AI
    from app import readouts as R
    from app import shared as SH

    ppass = SH.shared(("prompt_pass", loaded.name, prompt),
                      lambda: C.attempt("Cannot read the prompt", R.prompt_pass, loaded, prompt))
    if ppass is None or not ppass.tokens:
        return None
    target, foil = AI.suggestions(ppass, len(ppass.tokens) - 1)
    corrupt = ""
    names = [t.strip() for t in (target, foil)]
    if all(n and re.search(rf"\b{re.escape(n)}\b", prompt) for n in names) and names[0] != names[1]:
        try:
            swapped = swap_names(prompt, target, foil)
            if len(loaded.model.to_str_tokens(swapped)) == len(ppass.tokens):
                corrupt = swapped
        except Exception:  # noqa: BLE001 - no counterfactual is a fine answer: mean ablation needs none
            corrupt = ""
    return {"target": target, "foil": foil, "corrupt": corrupt}


def follow(loaded: Any, prompt: str, prefix: str, roles: tuple[str, ...] = FOLLOWED) -> dict[str, str] | None:
    """A new prompt (typed, not the first one of the session) fills ``{prefix}_target``, ``_foil`` (and
    ``_corrupt``) from the model's prediction, except a target or foil the user typed; a counterfactual written
    for the old prompt never survives a new one. Call before those widgets are drawn. Returns what it filled
    (None when nothing changed)."""
    s = st.session_state
    sig = (loaded.name, prompt)
    before = s.get(f"_{prefix}_suggested_for")
    s[f"_{prefix}_suggested_for"] = sig
    if before is None or before == sig or not prompt.strip():
        return None  # the session's first prompt keeps its fields (the IOI example, or a link's)
    typed = s.setdefault("_typed_fields", set())
    typed.discard(f"{prefix}_corrupt")
    if before[1] == prompt:
        return None  # another model on the same prompt: the fields still name its tokens
    got = suggested(loaded, prompt)
    if got is None:
        return None
    filled = {}
    for role in roles:
        key = f"{prefix}_{role}"
        if key not in typed:
            s[key] = s[f"_keep_{key}"] = filled[role] = got[role]
    return filled


def followed_caption(filled: dict[str, str] | None) -> None:
    """Say which fields a new prompt filled."""
    if not filled:
        return
    said = [f"{role} {C.quoted(filled[role])}" for role in ("target", "foil") if filled.get(role)]
    if "corrupt" in filled:
        said.append("counterfactual with the names swapped" if filled["corrupt"]
                    else "no counterfactual (mean ablation)")
    st.caption("Filled from the model's prediction on this prompt: " + ", ".join(said) + ".")


def _swap_clicked() -> None:
    s = st.session_state
    try:
        s["circ_corrupt"] = s["_keep_circ_corrupt"] = swap_names(s["circ_prompt"], s["circ_target"], s["circ_foil"])
    except PromptError as exc:
        s["_circ_swap_error"] = str(exc)


def single_prompt(loaded: Any) -> list[dict[str, Any]] | None:
    for key, value in DEFAULT.items():
        C.keep(key, value)
    prompt = st.text_area("Prompt", key="circ_prompt", on_change=C.remember("circ_prompt"), height=70)
    filled = follow(loaded, prompt, "circ")
    c1, c2 = st.columns(2)
    target = c1.text_input("Target token", key="circ_target", on_change=on_typed, args=("circ_target",),
                           help="One token of the model, leading space included. A new prompt fills it with the "
                                "model's top prediction unless you typed one.")
    foil = c2.text_input("Foil token (optional)", key="circ_foil", on_change=on_typed, args=("circ_foil",),
                         help="The metric is then logit(target) - logit(foil). A new prompt fills it with the "
                              "model's runner-up unless you typed one.")
    c3, c4 = st.columns([5, 1])
    corrupt = c3.text_area("Counterfactual (same number of tokens; empty for none)", key="circ_corrupt",
                           on_change=on_typed, args=("circ_corrupt",), height=70,
                           help="The reference run for 'corrupt' ablation: the prompt with what matters changed. "
                                "A new prompt builds it by swapping target and foil names where both occur, "
                                "else leaves it empty (mean or zero ablation).")
    c4.button("swap names", key="circ_swap", on_click=_swap_clicked,
              help="Build the counterfactual by exchanging the target and foil names in the prompt.")
    if st.session_state.get("_circ_swap_error"):
        st.error(C.esc(st.session_state.pop("_circ_swap_error")))
    followed_caption(filled)
    if not prompt.strip():
        st.warning("The prompt is empty: type a prompt for the model to continue.")
        return None
    if not target:
        st.warning("Give a target token (empty it and retype the prompt to take the model's prediction).")
        return None
    row: dict[str, Any] = {"prompt": prompt, "target": target}
    if foil:
        row["foil"] = foil
    if corrupt.strip():
        row["corrupt"] = corrupt
    return [row]


def file_prompts() -> tuple[str, list[dict[str, Any]]] | None:
    limit = int(st.number_input("First N prompts", 1, 10_000, 20, key="circ_limit"))
    picked = pick_rows(limit, key="circ")
    if picked is None:
        return None
    name, rows = picked
    label = "Counterfactuals: swap each row's target and foil names" + (
        " (instead of the file's)" if any(r.get("corrupt") for r in rows) else "")
    if all(r.get("foil") for r in rows) and st.checkbox(label, key="circ_file_swap"):
        try:
            rows = [dict(r, corrupt=swap_names(r["prompt"], r["target"], r["foil"])) for r in rows]
        except PromptError as exc:
            st.error(f"Cannot swap names: {C.esc(exc)}")
            return None
    return name, rows


def pick_prompts(loaded: Any) -> tuple[str, list[dict[str, Any]]] | None:
    """(source name, rows) for the page, or None after a message in the page."""
    if getattr(loaded.model, "kind", None) == "toy" or (getattr(loaded.model, "info", None) or {}).get("task"):
        n = int(st.number_input("Prompts from the model's task (test split)", 1, 2000, 32, key="circ_toy_n"))
        from circuits.toy.prompts import task_rows

        rows = C.attempt("No prompts for this model", task_rows, loaded.model, n)
        if not rows:
            return None
        first = " ".join(loaded.model.decode([i]) for i in rows[0]["prompt"])
        st.caption(f"{len(rows)} prompts of the {C.esc(loaded.model.info['task']['task'])} task, e.g. "
                   f"{C.quoted(first)} -> {C.quoted(loaded.model.decode([rows[0]['target']]))}")
        return f"task:{loaded.model.info['task']['task']}", rows
    C.keep("circ_source", SINGLE)
    source = st.radio("Prompts", [SINGLE, FILE], key="circ_source", horizontal=True,
                      on_change=C.remember("circ_source"))
    if source == FILE:
        return file_prompts()
    rows = single_prompt(loaded)
    return ("prompt", rows) if rows else None
