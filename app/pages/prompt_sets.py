"""Prompt sets: one attribution method over a JSONL prompt file (``workbench attribute-set`` in the browser)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import share as S
from app.prompt_source import pick_rows


def show(res: Any) -> None:
    m1, m2, m3 = st.columns(3)
    m1.metric("prompts", len(res.results))
    m2.metric("attribution time", f"{res.seconds:.2f} s")
    m3.metric("per prompt", f"{res.seconds_per_prompt:.3f} s",
              help=f"{res.method} ran {res.batch_size} prompt(s) per pass")
    st.plotly_chart(res.plot(), key="sets_mean")
    table = res.table()
    st.dataframe(table, hide_index=True)
    labels = [f"{i}: {p}" for i, p in enumerate(table["prompt"])]
    pick = st.selectbox("Look at one prompt", range(len(labels)), format_func=lambda i: labels[i], key="sets_pick")
    st.plotly_chart(res.results[pick].plot(), key="sets_one")
    C.save_button(lambda: res, key="sets_save")


st.title("Prompt sets")
st.caption("One method over a whole prompt file: each prompt's top items, their mean, and the time it took.")
engine = C.engine("attribution.prompt_set", "prompt-set attribution")
if engine is None:
    st.stop()
from attribution.methods import METHODS  # noqa: E402

loaded = C.sidebar_model(("llm", "toy"), key="sets_model", default="smollm2-135m")

c1, c2, c3 = st.columns([1, 1, 1])
method = c1.selectbox("Method", list(METHODS), key="sets_method",
                      help="; ".join(f"{m}: {s.help}" for m, s in METHODS.items()))
level = c2.selectbox("Level", list(METHODS[method].levels), key="sets_level")
limit = int(c3.number_input("First N prompts", min_value=1, max_value=10_000, value=20, key="sets_limit"))
c4, c5 = st.columns(2)
use_foil = c4.checkbox("Explain target minus foil (when a row has one)", value=True, key="sets_foil")
batch = int(c5.number_input("DPA prompts per pass", min_value=1, max_value=256, value=16, key="sets_batch",
                            disabled=method != "dpa"))
picked = pick_rows(limit, key="sets")
if picked is None:
    st.stop()
name, rows = picked
sig = (loaded.name, name, method, level, limit, use_foil, batch)
if st.button(f"Attribute {len(rows)} prompts with {method} at {level} level", key="sets_go"):
    with C.Progress(f"{method} · {level} · {len(rows)} prompts", len(rows)) as prog, loaded.lock:

        def advance(n: int) -> None:
            for _ in range(n):
                prog.step(f"{prog.done + 1} of {len(rows)} prompts")

        res = prog.attempt("Attribution failed", engine.attribute_set, loaded.model, rows, method=method, level=level,
                        use_foil=use_foil, batch_size=batch, on_step=advance)
    if res is not None:
        st.session_state["_sets_result"] = (sig, res)
held = st.session_state.get("_sets_result")
if held and held[0] == sig:
    show(held[1])
    S.share("sets", loaded.name,
            ["r = " + S.call("wb.attribute_set", S.M, f"data/prompts/{name}" if not name.endswith("upload") else name,
                             method=method, level=level, use_foil=use_foil, batch_size=batch, limit=limit),
             "r.table()"], {"method": method, "level": level})
else:
    st.caption(f"{len(rows)} prompts from {name}; press the button to attribute them.")
