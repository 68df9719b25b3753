"""Clean/corrupted activation patching of an LLM (circuits.tools.patching.patch) from the Attribution page.

The corrupted prompt is typed in or built by swapping the target and foil names (IOI style); the sites are
the residual stream, attention and MLP outputs (per layer and position) or each head's output. Widgets are
keyed ``{key}_corrupt``, ``{key}_site``, ``{key}_go``, ``{key}_skip0``; the figure ``{key}_fig``.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import share as S
from app import views as V

PER_POSITION = ("resid", "attn", "mlp")


def _swap(key: str, prompt: str, target: str, foil: str | None) -> None:
    from circuits.tools.patching import swap_names
    from core.errors import PromptError

    try:
        value = swap_names(prompt, target, foil or "")
        st.session_state[f"{key}_corrupt"] = st.session_state[f"_keep_{key}_corrupt"] = value
    except PromptError as exc:
        st.session_state[f"_{key}_swap_error"] = str(exc)


def forwards(model: Any, n_tokens: int, site: str) -> int:
    """Forward passes the scan runs (each starts at its layer, so a layer scan costs about half as much)."""
    from circuits.tools.patching import MAX_ROWS

    layers = model.arch.n_layers
    if site in PER_POSITION:
        return layers * -(-n_tokens // MAX_ROWS)
    return layers + 2


def effect_figure(res: Any, skip_first: bool):
    """The normalized effect as a heatmap (layers up the y axis), colour scaled symmetrically around 0."""
    import numpy as np
    import plotly.graph_objects as go

    z = res.effect.detach().float().cpu().numpy()
    if z.ndim == 1:
        z = z[:, None]
    x = res.labels.get(res.axes[-1]) if z.shape[1] > 1 else ["all positions"]
    y = res.labels.get("layer") or [str(i) for i in range(z.shape[0])]
    per_position = res.axes[-1] == "position"
    lim = V.scale_limit(z, skip_first and per_position, axis=1)
    fig = go.Figure(go.Heatmap(
        z=np.clip(z, -lim, lim), x=x, y=y, customdata=z, colorscale=V.RDBU, zmid=0, zmin=-lim, zmax=lim,
        colorbar={"title": "effect"},
        hovertemplate="layer %{y} · %{x}<br>effect %{customdata:.3f}<extra></extra>"))
    fig.update_layout(
        title=f"Patching {res.site}: (clean − patched) / (clean − corrupted) of the logit difference",
        xaxis={"title": res.axes[-1] if z.shape[1] > 1 else "", **V.all_ticks(list(x))},
        yaxis={"title": "layer", "autorange": "reversed", "dtick": 1},
        height=max(360, 16 * z.shape[0] + 160), margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def show_patching(loaded: Any, prompt: str, target: str, foil: str | None, key: str = "attr_patch",
                  position: int | None = None) -> None:
    """The patching tab: corrupted prompt, site, cost, run with progress, heatmap, save, code. ``position``
    is the scored position (None: the last)."""
    from circuits.tools.patching import SITES, patch

    C.seed_from_query({"corrupt": f"{key}_corrupt", "site": f"{key}_site"})
    C.keep(f"{key}_corrupt", "")
    c1, c2 = st.columns([5, 1])
    corrupted = c1.text_input(
        "Corrupted prompt (same number of tokens)", key=f"{key}_corrupt", on_change=C.remember(f"{key}_corrupt"),
        help="The run whose activations are written into the clean run, one site at a time.")
    c2.button("swap names", key=f"{key}_swap", on_click=_swap, args=(key, prompt, target, foil),
              help="Build the corrupted prompt by exchanging the target and foil names (IOI style: "
                   "' Mary' <-> ' John').")
    if st.session_state.get(f"_{key}_swap_error"):
        st.error(C.esc(st.session_state.pop(f"_{key}_swap_error")))
    C.keep(f"{key}_site", "resid")
    if st.session_state[f"{key}_site"] not in SITES or st.session_state[f"{key}_site"] == "mlps":
        st.session_state[f"{key}_site"] = "resid"
    sites = [s for s in SITES if s != "mlps"]
    site = st.radio("Sites", sites, key=f"{key}_site", horizontal=True, on_change=C.remember(f"{key}_site"),
                    format_func=lambda s: {"resid": "residual stream", "attn": "attention output",
                                           "mlp": "MLP output", "heads": "heads' outputs"}[s],
                    help="; ".join(f"{k}: {v}" for k, v in SITES.items() if k != "mlps"))
    if not corrupted.strip():
        st.caption("Type a corrupted prompt (or press *swap names*) to patch it into the clean run.")
        return
    try:
        n_tokens = len(loaded.model.to_str_tokens(loaded.model.to_tokens(prompt)))
    except Exception as exc:  # the page has shown the prompt's own error already
        C.error("Bad prompt", exc)
        return
    sig = (loaded.name, prompt, corrupted, target, foil, site, position)
    pos = -1 if position is None else position
    n_fwd = forwards(loaded.model, n_tokens, site)
    if st.button(f"Patch {site} ({n_fwd} forward passes)", key=f"{key}_go", type="primary"):
        with C.Progress(f"Patching {site}", n_fwd) as prog:

            def step(done: int, total: int) -> None:
                prog.total = max(total, 1)
                prog.step(f"{done} of {total} forward passes")

            with loaded.lock:
                res = prog.attempt("Patching failed", patch, loaded.model, prompt, corrupted, target, foil,
                                   site=site, pos=pos, on_step=step)
        if res is not None:
            st.session_state[f"_{key}_result"] = (sig, res, prog.seconds)
    held = st.session_state.get(f"_{key}_result")
    if not held or held[0] != sig:
        return
    res, seconds = held[1], held[2]
    m1, m2, m3 = st.columns(3)
    m1.metric("clean logit diff", f"{res.clean:+.3f}")
    m2.metric("corrupted logit diff", f"{res.corrupted:+.3f}")
    m3.metric("time", f"{seconds:.1f} s")
    skip = V.first_token_toggle(f"{key}_skip0") if res.axes[-1] == "position" else False
    st.plotly_chart(effect_figure(res, skip), key=f"{key}_fig")
    st.caption("1 = patching this site alone turns the clean logit difference into the corrupted one; "
               "0 = no effect; negative = it moves the other way.")
    C.save_button(lambda: _draft(loaded.name, prompt, corrupted, target, foil, site, res, seconds),
                  key=f"{key}_save")
    call = S.call("wb.patch", S.M, prompt, corrupted, target=target, foil=foil, site=site,
                  pos=None if position is None else position)
    S.share(f"{key}", loaded.name, [f"r = {call}", "r.plot()"],
            {"prompt": prompt, "target": target, "foil": foil, "corrupt": corrupted, "site": site,
             "position": position})


def _draft(model: str, prompt: str, corrupted: str, target: str, foil: str | None, site: str, res: Any,
           seconds: float):
    from core.store import RunDraft

    return RunDraft(kind="patch", model=model, method=f"patch-{site}",
                    args={"prompt": prompt, "corrupted": corrupted, "target": target, "foil": foil, "site": site},
                    timings={"patch": seconds}, result=res.to_json(), tensors={"effect": res.effect.float()},
                    tables={"effect": res.table()}, figures={"effect": effect_figure(res, False)})
