"""SAE features: the features of a dictionary (or the neurons of an MLP layer) on a prompt, per position,
a dashboard per feature (stored beside the dictionary), search, and steering or ablating a feature.

Deep link: ``?sae=<dictionary name or directory>&feature=<id>`` opens a dashboard directly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from app import common as C
from app import shared as SH
from app import views as V

NEURONS, OTHER = "MLP neurons", "other directory…"
SCORE_HELP = ("How well the explanation predicts the feature: the correlation of its simulated activations (the "
              "rule's mean activation where it fires, 0 elsewhere) with the true ones on held-out text it was not "
              "chosen on, over the feature's top and random windows (Neuronpedia's simulation score). 1 = exact.")
IOI = "When Mary and John went to the store, John gave a drink to"
QUICK_TOKENS = 4096  # dashboards computed in the page when none are stored
VIEWS = ("Features on a prompt", "Dashboard", "Search")
RELATIVE_HELP = (
    "Later positions can be sinks too (in smollm2-135m the first ' the' of a prompt has a residual norm as "
    "large as position 0's), and the features of such massive activations have activations in the tens. "
    "Dividing by each feature's max over held-out text ranks features by how strongly they fire for them. "
    "'Informative' then halves a feature's weight where its explanation does not predict it and where the "
    "explanation only lists tokens (a token list mostly repeats the token the row sits on; a category or a "
    "context generalises), so features a reader learns from come first (on the IOI prompt, the name feature)."
)
RANKS = {"informative (activation ÷ max, explained, not token lists)": "informative",
         "activation ÷ the feature's held-out max": "relative", "activation": "activation"}
SINK_HELP = (
    "Position 0 is the attention sink: its residual norm is about 100x the others', and no dictionary "
    "here is trained on it, so its feature activations are huge and meaningless and would hide every "
    "other position. Left out by default; show it to see for yourself."
)


@st.cache_data(show_spinner=False, ttl=30)
def sidebar_name(name: str, model: str | None) -> str:
    """A dictionary's name with what tells it apart first ("L12-resid-topk2304 · smollm2-135m"): the sidebar's
    box cuts the end of a long name, and every shipped name starts with its model's."""
    if model and name.startswith(f"{model}-") and len(name) > len(model) + 1:
        return f"{name[len(model) + 1:]} · {model}"
    return name


def shipped() -> list[dict[str, Any]]:
    from attribution.sae.explore import summaries

    return summaries()


@st.cache_resource(show_spinner=False, max_entries=12)
def dictionary(path: str, _stamp: float) -> Any:
    from attribution.sae.units import open_dictionary

    return open_dictionary(path)


@st.cache_resource(show_spinner=False, max_entries=12)
def stored_dashboards(directory: str, _stamp: float) -> Any:
    from attribution.sae.dashboard import Dashboards

    return Dashboards.load(directory)


@st.cache_resource(show_spinner=False, max_entries=4)
def quick_dashboards(key: str, _loaded: Any, _source: Any) -> Any:
    """Dashboards built in the page on a few thousand held-out tokens (nothing stored)."""
    from attribution.sae.dashboard import build_dashboards

    with _loaded.lock:
        return build_dashboards(_loaded.model, [_source], n_tokens=QUICK_TOKENS)[0]


@st.cache_data(show_spinner=False, max_entries=16)
def _digest(path: str, _stamp: float) -> str | None:
    from attribution.sae.explore import weights_digest

    return weights_digest(path)


def stale(source: Any, db: Any) -> bool:
    """Whether the dictionary's weights changed since its dashboards were built."""
    path = Path(source.path)
    return _digest(str(path), stamp(path / "sae_weights.safetensors")) != db.meta["weights_sha256"]


def stamp(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def seed_from_link() -> None:
    """?sae=...&feature=... select the dictionary and open the feature's dashboard (again whenever the
    link changes, so a second link in the same session works too)."""
    q = st.query_params
    link = (q.get("sae"), q.get("feature"))
    if link == (None, None) or st.session_state.get("_sae_link") == link:
        return
    st.session_state["_sae_link"] = link
    names = {r["name"]: r["path"] for r in shipped()}
    if link[0]:
        if link[0] in names or link[0] in names.values():
            st.session_state["sae_source"] = next(n for n, p in names.items() if link[0] in (n, p))
        else:
            st.session_state["sae_source"], st.session_state["sae_path"] = OTHER, link[0]
    if link[1] is not None:
        st.session_state["sae_feature_text"] = str(link[1])
        st.session_state["sae_view"] = "Dashboard"


def open_feature(feature: int) -> None:
    st.session_state["sae_feature_text"] = str(int(feature))
    st.session_state["sae_view"] = "Dashboard"


def on_table_pick(key: str, features_key: str) -> None:
    """A row clicked in a feature table opens that feature's dashboard."""
    rows = st.session_state[key].selection.rows
    features = st.session_state.get(features_key) or []
    if rows and rows[0] < len(features):
        open_feature(features[rows[0]])


def on_heatmap_pick() -> None:
    """A heatmap cell clicked (its row is ``f<id> <label>``) opens that feature's dashboard. A callback: it
    runs before the page redraws, so it may switch the view radio above the chart."""
    state = st.session_state.get("sae_prompt_fig")
    try:
        points = state["selection"]["points"] if state else []
    except (KeyError, TypeError):
        return
    if points and str(points[0].get("y", "")).startswith("f"):
        try:
            open_feature(int(str(points[0]["y"]).split()[0][1:]))
        except ValueError:
            return


def feature_table(rows: list[dict[str, Any]], key: str) -> None:
    """A table of features; clicking a row opens its dashboard."""
    st.session_state[f"_{key}_features"] = [r["feature"] for r in rows]
    st.dataframe(rows, hide_index=True, key=key, on_select=lambda: on_table_pick(key, f"_{key}_features"),
                 selection_mode="single-row")


def prompt_units(loaded: Any, source: Any, prompt: str, db: Any, show_first: bool, rank: str):
    from attribution.sae.explore import prompt_features

    with loaded.lock:
        return prompt_features(loaded.model, source, prompt, db, show_first=show_first, rank=rank)


def explained_row(db: Any, r: dict[str, Any]) -> dict[str, Any]:
    """A feature table row's explanation, simulation score and automatic token label."""
    e = db.explanation(r["feature"]) if db is not None else None
    return {"explanation": e["text"] if e else r.get("label", ""), "sim score": e.get("score") if e else None,
            "tokens → top logit": r.get("label", "")}


def prompt_view(loaded: Any, source: Any, db: Any) -> None:
    import plotly.graph_objects as go

    C.keep("sae_prompt", IOI)
    prompt = st.text_input("Prompt", key="sae_prompt", on_change=C.remember("sae_prompt"))
    c1, c2 = st.columns(2)
    show_first = c1.toggle("Show position 0", key="sae_show_first", help=SINK_HELP)
    C.keep("sae_rank", next(iter(RANKS)))
    rank = RANKS[c2.selectbox("Rank by", list(RANKS), key="sae_rank", help=RELATIVE_HELP,
                              on_change=C.remember("sae_rank"))]
    if not prompt.strip():
        st.info("Type a prompt to see which features fire on each token.")
        return
    got = SH.shared(("sae_prompt", loaded.name, str(source.path), source.name, prompt, show_first, rank,
                     # one per server: a new session on this prompt draws at once
                     stamp(Path(source.path) / "sae_weights.safetensors"), db.meta.get("n_tokens"),
                     db.explanations is not None),
                    lambda: C.attempt("Cannot run the prompt", prompt_units, loaded, source, prompt, db, show_first,
                                      rank))
    if got is None:
        return
    tokens, first, score, found = got["tokens"], got["first"], got["score"], got["rows"]
    if len(tokens) <= first:
        st.info("The prompt has one token, position 0, which is left out: type a longer prompt or show it.")
        return
    feats = [r["feature"] for r in found]
    if not feats:
        st.info("No feature fires on the shown positions.")
        return
    labels = [db.describe(f, short=True, width=34) if db is not None else "" for f in feats]
    z = score[:, feats].T.numpy()
    xs = V.token_labels(tokens)[first:]
    ys = [f"f{f} {lab}" for f, lab in zip(feats, labels, strict=True)]
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, colorscale="Oranges"))
    V.clickable_cells(fig, xs, ys, [[f"{y}<br>{x}: {v:.3f}<br>click: open its dashboard" for x, v in zip(
        xs, row.tolist(), strict=True)] for y, row in zip(ys, z, strict=True)])
    title = "Strongest features per position" + {"informative": " (informative: activation ÷ held-out max, "
                                                  "weighted)", "relative": " (activation ÷ held-out max)"}.get(
                                                      rank, "")
    fig.update_layout(title=title + ("" if show_first else " (position 0 left out)"),
                      height=140 + 26 * len(feats), yaxis={"autorange": "reversed"},
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    st.plotly_chart(fig, key="sae_prompt_fig", on_select=on_heatmap_pick, selection_mode="points")
    rows = [{"feature": r["feature"], **explained_row(db, r), "activation": r["activation"],
             "÷ held-out max": r["relative"], "at": f"{r['position']}:{r['token']!r}"} for r in found]
    if db.explanations is None:
        st.caption(f"No explanations built for {C.esc(source.name)}: "
                   f"{C.code(f'workbench sae explain --sae {source.path}')} "
                   "builds them (until then features show their token labels and rank by activation ÷ max).")
    st.caption("Click a row (or a heatmap cell) to open the feature's dashboard.")
    feature_table(rows, "sae_prompt_table")
    st.markdown("**Top features at each position**")
    feature_table([{"at": f"{r['position']}:{r['token']!r}", "feature": r["feature"], **explained_row(db, r),
                    "activation": r["activation"], "÷ held-out max": r["relative"]} for r in got["per_position"]],
                  "sae_position_table")


def dashboard_view(loaded: Any | None, source: Any | None, db: Any) -> None:
    from attribution.sae.render import contexts_html

    C.keep("sae_feature_text", "0")
    text = st.text_input("Feature id", key="sae_feature_text", on_change=C.remember("sae_feature_text"))
    try:
        feature = int(str(text).strip())
    except ValueError:
        st.warning(f"{C.quoted(text)} is not a feature id: give a whole number from 0 to {db.n_units - 1}.")
        return
    if not 0 <= feature < db.n_units:
        what = "Neuron" if db.meta.get("kind") == "neurons" else "Feature"
        st.warning(f"{what} {feature} is out of range: {C.esc(db.meta['name'])} has {db.n_units} "
                   f"(valid 0..{db.n_units - 1}).")
        return
    card = db.card(feature)
    st.subheader(f"{feature}: {C.esc(card['explanation'] or card['label'])}")
    if card["explanation"] is not None:
        st.caption(f"Automatic token label: {C.esc(card['label'])}")
    c1, c2, c3, c4 = st.columns(4)
    c4.metric("simulation score", "–" if card["score"] is None else f"{card['score']:.2f}", help=SCORE_HELP)
    c1.metric("density", f"{card['density']:.5f}", help="Fraction of held-out tokens where it fires (> 0).")
    c2.metric("max activation", f"{card['max_activation']:.3f}")
    c3.metric("mean when firing", f"{card['mean_activation']:.3f}")
    if not card["contexts"]:
        st.info(f"Feature {feature} never fires on the {db.meta['n_tokens']} held-out tokens.")
    else:
        e = card["histogram"]["edges"]
        st.plotly_chart(V.bar([f"{(a + b) / 2:.3g}" for a, b in zip(e[:-1], e[1:], strict=True)],
                              card["histogram"]["counts"], "Activation histogram (tokens where it fires)"),
                        key="sae_hist")
    left, right = st.columns(2)
    if any(v for _, v in card["top_logits"]):
        left.plotly_chart(V.bar([t for t, _ in card["top_logits"]], [v for _, v in card["top_logits"]],
                                "Logits it raises (direct effect)", horizontal=True), key="sae_top_logits")
        right.plotly_chart(V.bar([t for t, _ in card["bottom_logits"]], [v for _, v in card["bottom_logits"]],
                                 "Logits it lowers", horizontal=True), key="sae_bottom_logits")
    for group in dict.fromkeys(c["group"] for c in card["contexts"]):
        st.markdown(f"**{'Top activations' if group == 'top' else group.capitalize()}**")
        st.html(contexts_html([c for c in card["contexts"] if c["group"] == group], card["max_activation"]))
    if loaded is not None and source is not None:
        steer_panel(loaded, source, feature, card)


def steer_panel(loaded: Any, source: Any, feature: int, card: dict[str, Any]) -> None:
    import html

    from attribution.sae.steer import steer

    st.markdown("**Steer or ablate**")
    C.keep("sae_steer_prompt", IOI)
    prompt = st.text_input("Prompt", key="sae_steer_prompt", on_change=C.remember("sae_steer_prompt"))
    c1, c2, c3 = st.columns(3)
    default = round(2 * card["max_activation"], 2) or 1.0
    alpha = c1.number_input("alpha (added activation)", value=float(default), step=1.0, key="sae_alpha",
                            help="Adds alpha x the decoder direction where the dictionary writes, from position 1 on.")
    target = c2.text_input("Target token", value=" Mary", key="sae_target")
    n_new = c3.number_input("Tokens", 1, 60, 20, key="sae_new")
    b1, b2 = st.columns(2)
    action = "steer" if b1.button("Steer", key="sae_steer") else ("ablate" if b2.button("Ablate", key="sae_ablate")
                                                                     else None)
    if action and prompt.strip():
        kw = {"alpha": float(alpha)} if action == "steer" else {"value": 0.0}
        with loaded.lock:
            st.session_state["_sae_steer"] = C.attempt(
                "Steering failed", steer, loaded.model, source, feature, prompt, target=target or None,
                n_new=int(n_new), **kw)
    res = st.session_state.get("_sae_steer")
    if res is None or res.feature != feature or res.dictionary != source.name:
        return
    left, right = st.columns(2)
    for col, title, text in ((left, "unsteered", res.clean_text), (right, f"{res.mode} {res.strength:+g}",
                                                                    res.steered_text)):
        col.caption(title)
        col.html(f'<div style="white-space:pre-wrap"><b>{html.escape(res.prompt)}</b>{html.escape(text)}</div>')
    if res.target is not None:
        m1, m2 = st.columns(2)
        m1.metric(f"p({C.quoted(res.target)})", f"{res.target_prob_steered:.4f}", f"{res.prob_change:+.4f}")
        m2.metric(f"logit({C.quoted(res.target)})", f"{res.target_logit_steered:.3f}", f"{res.logit_change:+.3f}")


def search_view(db: Any) -> None:
    from attribution.sae.explore import find_features

    by = st.radio("Search by", ["exact token", "label text", "feature id"], key="sae_search_by", horizontal=True)
    query = st.text_input("Query", key="sae_query", placeholder=' John  (leading space included)')
    if not query:
        st.caption("Exact token: features that fire on it in the held-out text (max activation over its "
                   "occurrences). Label text: a substring of the explanations or the automatic token labels.")
        return
    if by == "feature id":
        if not query.strip().isdigit():
            st.warning(f"{C.quoted(query)} is not a feature id.")
            return
        rows = C.attempt("Cannot open the feature", find_features, db, feature=int(query.strip()))
    elif by == "exact token":
        rows = C.attempt("No features", find_features, db, token=query)
    else:
        rows = find_features(db, label=query)
    if rows is not None:
        st.caption(f"{len(rows)} features")
        feature_table(rows, "sae_search_table")


# -- the page ------------------------------------------------------------------------------------------
st.title("SAE features")
st.caption("Dictionary features (SAEs, transcoders) and MLP neurons: where they fire on a prompt, their "
           "dashboards over held-out text, search, steering and ablation.")
if C.engine("attribution.sae.dashboard", "SAE") is None:
    st.stop()
rows = C.attempt("Cannot list the dictionaries", shipped) or []
by_name = {r["name"]: r for r in rows}
seed_from_link()
options = list(by_name) + [NEURONS, OTHER]
C.keep("sae_source", options[0])
if st.session_state["sae_source"] not in options:
    st.session_state["sae_source"] = options[0]
with st.sidebar:
    choice = st.selectbox("Dictionary", options, key="sae_source", on_change=C.remember("sae_source"),
                          format_func=lambda n: sidebar_name(n, by_name.get(n, {}).get("model")))
    if choice in by_name:  # the whole name, wrapped: the box cuts a long one
        st.caption(C.code(choice))
    model_name, spec = None, None
    if choice == NEURONS:
        model_name = C.model_picker(("llm", "toy"), key="sae_model", default="smollm2-135m")
        C.keep("sae_layer", 12)
        layer = st.number_input("Layer", 0, 200, key="sae_layer", on_change=C.remember("sae_layer"))
        spec = f"neurons:{int(layer)}"
    elif choice == OTHER:
        C.keep("sae_path", "")
        spec = st.text_input("Dictionary directory (cfg.json + sae_weights.safetensors)", key="sae_path",
                             on_change=C.remember("sae_path")) or None
    else:
        spec = by_name[choice]["path"]
if not spec:
    st.info("Give a dictionary directory in the sidebar." if rows else
            "No dictionary in data/saes yet: give a dictionary directory in the sidebar, or pick MLP neurons.")
    st.stop()

source = None
if choice != NEURONS:
    source = C.attempt("Cannot load the dictionary", dictionary, spec, stamp(Path(spec) / "cfg.json"))
    if source is None:
        st.stop()
    model_name = source.model
loaded = C.get_model(model_name)
if loaded is None:
    st.stop()
if choice == NEURONS:
    from attribution.sae.units import neuron_dictionary  # noqa: E402

    source = C.attempt("Cannot use the neurons", neuron_dictionary, loaded.model, int(layer), model_name)
    if source is None:
        st.stop()
from attribution.sae.units import check_model_fits  # noqa: E402


def fits(source: Any, model: Any) -> bool:
    check_model_fits(source, model)
    return True


if not C.attempt("The dictionary does not fit the model", fits, source, loaded.model):
    st.stop()
directory = Path(source.path)
db = None
if (directory / "dashboards.safetensors").exists():
    db = C.attempt("Cannot open the stored dashboards", stored_dashboards, str(directory),
                   stamp(directory / "dashboards.safetensors"))
if db is None:
    with st.spinner(f"No stored dashboards: computing them on {QUICK_TOKENS} held-out tokens…"):
        db = C.attempt("Cannot compute the dashboards", quick_dashboards, f"{source.name}:{stamp(directory)}",
                       loaded, source)
    if db is None:
        st.stop()
    st.caption(f"Dashboards computed here on {db.meta['n_tokens']} held-out tokens (not stored); "
               f"{C.code(f'workbench sae dashboards --sae {spec}')} stores the full set.")
if db.meta.get("weights_sha256") and C.attempt("Cannot check the dashboards", stale, source, db):
    st.warning(f"These dashboards were built before {C.esc(source.name)}'s current weights: rebuild them with "
               f"{C.code(f'workbench sae dashboards --sae {spec}')}.")
st.caption(f"{C.code(source.name)} · {C.esc(source.kind)} · model {C.code(source.model)} · reads "
           f"{C.code(source.hook)} · writes {C.code(source.hook_out)} · {db.n_units} units · dashboards on "
           f"{C.esc(db.meta['n_tokens'])} held-out tokens")

C.keep("sae_view", VIEWS[0])
view = st.radio("View", VIEWS, key="sae_view", horizontal=True, label_visibility="collapsed",
                on_change=C.remember("sae_view"))
if view == VIEWS[0]:
    prompt_view(loaded, source, db)
elif view == VIEWS[1]:
    dashboard_view(loaded, source, db)
else:
    search_view(db)
