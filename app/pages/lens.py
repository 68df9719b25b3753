"""Lens: the residual stream at every layer and position read as next-token predictions (logit or tuned lens)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import views as V


def tuned_available(model: Any) -> str | None:
    """None when the model has a shipped tuned lens, else why not (one line)."""
    from attribution.lens.tuned import TunedLens

    try:
        TunedLens.for_model(model)
        return None
    except C.WorkbenchError as exc:
        return str(exc)


def selected_cell(event: Any, res: Any) -> tuple[int, int] | None:
    """(layer row, position) of the heat-map cell the user clicked, if any."""
    try:
        points = event.selection.points if event is not None else []
    except AttributeError:
        return None
    if not points:
        return None
    x, y = points[0].get("x"), points[0].get("y")
    labels = V.token_labels(res.tokens)
    if x in labels and y in res.layers:
        return res.layers.index(y), labels.index(x)
    return None


def grid(res: Any, skip_first: bool):
    """The layers x positions map: colour = the top token's probability, text = the top token."""
    import plotly.graph_objects as go

    xs = V.token_labels(res.tokens)
    probs = res.topk_probs[..., 0].numpy()
    hover = [[f"{res.layers[l]} · {xs[p]}<br>" + "<br>".join(
        f"{t!r} {q:.3f}" for t, q in zip(res.topk_tokens[l][p], res.topk_probs[l, p].tolist(), strict=True))
        for p in range(len(xs))] for l in range(len(res.layers))]
    text = [[repr(t)[1:-1][:8] for t in row] for row in res.top_tokens]
    fig = go.Figure(go.Heatmap(z=probs.tolist(), x=xs, y=res.layers, text=text, texttemplate="%{text}",
                               customdata=hover, hovertemplate="%{customdata}<extra></extra>", colorscale="Blues",
                               zmin=0, zmax=V.scale_limit(probs, skip_first), colorbar={"title": "p(top)"}))
    fig.update_xaxes(title="position (the prediction made there)", **V.all_ticks(xs))
    fig.update_yaxes(title="layer (embed, then after each block)", **V.all_ticks(res.layers))
    fig.update_layout(height=max(320, 20 * len(res.layers) + 140), margin={"t": 30},
                      title=f"{res.kind} lens: top token and its probability")
    return fig


st.title("Lens")
st.caption("Each layer's residual stream read through the final norm and unembedding (logit lens), or through "
           "a learned per-layer affine translator first (tuned lens, Belrose et al. 2023). Click a cell for its "
           "top-k list.")
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
        st.warning(f"{why}. Showing nothing for the tuned lens; switch to the logit lens.")
        st.stop()
from attribution.lens import lens  # noqa: E402

res = C.attempt("Lens failed", lens, model, prompt, kind=kind, target=target or None, top_k=top_k)
if res is None:
    st.stop()

event = st.plotly_chart(grid(res, skip_first), key="lens_grid", on_select="rerun", selection_mode="points",
                        use_container_width=True)
cell = selected_cell(event, res)
if cell is None:
    cell = (len(res.layers) - 1, len(res.tokens) - 1)
    st.caption("Showing the last layer at the last position; click any cell of the map for its own list.")
layer, pos = cell
left, right = st.columns(2)
with left:
    st.subheader(f"Top {top_k} at {res.layers[layer]}, position {pos} ({res.tokens[pos]!r})")
    st.dataframe([{"rank": i + 1, "token": repr(c["token"]), "probability": c["prob"]}
                  for i, c in enumerate(res.cell(layer, pos))], hide_index=True, key="lens_cell")
with right:
    if res.target is not None:
        st.subheader(f"Target {res.target!r} per layer (position {res.position})")
        st.plotly_chart(res.plot_target(), key="lens_target_chart", use_container_width=True)
        st.dataframe([{"layer": name, "rank": int(r), "probability": float(p)} for name, r, p in zip(
            res.layers, res.target_rank.tolist(), res.target_prob.tolist(), strict=True)], hide_index=True,
            key="lens_target_table")
    else:
        st.caption("Give a target to follow its rank and probability through the layers.")
C.save_button(lambda: res, key="lens_save")
