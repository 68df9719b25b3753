"""Lens: the residual stream at every layer and position read as next-token predictions (logit or tuned lens)."""

from __future__ import annotations

import streamlit as st

from app import common as C
from app import shared as SH
from app import views as V
from app.lens_view import grid, selected_cell, tuned_available

st.title("Lens")
st.caption("Each layer's residual stream read through the final norm and unembedding (logit lens), or through "
           "a learned per-layer affine translator first (tuned lens, Belrose et al. 2023). Click a cell for its "
           "top-k list (below the map).")
loaded = C.sidebar_model(("llm", "toy"), key="lens_model", default="smollm2-135m")
model = loaded.model
C.seed_from_query({"prompt": "lens_prompt", "target": "lens_target", "kind": "lens_kind"})
C.keep("lens_prompt", "The capital of France is")
C.keep("lens_target", " Paris")
C.keep("lens_kind", "logit")
c1, c2, c3, c4 = st.columns([4, 2, 2, 1])
prompt = c1.text_input("Prompt", key="lens_prompt", on_change=C.remember("lens_prompt"))
target = c2.text_input("Target (optional; leading space included)", key="lens_target",
                       on_change=C.remember("lens_target"))
kind = c3.radio("Lens", ["logit", "tuned"], key="lens_kind", horizontal=True, on_change=C.remember("lens_kind"))
top_k = int(c4.number_input("Top k", min_value=1, max_value=50, value=5, key="lens_top_k"))
skip_first = V.first_token_toggle("lens_skip_first")

if not prompt.strip():
    st.warning("The prompt is empty: type at least one token.")
    st.stop()
if kind == "tuned":
    why = tuned_available(model)
    if why:
        st.warning(f"{C.esc(why)}. Showing nothing for the tuned lens; switch to the logit lens.")
        st.stop()
from attribution.lens import lens  # noqa: E402


def _lens():
    with loaded.lock:
        return C.attempt("Lens failed", lens, model, prompt, kind=kind, target=target or None, top_k=top_k)


res = SH.shared(("lens", loaded.name, prompt, kind, target, top_k), _lens)  # one per server for these inputs
if res is None:
    st.stop()

event = st.plotly_chart(grid(res, skip_first), key="lens_grid", on_select="rerun", selection_mode="points",
                        width="stretch")
labels = V.token_labels(res.tokens)
clicked = selected_cell(event, res)
if clicked is not None and clicked != st.session_state.get("_lens_last_click"):
    st.session_state["_lens_last_click"] = clicked  # a click moves the cell pickers below, once
    st.session_state["lens_layer"], st.session_state["lens_pos"] = res.layers[clicked[0]], labels[clicked[1]]
if st.session_state.get("lens_layer") not in res.layers:
    st.session_state["lens_layer"] = res.layers[-1]
if st.session_state.get("lens_pos") not in labels:
    st.session_state["lens_pos"] = labels[-1]
p1, p2 = st.columns(2)
layer = res.layers.index(p1.selectbox("Cell: layer", res.layers, key="lens_layer",
                                      help="Click a cell of the map, or pick it here."))
pos = labels.index(p2.selectbox("Cell: position", labels, key="lens_pos"))
left, right = st.columns(2)
with left:
    st.subheader(f"Top {top_k} at {C.esc(res.layers[layer])}, position {pos} ({C.quoted(res.tokens[pos])})")
    st.dataframe([{"rank": i + 1, "token": repr(c["token"]), "probability": c["prob"]}
                  for i, c in enumerate(res.cell(layer, pos))], hide_index=True, key="lens_cell")
with right:
    if res.target is not None:
        st.subheader(f"Target {C.quoted(res.target)} per layer (position {res.position})")
        from circuits.plot import log_ticks

        target_fig = res.plot_target()  # ranks as whole numbers on the log axis ("1,000", not "1.2k")
        target_fig.update_yaxes(**log_ticks(1, float(res.target_rank.max())), secondary_y=True)
        st.plotly_chart(target_fig, key="lens_target_chart", width="stretch")
        st.dataframe([{"layer": name, "rank": int(r), "probability": float(p)} for name, r, p in zip(
            res.layers, res.target_rank.tolist(), res.target_prob.tolist(), strict=True)], hide_index=True,
            key="lens_target_table")
    else:
        st.caption("Give a target to follow its rank and probability through the layers.")
C.save_button(lambda: res, key="lens_save")
