"""The Attribution page's head drill-down: the layer x head grid (click a square), the chosen head's
attention (every token labelled, hover names query, key and weight) and what it writes to the logits.

The chosen head starts at the top-scoring head (largest |score|) of each new result; widgets are keyed
``attr_layer``, ``attr_head``, ``attr_head_skip0``; charts ``attr_head_grid``, ``attr_pattern``,
``attr_promoted``.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from app import common as C
from app import readouts as R
from app import views as V


def top_head(head_scores: Any) -> tuple[int, int]:
    """(layer, head) with the largest |score| (head scores summed over query positions when per query)."""
    s = head_scores.detach().float().cpu()
    if s.dim() == 3:
        s = s.sum(-1)
    flat = int(s.abs().flatten().argmax())
    return flat // s.shape[1], flat % s.shape[1]


def _follow_grid_click() -> None:
    grid_state = st.session_state.get("attr_head_grid")
    points = (grid_state or {}).get("selection", {}).get("points", []) if grid_state else []
    if points:
        picked = (int(round(points[0]["y"])), int(round(points[0]["x"])))
        if st.session_state.get("_attr_grid_seen") != picked:  # a new click moves the boxes
            st.session_state["_attr_grid_seen"] = picked
            st.session_state["attr_layer"], st.session_state["attr_head"] = picked


def show_head(loaded: Any, prompt: str, target: str, foil: str | None, head_scores: Any, sig: Any,
              position: int = -1, times: dict[str, float] | None = None) -> None:
    """Layer x head grid; clicking a square (or the two boxes) shows that head's pattern and logit write."""
    n_layers, n_heads = int(head_scores.shape[0]), int(head_scores.shape[1])
    if st.session_state.get("_attr_head_default_for") != sig:  # a new result: start at its top head
        st.session_state["_attr_head_default_for"] = sig
        st.session_state["attr_layer"], st.session_state["attr_head"] = top_head(head_scores)
    _follow_grid_click()
    for key, upper in (("attr_layer", n_layers), ("attr_head", n_heads)):
        if st.session_state.get(key, 0) >= upper:
            st.session_state[key] = 0
    left, right = st.columns([3, 2])
    with right:
        c1, c2 = st.columns(2)
        layer = c1.selectbox("Layer", list(range(n_layers)), key="attr_layer")
        head = c2.selectbox("Head", list(range(n_heads)), key="attr_head")
        best = top_head(head_scores)
        st.caption(f"Top-scoring head: L{best[0]}H{best[1]} (largest |score|); click a square to change.")
    with left:
        st.plotly_chart(V.head_grid(head_scores, selected=(layer, head)), key="attr_head_grid",
                        on_select="rerun", selection_mode="points")
    started = time.perf_counter()
    held = st.session_state.get("_attr_pass")
    held = held[1].held if held and held[0] == (loaded.name, prompt) else None
    hv = C.attempt("Cannot read the head", R.head_view, loaded, prompt, layer, head, target, foil, held=held,
                   position=position)
    if times is not None:
        times["head view"] = time.perf_counter() - started
    if hv is None:
        return
    with right:
        st.metric(f"L{layer}H{head} direct logit effect", f"{hv.logit_effect:+.3f}",
                  help="The head's write at the explained position, through the final norm, onto "
                       "W_U[target] (minus W_U[foil]).")
        words, anything = st.columns(2)
        words.dataframe(_frame(hv.promoted_words, "whole word"), hide_index=True, key="attr_promoted_words")
        anything.dataframe(_frame(hv.promoted, "any token"), hide_index=True, key="attr_promoted_any")
        st.caption(f"Tokens L{layer}H{head} pushes up most at the explained position: whole words "
                   "(a leading space and letters) and any token, sub-word pieces included.")
    skip = V.first_token_toggle("attr_head_skip0")
    st.plotly_chart(V.pattern_heatmap(hv.pattern, hv.tokens, f"L{layer}H{head} attention pattern (hover a cell)",
                                      skip_first=skip), key="attr_pattern")


def _frame(items: list[tuple[str, float]], label: str):
    import pandas as pd

    return pd.DataFrame({label: [repr(t) for t, _ in items], "logit push": [round(v, 3) for _, v in items]})
