"""Where the Circuits page's prompts come from: one prompt with its counterfactual, a prompt file, or
(toy models) the model's own task."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app.prompt_source import pick_rows
from circuits.tools.patching import swap_names  # noqa: F401 - the pages' one swap (IOI names)
from workbench.errors import PromptError

DEFAULT = {
    "circ_prompt": "When Mary and John went to the store, John gave a drink to",
    "circ_target": " Mary",
    "circ_foil": " John",
    "circ_corrupt": "When Alice and Bob went to the store, Bob gave a drink to",
}
SINGLE, FILE = "one prompt", "prompt file"


def _swap_clicked() -> None:
    s = st.session_state
    try:
        s["circ_corrupt"] = s["_keep_circ_corrupt"] = swap_names(s["circ_prompt"], s["circ_target"], s["circ_foil"])
    except PromptError as exc:
        s["_circ_swap_error"] = str(exc)


def single_prompt() -> list[dict[str, Any]] | None:
    for key, value in DEFAULT.items():
        C.keep(key, value)
    prompt = st.text_area("Prompt", key="circ_prompt", on_change=C.remember("circ_prompt"), height=70)
    c1, c2 = st.columns(2)
    target = c1.text_input("Target token", key="circ_target", on_change=C.remember("circ_target"),
                           help="One token of the model, leading space included.")
    foil = c2.text_input("Foil token (optional)", key="circ_foil", on_change=C.remember("circ_foil"),
                         help="The metric is then logit(target) - logit(foil).")
    c3, c4 = st.columns([5, 1])
    corrupt = c3.text_area("Counterfactual (same number of tokens; empty for none)", key="circ_corrupt",
                           on_change=C.remember("circ_corrupt"), height=70,
                           help="The reference run for 'corrupt' ablation: the prompt with what matters changed.")
    c4.button("swap names", key="circ_swap", on_click=_swap_clicked,
              help="Build the counterfactual by exchanging the target and foil names in the prompt.")
    if st.session_state.get("_circ_swap_error"):
        st.error(C.esc(st.session_state.pop("_circ_swap_error")))
    if not prompt.strip() or not target:
        st.warning("Give a prompt and a target token.")
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
    rows = single_prompt()
    return ("prompt", rows) if rows else None
