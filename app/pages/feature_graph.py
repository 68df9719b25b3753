"""Feature graph: dictionary features at each depth -> higher features -> the logits, by feature-level DPA.

Drawn by app/feature_view.py's figure (layers by row, token positions by column, a few labelled nodes per
layer) through app/graph_view.py's one view and node inspector: a click on a node shows it (a feature: its
dashboard) beside the graph, with a link to the SAE page (``?sae=<dictionary>&feature=<id>``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from app import circuit_inputs as CI
from app import common as C
from app import feature_view as FV
from app import graph_interact as GI
from app.graph_view import LEGEND_HELP, follow_click, inspect_node, show_subgraph
from attribution.methods import FEATURE, view

DEFAULT_PROMPT = "When Mary and John went to the store, John gave a drink to"
SAE_PAGE = "pages/sae.py"


@st.cache_data(ttl=60, show_spinner=False)  # loading every dictionary on each rerun would cost seconds
def available(model_name: str) -> dict[str, bool]:
    """Paths of the dictionaries under data/saes trained on this model -> whether each is a transcoder."""
    try:
        from attribution.sae.dictionary import list_dictionaries

        return {str(d.path): d.is_transcoder for d in list_dictionaries(model=model_name)}
    except Exception:  # a damaged data folder must not end the page
        return {}


BUDGET = {"max_nodes": 100_000, "max_edges": 1_000_000}  # the engine keeps all; readable() prunes per layer


def build(loaded: Any, prompt: str, target: str | None, foil: str | None, paths: list[str], per_row: int,
          edges: int, per_layer: int, method: str = "dpa") -> Any:
    from attribution.features.placement import load_dictionaries
    from circuits.feature_graph import feature_graph

    dicts = load_dictionaries(paths)
    with loaded.lock:
        full = feature_graph(loaded.model, prompt, dicts, target=target, foil=foil, per_layer=per_layer,
                             method=method, **BUDGET)
    return FV.readable(full, per_row, edges)


def header(graph: Any) -> str:
    """The graph's first caption, truthfully: a built graph's target logit and passes; an imported one's format,
    file and counts (it has no target logit or passes of ours)."""
    counts = f"{len(graph.nodes)} nodes, {len(graph.edges)} edges"
    what = (f"{C.esc(graph.model)} · {C.quoted(graph.prompt)} → {C.quoted(graph.target)}"
            + (f" minus {C.quoted(graph.foil)}" if graph.foil else ""))
    imported = (graph.params or {}).get("imported")
    if isinstance(imported, dict):
        source = f" file {C.esc(imported['file'])}" if imported.get("file") else ""
        return (f"Imported from a {C.esc(imported.get('format') or 'graph')}{source} · {what} · {counts} (edges "
                "as the file gives them)")
    passes = "backward" if graph.params.get("method") == "gradient" else "DPA"
    return (f"{what} · target logit {graph.target_logit:.3f} · {counts} · {graph.n_passes} {passes} passes in "
            f"{graph.seconds:.2f} s")


def show(graph: Any, key: str, run: Any = None, loaded: Any = None) -> None:
    st.caption(header(graph))
    st.caption(FV.scores_caption(graph))
    ids = [n.id for n in graph.nodes]
    # pins, supernodes, threshold and the selected node belong to this graph (its Subgraph.key): a new graph
    # starts clean, a stored one with what it was saved with
    got, switched = GI.enter(key, graph.key, run)
    if switched and got.node in ids:
        st.session_state[f"{key}_node"] = got.node
    if st.session_state.get(f"{key}_node") not in ids:  # start on the most influential feature
        features = [n for n in graph.nodes if n.kind == "feature"] or graph.nodes
        st.session_state[f"{key}_node"] = max(features, key=lambda n: float(n.metadata["influence"])).id
    follow_click([key], f"{key}_node", ids + GI.supernode_ids(key))
    chosen = st.session_state.get(f"{key}_node")
    sub = graph  # the one graph type: what the interaction prunes and groups
    labels = FV.all_labels(graph, full=True)  # each feature's whole explanation: cut on the node, whole on hover
    view = GI.controls(key, sub, run=run, current=chosen, identity=graph.key,
                       explanations=FV.explanations(graph, labels))
    pruned, drawn = view.apply(sub)
    shown = [n.id for n in drawn.nodes]
    if chosen not in shown:  # pruned away or grouped: the most influential node drawn
        chosen = st.session_state[f"{key}_node"] = max(drawn.nodes, key=lambda n: float(
            n.metadata.get("influence") or 0.0) if n.kind != "logits" else -1.0).id
    top = GI.top_logits(loaded, graph.prompt) if loaded is not None and loaded.name == graph.model else []
    left, right = st.columns([3, 2])  # the dashboard's contexts need the room
    with left:
        fig = GI.feature_figure(graph, drawn, labels, selected=chosen, pinned=view.annotations.pinned, top=top)
        show_subgraph(drawn, key, figure=fig)
        st.caption(GI.caption(view, sub, pruned, drawn))
        st.caption(LEGEND_HELP + " Rows: the input embeddings at the bottom, each dictionary at its layer (a "
                   "transcoder half a layer below the residual SAE of its layer), the logits on top; columns: "
                   "token positions. Labels: feature id and its explanation, cut to its column (hover for all). "
                   "Beside the logits: the model's next most probable tokens.")
    with right:
        chosen = got.node = st.selectbox("Node", shown, key=f"{key}_node",
                                         help="Click a node of the graph, or pick it here.")
        picked = next(n for n in drawn.nodes if n.id == chosen)
        inspect_node({"dpa": drawn}, chosen, key,
                     extra=lambda _: inspect(graph, graph.node(chosen)) if picked.kind != "supernode" else
                     st.caption(f"A supernode of {len(picked.metadata.get('members') or [])} nodes: "
                                + C.esc(", ".join(picked.metadata.get("members") or []))))
    with st.expander("All nodes"):
        st.dataframe(graph.node_table()[["id", "kind", "token", "position", "feature", "activation", "score",
                                         "influence"]], hide_index=True)


def sae_ref(graph: Any, name: str) -> str:
    """How the SAE page's ?sae= finds a dictionary: its name under data/saes, otherwise its path."""
    from pathlib import Path

    from attribution.sae.dictionary import dictionaries_root

    path = next((d["path"] for d in graph.dictionaries if d["name"] == name), name)
    shipped = Path(path).resolve().parent == dictionaries_root().resolve()
    return name if shipped else str(path)


def inspect(graph: Any, node: Any) -> None:
    """The feature page's own view of a node (the graph's GraphNode) in graph_view's inspector: a feature's
    dashboard and a link to the SAE page; what an error node is."""
    clerp, dictionary = node.metadata.get("clerp"), node.metadata.get("dictionary")
    if node.kind == "feature" and clerp:  # an imported graph: its maker's explanation
        st.text(f"Feature {node.feature} · {clerp}")  # the file's text: never read as markdown
    elif node.kind == "feature":
        FV.dashboard_card(graph, node)
    path = next((d.get("path") for d in graph.dictionaries if d["name"] == dictionary), None)
    # a dictionary directory the SAE page can open (a CLT's layers are not directories of their own)
    if node.kind == "feature" and path and Path(path).is_dir():
        st.page_link(SAE_PAGE, label=f"Open feature {C.esc(node.feature)} of {C.esc(dictionary)} on the "
                                     "SAE page",
                     icon=":material/open_in_new:",
                     query_params={"sae": sae_ref(graph, dictionary), "feature": str(node.feature)})
    elif node.kind == "error":
        st.caption("An error node: what the dictionary misses at this position (true activation minus its "
                   "reconstruction), scored like a feature.")


st.title("Feature graph")
st.caption("Which dictionary features carry the answer: features at lower layers feed features at higher "
           "layers and the logits, each edge one dot product with a DPA target vector (one top-down pass per "
           "target feature). Error nodes hold what each dictionary misses.")

with st.expander("Open a saved feature graph"):
    run = C.run_picker("feature-graph", key="fg_open")
    if run is not None:
        from circuits.subgraph import Subgraph

        saved = C.attempt(f"Cannot read run {run.id}", Subgraph.from_json, run.result())
        if saved is not None and (len(saved.nodes) > FV.BIG_NODES or len(saved.edges) > FV.BIG_EDGES):
            st.caption(f"{len(saved.nodes):,} nodes and {len(saved.edges):,} edges stored: drawn with each layer's "
                       "8 most influential nodes and the 120 strongest edges among them.")
            saved = FV.readable(saved, 8, 120)
        if saved is not None:
            show(saved, "fg_saved_graph", run=run)

loaded = C.sidebar_model(("llm",), key="fg_model", default="smollm2-135m")
C.keep("fg_prompt", DEFAULT_PROMPT)
prompt = st.text_input("Prompt", key="fg_prompt", on_change=C.remember("fg_prompt"))
c1, c2 = st.columns(2)
C.keep("fg_target", " Mary")
C.keep("fg_foil", " John")
filled = CI.follow(loaded, prompt, "fg", ("target", "foil"))  # a new prompt: the model's top two tokens
target = c1.text_input("Target", key="fg_target", on_change=CI.on_typed, args=("fg_target",),
                       help="A new prompt fills it with the model's top prediction unless you typed one.") or None
foil = c2.text_input("Foil (optional)", key="fg_foil", on_change=CI.on_typed, args=("fg_foil",),
                     help="A new prompt fills it with the model's runner-up unless you typed one.") or None
CI.followed_caption(filled)
if not prompt.strip():
    st.warning("The prompt is empty: type a prompt for the model to continue.")
    st.stop()
found = available(loaded.name)
options = list(found)
C.keep("fg_saes", [p for p, tc in found.items() if not tc][:4])  # the residual SAEs by default
st.session_state["fg_saes"] = [p for p in st.session_state["fg_saes"] if p in options]
chosen = st.multiselect("Dictionaries (data/saes)", options, key="fg_saes", on_change=C.remember("fg_saes"),
                        format_func=lambda p: p.replace("\\", "/").rsplit("/", 1)[-1])  # by name, not path
extra = st.text_input("More dictionary directories (comma-separated)", key="fg_extra",
                      help="Directories, or set:NAME for every layer of a transcoder set (workbench sae build-set), "
                           "or clt:NAME for a cross-layer transcoder (workbench sae build-clt; edges by gradient).")
paths = list(chosen) + [p.strip() for p in (extra or "").split(",") if p.strip()]
c1, c2, c3 = st.columns(3)
n_nodes = c1.slider("Nodes per layer", 2, 24, 8, key="fg_nodes",
                    help="Each row (the embeddings, each dictionary) keeps its nodes of largest influence on the "
                         "logits, at most three at one position.")
n_edges = c2.slider("Edges kept", 5, 400, 120, key="fg_edges")
per_layer = c3.slider("Features expanded per dictionary", 1, 64, 16, key="fg_per_layer")
method = st.radio("Edges by", list(view(FEATURE)), key="fg_method", horizontal=True,
                  help="dpa: DPA top-down passes; gradient: backward passes through the replacement model of a "
                       "transcoder set (attention and norms frozen, every edge exact, as circuit-tracer).")

sig = (loaded.name, prompt, target, foil, tuple(paths), n_nodes, n_edges, per_layer, method)
held = st.session_state.get("_fg_result")
if not paths:
    st.info("Pick at least one dictionary of this model (none under data/saes? give a directory).")
elif st.button("Build the feature graph", key="fg_run", type="primary"):
    with st.spinner("One forward pass, then one DPA top-down pass per expanded feature…"):
        graph = C.attempt("Cannot build the feature graph", build, loaded, prompt, target, foil, paths, n_nodes,
                          n_edges, per_layer, method)
    if graph is not None:
        st.session_state["_fg_result"] = held = (sig, graph)
if held is not None:
    if held[0] != sig:
        st.caption("The inputs changed since this graph was built: press the button to rebuild it.")
    show(held[1], "fg_graph", loaded=loaded)
    # saving writes this graph's pins and supernodes (only its) into the run; the "Saved" line stays with it
    C.save_button(lambda: held[1], key="fg_save", after=lambda run, gk=held[1].key: GI.saved("fg_graph", gk, run),
                  scope=held[1].key)
elif paths:
    st.caption("Press the button to build the graph (seconds on smollm2-135m with four dictionaries).")
