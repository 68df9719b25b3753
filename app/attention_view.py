"""The Attribution page's attention patterns (wb.attention's AttentionResult) and coloured tokens (a token
attribution as coloured text, AttributionResult.colored_tokens).

Widgets are keyed ``attn_layer``, ``attn_head`` (``all heads`` draws the layer's grid) and ``attn_skip0``;
charts ``attn_fig``; the coloured tokens sit in an ``st.html`` block each (escaped text, no script).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import views as V

ALL_HEADS = "all heads"
CACHE_SIZE = 4  # attention results per session: [layer, head, pos, pos] floats each


def attention(loaded: Any, prompt: str) -> Any:
    """The prompt's AttentionResult, memoised in this session."""
    from attribution.attention import attention as _attention

    cache = st.session_state.setdefault("_attn_cache", {})
    key = (loaded.name, prompt)
    if key not in cache:
        with loaded.lock:
            cache[key] = _attention(loaded.model, prompt)
        while len(cache) > CACHE_SIZE:
            cache.pop(next(iter(cache)))
    return cache[key]


def show_attention(loaded: Any, prompt: str, start: tuple[int, int] | None = None) -> None:
    """A layer picker and a head picker (or every head of the layer as a grid), tokens on both axes."""
    res = C.attempt("Cannot read the attention patterns", attention, loaded, prompt)
    if res is None:
        return
    n_layers, n_heads = len(res.layers), res.n_heads
    if start is not None and "attn_layer" not in st.session_state:  # open at the head the page looked at
        st.session_state["attn_layer"], st.session_state["attn_head"] = start[0], start[1]
    if st.session_state.get("attn_layer", 0) not in res.layers:
        st.session_state["attn_layer"] = res.layers[0]
    if st.session_state.get("attn_head", ALL_HEADS) not in (ALL_HEADS, *range(n_heads)):
        st.session_state["attn_head"] = ALL_HEADS
    c1, c2, c3 = st.columns([1, 1, 2])
    layer = c1.selectbox("Layer", res.layers, key="attn_layer")
    head = c2.selectbox("Head", [ALL_HEADS, *range(n_heads)], key="attn_head")
    skip = V.first_token_toggle("attn_skip0", c3)
    if head == ALL_HEADS:
        fig = res.select([layer]).plot(layer=layer, skip_first=skip)
        st.caption(f"L{layer}'s {n_heads} heads: query down, key across (hover a cell). Pick a head for one "
                   f"large; {n_layers} layers in all.")
    else:
        fig = res.plot(layer=layer, head=int(head), skip_first=skip)
    st.plotly_chart(fig, key="attn_fig")


def show_colored_tokens(results: dict[str, Any], skip_first: bool) -> None:
    """Each method's token scores as coloured text (blue raises, red lowers; hover a token for its score)."""
    for method, res in results.items():
        try:
            st.html(res.html(skip_first=skip_first))
        except Exception as exc:  # a result that cannot draw itself must not take the page with it
            C.error(f"{method}: cannot colour the tokens", exc)
