"""SAE features: search, a dashboard per feature, and the features active on a prompt."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import streamlit as st

from app import common as C
from app import views as V

SAES = Path(__file__).resolve().parents[2] / "data" / "saes"
CACHE_TOKENS = 8192


@st.cache_resource(show_spinner=False, max_entries=4)
def load_sae(path: str) -> Any:
    from attribution.sae.train import load_sae as _load

    return _load(path)


@st.cache_resource(show_spinner=False, max_entries=4)
def activation_cache(path: str, hook: str, n_tokens: int, _loaded: Any) -> Any:
    """The SAE's own cache if it ships one, else one built once per server from the model's texts."""
    from attribution.sae.cache import ActivationCache, cache_activations, model_texts

    for where in (Path(path) / "cache", Path(path)):
        if (where / "acts.safetensors").exists():
            return ActivationCache.load(where)
    with _loaded.lock:
        texts = model_texts(_loaded.model, None, n_tokens, 64)
        return cache_activations(_loaded.model, hook, texts, n_tokens, ctx=64)


@st.cache_resource(show_spinner=False, max_entries=4)
def logit_index(path: str, _loaded: Any, _sae: Any, k: int = 10) -> dict[int, list[str]]:
    """Top logit tokens of every feature (for search), computed once per server in chunks."""
    from attribution.sae.dashboard import logit_effects

    out = {}
    n = int(_sae.cfg.d_sae)
    with _loaded.lock:
        for start in range(0, n, 256):
            feats = list(range(start, min(n, start + 256)))
            for f, (top, _) in logit_effects(_loaded.model, _sae, feats, k).items():
                out[f] = [t for t, _ in top]
    return out


def highlight(ctx: dict[str, Any]) -> str:
    """A context as HTML: each token shaded by the feature's activation on it."""
    peak = max(max(ctx["acts"], default=0.0), 1e-9)
    spans = []
    for i, (tok, a) in enumerate(zip(ctx["tokens"], ctx["acts"], strict=False)):
        alpha = max(0.0, min(1.0, a / peak))
        border = "border-bottom:2px solid #c0392b;" if i == ctx["position"] else ""
        spans.append(
            f'<span style="background:rgba(230,126,34,{alpha:.2f});{border}" title="{a:.3f}">'
            f"{html.escape(tok)}</span>"
        )
    return "".join(spans)


def show_card(card: Any, dash: Any) -> None:
    c1, c2, c3 = st.columns(3)
    c1.metric("density", f"{card.density:.4f}")
    c2.metric("max activation", f"{card.max_activation:.3f}")
    c3.metric("mean when firing", f"{card.mean_activation:.3f}")
    if not card.histogram["counts"]:
        st.info(f"Feature {card.feature} never fires on the cached tokens.")
    else:
        st.plotly_chart(dash.plot(card.feature), key="sae_hist")
    left, right = st.columns(2)
    if card.top_logits:
        left.plotly_chart(
            V.bar(
                [t for t, _ in card.top_logits],
                [v for _, v in card.top_logits],
                "Logits it raises",
                horizontal=True,
            ),
            key="sae_top_logits",
        )
        right.plotly_chart(
            V.bar(
                [t for t, _ in card.bottom_logits],
                [v for _, v in card.bottom_logits],
                "Logits it lowers",
                horizontal=True,
            ),
            key="sae_bottom_logits",
        )
    for quantile in dict.fromkeys(c["quantile"] for c in card.contexts):
        st.markdown(f"**{quantile}**")
        for ctx in [c for c in card.contexts if c["quantile"] == quantile]:
            st.markdown(f"`{ctx['activation']:.2f}` " + highlight(ctx), unsafe_allow_html=True)


def _draft(dash: Any):
    from workbench.store import RunDraft

    return RunDraft(
        kind="sae-dashboard",
        model=dash.model,
        method=dash.sae,
        args={"hook": dash.hook},
        result=dash.to_json(),
        tables={"features": dash.table()},
        figures={"histogram": dash.plot()},
    )


def prompt_features(loaded: Any, sae: Any, hook: str, prompt: str):
    import torch

    from attribution.sae.dashboard import feature_acts

    model = loaded.model
    tokens = model.to_tokens(prompt)
    with loaded.lock, torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=[hook])
    acts = cache[hook][0]
    if acts.dim() > 2:
        acts = acts.flatten(1)
    return model.to_str_tokens(tokens), feature_acts(sae, acts)  # [pos, feature]


st.title("SAE features")
st.caption("Sparse-autoencoder features: what fires them, what they write to the logits, where they fire.")
if C.engine("attribution.sae.dashboard", "SAE") is None:
    st.stop()
shipped = sorted(str(p) for p in SAES.glob("*") if (p / "cfg.json").exists()) if SAES.is_dir() else []
C.seed_from_query({"sae": "sae_path"})
C.keep("sae_path", shipped[0] if shipped else "")
options = shipped + ["other directory…"]
with st.sidebar:
    pick = st.selectbox(
        "SAE",
        options,
        key="sae_pick",
        format_func=lambda p: Path(p).name if p in shipped else p,
        index=options.index(st.session_state["sae_path"])
        if st.session_state["sae_path"] in shipped
        else len(options) - 1,
    )
    if pick == "other directory…":
        path = st.text_input(
            "SAE directory (cfg.json + sae_weights.safetensors)",
            key="sae_path",
            on_change=C.remember("sae_path"),
        )
    else:
        path = pick
if not path:
    st.info("No SAE shipped in data/saes yet: give an SAE directory in the sidebar.")
    st.stop()
from attribution.sae.train import sae_info  # noqa: E402

sae = C.attempt("Cannot load the SAE", load_sae, path)
if sae is None:
    st.stop()
info = sae_info(path)
hook = info.get("hook") or getattr(getattr(sae.cfg, "metadata", None), "hook_name", None)
model_name = info.get("model") or getattr(getattr(sae.cfg, "metadata", None), "model_name", None)
st.caption(f"`{Path(path).name}` · model `{model_name}` · hook `{hook}` · {int(sae.cfg.d_sae)} features")
loaded = C.get_model(model_name)
if loaded is None or not hook:
    st.stop()

tab_prompt, tab_dash, tab_search = st.tabs(["Features on a prompt", "Feature dashboard", "Search"])
with tab_prompt:
    C.keep("sae_prompt", "")
    prompt = st.text_input(
        "Prompt",
        key="sae_prompt",
        on_change=C.remember("sae_prompt"),
        placeholder="type a prompt for the model",
    )
    if not prompt.strip():
        st.info("Type a prompt to see which features fire on each token.")
    else:
        got = C.attempt("Cannot run the prompt", prompt_features, loaded, sae, hook, prompt)
        if got is not None:
            tokens, fa = got
            top = fa.max(0).values.topk(min(12, fa.shape[1]))
            feats = [int(i) for i in top.indices]
            import plotly.graph_objects as go

            fig = go.Figure(
                go.Heatmap(
                    z=fa[:, feats].T.numpy(),
                    x=V.token_labels(tokens),
                    y=[f"f{f}" for f in feats],
                    colorscale="Oranges",
                )
            )
            fig.update_layout(
                title="Strongest features on this prompt",
                height=120 + 24 * len(feats),
                yaxis={"autorange": "reversed"},
                margin={"l": 10, "r": 10, "t": 50, "b": 10},
            )
            st.plotly_chart(fig, key="sae_prompt_fig")
            st.dataframe(
                [{"feature": f, "max activation": float(v)} for f, v in zip(feats, top.values, strict=True)],
                hide_index=True,
            )
with tab_dash:
    feature = st.number_input("Feature", 0, int(sae.cfg.d_sae) - 1, 0, key="sae_feature")
    cache = C.attempt(
        "Cannot build the activation cache", lambda: activation_cache(path, hook, CACHE_TOKENS, loaded)
    )
    if cache is not None:
        from attribution.sae.dashboard import build_dashboard

        with loaded.lock:
            dash = C.attempt(
                "Cannot build the dashboard",
                build_dashboard,
                loaded.model,
                sae,
                cache,
                features=[int(feature)],
                sae_name=Path(path).name,
            )
        if dash is not None:
            show_card(dash.features[0], dash)
            C.save_button(lambda: _draft(dash), key="sae_save")
with tab_search:
    query = st.text_input("Find features whose top logits contain", key="sae_query", placeholder=" Paris")
    if query:
        index = C.attempt("Cannot index the features", logit_index, path, loaded, sae)
        if index is not None:
            hits = [
                {"feature": f, "top logits": " ".join(repr(t) for t in toks[:6])}
                for f, toks in index.items()
                if any(query.strip().lower() in t.strip().lower() for t in toks)
            ]
            st.caption(f"{len(hits)} features")
            st.dataframe(hits[:200], hide_index=True)
