"""Information flow: the routes to a prediction by token and layer (IFR per position, as the LLM Transparency Tool
draws them), from circuits.flow."""

from __future__ import annotations

import streamlit as st

from app import common as C
from app import shared as SH
from app import views as V
from app.flow_view import (
    caption,
    clicked_edge,
    clicked_node,
    edge_head_rows,
    head_rows,
    incoming_rows,
    lens_rows,
)

st.title("Information flow by token")
st.caption("Where the prediction's information came from, token by token (Ferrando and Voita's information flow "
           "routes; the LLM Transparency Tool's graph). Positions run across, layers up. Blue edges carry "
           "information between positions through attention, grey ones keep it in the residual stream at one "
           "position, orange ones pass through that position's MLP. An edge's width is its share of the sum it "
           "enters (L1 proximity), a node's size its share of the prediction. Only nodes reachable from the "
           "chosen position's prediction along edges above the threshold are drawn. Click a node for its top "
           "tokens by the logit lens and its heads, or the dot in the middle of an attention edge for each head's "
           "share of it.")
loaded = C.sidebar_model(("llm", "toy"), key="flow_model", default="smollm2-135m")
model = loaded.model
C.seed_from_query({"prompt": "flow_prompt"})
C.keep("flow_prompt", "When Mary and John went to the store, John gave a drink to")
C.keep("flow_threshold", 0.04)
c1, c2 = st.columns([4, 1])
prompt = c1.text_input("Prompt", key="flow_prompt", on_change=C.remember("flow_prompt"))
threshold = float(c2.number_input("Threshold", min_value=0.0, max_value=1.0, step=0.01, format="%.2f",
                                  key="flow_threshold", on_change=C.remember("flow_threshold"),
                                  help="Keep edges whose share of the sum they enter is above this."))
if not prompt.strip():
    st.warning("The prompt is empty: type at least one token.")
    st.stop()
from circuits.flow import flow  # noqa: E402


def _flow():
    with loaded.lock:
        return C.attempt("Information flow failed", flow, model, prompt)


res = SH.shared(("flow", loaded.name, prompt), _flow)  # one per server for these inputs
if res is None:
    st.stop()
labels = V.token_labels(res.tokens)
if st.session_state.get("flow_position") not in labels:  # a new prompt: the last position, as the tool starts
    st.session_state["flow_position"] = labels[-1]
position = labels.index(st.sidebar.selectbox("Prediction at position", labels, key="flow_position",
                                             help="The routes lead to this position's next-token prediction."))
graph = C.attempt("Pruning failed", res.graph, threshold, position)
if graph is None:
    st.stop()
ids = [n.id for n in graph.nodes]
top = f"M{res.n_layers - 1}@{position}"
if st.session_state.get("flow_node") not in ids:
    st.session_state["flow_node"] = top
event = st.plotly_chart(res.plot(threshold, position, selected=st.session_state["flow_node"]), key="flow_graph",
                        on_select="rerun", selection_mode="points", width="content")
event = st.session_state.get("flow_graph", event)  # the chart's selection (what a test sets, too)
picked = clicked_node(event, set(ids))
edge = clicked_edge(event, graph)
if edge is not None:  # an attention edge's middle: its target node, with the edge's heads
    picked = edge[1]
    st.session_state["flow_edge"] = edge
if picked is not None and picked != st.session_state.get("_flow_last_click"):
    st.session_state["_flow_last_click"] = picked  # a click moves the node picker below, once
    st.session_state["flow_node"] = picked
    if edge is None:
        st.session_state.pop("flow_edge", None)
    st.rerun()
st.caption(caption(res, graph))
node = st.selectbox("Node", ids, key="flow_node", help="Click a node in the graph, or pick it here. E@p: the "
                    "embedding at position p; A5@p: after layer 5's attention; F5@p: layer 5's MLP; M5@p: after "
                    "layer 5.")
info = C.attempt("Reading the node failed", res.describe, node)
if info is not None:
    st.subheader(C.esc(info["what"][:1].upper() + info["what"][1:]))
    left, right = st.columns(2)
    with left:
        st.markdown("**Top tokens by the logit lens**")
        st.dataframe(lens_rows(info), hide_index=True, key="flow_lens")
        shares = {k: info[k] for k in ("residual share", "mlp share") if k in info}
        if shares:
            st.caption(" · ".join(f"{k}: {v:.3f}" for k, v in shares.items()))
    with right:
        shown = st.session_state.get("flow_edge")
        if shown and shown[1] == node and any((e.source, e.target) == tuple(shown) for e in graph.edges):
            st.markdown(f"**Edge {C.esc(shown[0])} → {C.esc(shown[1])}: each head's share**")
            st.dataframe(edge_head_rows(res, *shown), hide_index=True, key="flow_edge_heads")
        if info.get("heads"):
            st.markdown("**Heads: share of this sum** (all keys)")
            st.dataframe(head_rows(info), hide_index=True, key="flow_heads")
        rows = incoming_rows(res, graph, node)
        if rows:
            st.markdown("**Kept edges into this node**")
            st.dataframe(rows, hide_index=True, key="flow_in")
C.save_button(lambda: res.at(threshold, position), key="flow_save")
