"""Direct logit attribution on the Attribution page (attribution.dla): what each layer's attention and MLP,
and each head, write onto the target-minus-foil direction at the explained position, and the logit
difference read from the accumulated residual stream after each step (TransformerLens' decompose_resid /
accumulated_resid style). Charts keyed ``attr_dla_layers``, ``attr_dla_heads``, ``attr_dla_acc``."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import share as S
from app import shared as SH
from app import views as V


def compute(loaded: Any, prompt: str, target: str, foil: str | None, position: int | None) -> Any | None:
    """The DLAResult for these arguments, one per session (a single forward with a cache)."""
    from attribution.dla import direct_logit_attribution

    sig = (loaded.name, prompt, target, foil, position)
    held = st.session_state.get("_attr_dla")
    if not held or held[0] != sig:
        def run() -> Any:
            with loaded.lock:
                return C.attempt("Direct logit attribution failed", direct_logit_attribution, loaded.model, prompt,
                                 target, foil, position)

        res = SH.shared(("dla", *sig), run)  # one per server: a new session on the same prompt reuses it
        if res is None:
            return None
        held = (sig, res)
        st.session_state["_attr_dla"] = held
    return held[1]


def layer_figure(res: Any):
    """Per layer: the attention and the MLP output's direct contribution, side by side (embeddings first)."""
    import plotly.graph_objects as go

    scores = dict(zip(res.components, [float(x) for x in res.component_scores], strict=True))
    n_layers = int(res.head_scores.shape[0])
    layers = [str(layer) for layer in range(n_layers)]
    fig = go.Figure()
    embeds = [c for c in res.components if not c.startswith("L")]
    if embeds:
        fig.add_trace(go.Bar(x=embeds, y=[scores[c] for c in embeds], name="embeddings", marker_color="#7f7f7f"))
    for part, colour in (("attn", "#1f77b4"), ("mlp", "#ff7f0e")):
        ys = [scores.get(f"L{layer}.{part}") for layer in range(n_layers)]
        if any(y is not None for y in ys):
            fig.add_trace(go.Bar(x=layers, y=ys, name=part, marker_color=colour,
                                 hovertemplate=f"L%{{x}} {part}<br>%{{y:+.3f}}<extra></extra>"))
    fig.update_layout(title="Direct contribution per layer (attention and MLP outputs)", barmode="group",
                      xaxis={"title": "layer", "type": "category"}, yaxis={"title": "logit difference"},
                      height=380, margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def head_figure(res: Any):
    """[layer, head] direct contributions, symmetric colour scale, whole-number ticks."""
    import plotly.graph_objects as go

    z = res.head_scores.detach().float().cpu().numpy()
    lim = V.scale_limit(z, False)
    fig = go.Figure(go.Heatmap(z=z, colorscale=V.RDBU, zmid=0, zmin=-lim, zmax=lim, colorbar={"title": "direct"},
                               hovertemplate="L%{y}H%{x}<br>%{z:+.3f}<extra></extra>"))
    fig.update_layout(title="Direct contribution per head (without b_O)", xaxis={"title": "head", "dtick": 1},
                      yaxis={"title": "layer", "dtick": 1, "autorange": "reversed"},
                      height=max(320, 16 * z.shape[0] + 140), margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def accumulated_figure(res: Any):
    """The logit difference read out of the residual stream summed up to each point (final norm frozen)."""
    import plotly.graph_objects as go

    ys = [float(x) for x in res.accumulated_scores]
    fig = go.Figure(go.Scatter(x=list(res.accumulated), y=ys, mode="lines+markers", name="accumulated",
                               hovertemplate="%{x}<br>%{y:+.3f}<extra></extra>"))
    fig.add_hline(y=res.logit_diff, line_dash="dot", annotation_text=f"model's logit difference {res.logit_diff:+.3f}")
    fig.update_layout(title="Accumulated residual stream: the logit difference built so far",
                      xaxis={"title": "residual stream point", "type": "category"},
                      yaxis={"title": "logit difference"}, height=380, margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def show_dla(loaded: Any, prompt: str, target: str, foil: str | None, position: int | None) -> None:
    if C.engine("attribution.dla", "direct logit attribution") is None:
        return
    res = compute(loaded, prompt, target, foil, position)
    if res is None:
        return
    what = f"{res.target!r}" + (f" − {res.foil!r}" if res.foil else "")
    m1, m2, m3 = st.columns(3)
    m1.metric(f"logit {what}", f"{res.logit_diff:+.3f}", help="The model's own logit difference at the position.")
    m2.metric("sum of direct contributions", f"{float(res.component_scores.sum()):+.3f}",
              help="Every component's direct write; with the offset (final-norm and unembedding biases) it adds "
                   "up to the logit difference.")
    m3.metric("offset", f"{res.offset:+.3f}")
    st.caption(f"At position {res.position} ({C.quoted(res.tokens[res.position])}); the final norm is frozen at its "
               "cached scale, so the readout is linear in the residual stream.")
    st.plotly_chart(layer_figure(res), key="attr_dla_layers")
    c1, c2 = st.columns(2)
    c1.plotly_chart(head_figure(res), key="attr_dla_heads")
    c2.plotly_chart(accumulated_figure(res), key="attr_dla_acc")
    C.save_button(lambda: res, key="attr_dla_save")
    S.share("attr_dla", loaded.name,
            ["r = " + S.call("wb.dla", S.M, prompt, target=target, foil=foil, position=position), "r.plot()"],
            {"prompt": prompt, "target": target, "foil": foil, "position": position})
