"""Black-box recovery: recover every attention head of a layer from its input-output answers alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from app import common as C
from app import share as S
from app import views as V

SWEEP = [1e-10, 1e-8, 1e-6, 1e-4]


def heatmaps(tensors: dict[str, Any]) -> None:
    """Recovered vs true W_h, one row per head, matched by the engine's permutation."""
    import plotly.graph_objects as go

    W = tensors.get("W")
    if W is None:
        return
    true = tensors.get("W_true")
    for h in range(int(W.shape[0])):
        cols = st.columns(2 if true is not None else 1)
        items = [("recovered", W[h])] + (
            [("true", true[h])] if true is not None and h < true.shape[0] else []
        )
        for col, (tag, mat) in zip(cols, items, strict=False):
            fig = go.Figure(go.Heatmap(z=mat.float().numpy(), colorscale=V.RDBU, zmid=0))
            fig.update_layout(
                title=f"{tag} W_{h}",
                height=300,
                margin={"l": 10, "r": 10, "t": 40, "b": 10},
                yaxis={"autorange": "reversed", "dtick": 1},  # matrix layout, whole-number ticks
                xaxis={"dtick": 1},
            )
            col.plotly_chart(fig, key=f"bb_{tag}_{h}")


def sci(frame: Any) -> dict[str, Any]:
    """Scientific notation for every float column (errors such as 4e-13 would print as 0.000...0004)."""
    return {c: st.column_config.NumberColumn(c, format="%.3e") for c in frame.columns
            if str(frame[c].dtype).startswith("float")}


def show(out: dict[str, Any], draft: Any) -> None:
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("queries used", out["queries"])
    c2.metric("formula 4Md²−2M+1", out["expected_queries"])
    c3.metric("heads recovered", f"{out['heads_recovered']} / {out.get('heads_true') or out['heads']}")
    err = out.get("max_rel_error_W")
    c4.metric("max rel. error of W", "—" if err is None else f"{err:.2e}")
    st.caption(
        f"{out['seconds']:.2f} s · longest query {out['max_query_length']} tokens · "
        f"precision {out.get('precision_digits')} digits"
    )
    if "heads" in draft.tables:
        st.dataframe(draft.tables["heads"], hide_index=True, column_config=sci(draft.tables["heads"]))
    heatmaps(draft.tensors)
    for name, fig in draft.figures.items():
        st.plotly_chart(fig, key=f"bb_fig_{name}")
    if "noise_sweep" in draft.tables:
        sw = draft.tables["noise_sweep"]
        failed = int((~np.isfinite(sw["rel_error_W"].astype(float))).sum())
        if failed:
            st.warning(f"{failed} noise level(s) failed (error infinite): marked with a red x on the top edge "
                       "of the plot and named in the outcome column.")
        st.dataframe(sw, hide_index=True, column_config=sci(sw))
    C.save_button(lambda: draft, key="bb_save")


st.title("Black-box recovery")
st.caption(
    "Query a multi-head attention layer as a black box and recover its heads "
    "(W_h = W_K W_Qᵀ and the value read-out) by rational interpolation."
)
mod = C.engine("attribution.blackbox.run", "black-box recovery")
if mod is None:
    st.stop()

C.seed_from_query({"d": "bb_d", "heads": "bb_heads", "bound": "bb_bound", "noise": "bb_noise", "seed": "bb_seed"},
                  {"bb_d": int, "bb_heads": int, "bb_bound": int, "bb_noise": float, "bb_seed": int})
for _key, _default in (("bb_d", 3), ("bb_heads", 2), ("bb_bound", 0), ("bb_noise", 0.0), ("bb_seed", 0)):
    C.keep(_key, _default)  # defaults through session state, so a link's values are not overridden
with st.form("bb_form"):
    c1, c2, c3, c4 = st.columns(4)
    d = c1.number_input("d (model width)", 1, 16, key="bb_d")
    heads = c2.number_input("H (heads)", 1, 8, key="bb_heads")
    bound = c3.number_input("bound on H (0 = exactly H)", 0, 16, key="bb_bound")
    noise = c4.number_input("noise s", 0.0, 1.0, format="%.1e", key="bb_noise")
    c5, c6 = st.columns(2)
    seed = c5.number_input("seed", 0, 10_000, key="bb_seed")
    sweep = c6.checkbox("also sweep error vs noise", value=False, key="bb_sweep")
    go_ = st.form_submit_button("Recover heads")

args = {
    "d": int(d),
    "heads": int(heads),
    "bound": int(bound) or None,
    "noise": float(noise),
    "seed": int(seed),
    "sweep": SWEEP if sweep else None,
}
sig = tuple(sorted((k, str(v)) for k, v in args.items()))
if go_:
    with C.Progress(f"Recovering {heads} heads of width {d}", 1) as prog:
        outcome = prog.attempt("Recovery failed", mod.run, **args)
        prog.step("done")
    if outcome is not None:
        st.session_state["bb_result"] = (sig, outcome)
held = st.session_state.get("bb_result")
if held and held[0] == sig:
    show(*held[1])
    S.share("bb", None, [f"out, draft = {S.call('run', **{k: v for k, v in args.items()})}", "draft.figures"],
            {"d": args["d"], "heads": args["heads"], "bound": args["bound"], "noise": args["noise"],
             "seed": args["seed"]}, imports=("from attribution.blackbox.run import run",))
elif not go_:
    st.info("Choose d, H, the bound and the noise, then press *Recover heads*.")

with st.expander("Open a saved recovery run"):
    run = C.run_picker("recover-heads", key="bb_open")
    if run is not None:
        r = run.result()
        st.json(
            {
                k: r.get(k)
                for k in (
                    "d",
                    "heads",
                    "queries",
                    "expected_queries",
                    "heads_recovered",
                    "max_rel_error_W",
                    "noise",
                    "seconds",
                )
            }
        )
        heatmaps(C.attempt("Cannot read tensors", run.tensors) or {})
