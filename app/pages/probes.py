"""Probes and concepts: what each layer represents, how cleanly, and what steering along it does."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import jobs_view as J
from core.paths import data_root

DATA = data_root() / "concepts"


def read_dataset(source: str, upload: Any):
    """A LabeledSet from a shipped file or an upload; None after a message in the page."""
    from attribution.probes.activations import load_dataset

    if source != "upload":
        return C.attempt("Cannot read the dataset", load_dataset, DATA / source)
    if upload is None:
        st.info('Upload a JSONL file: one {"text": ..., "label": ...} object a line.')
        return None
    return C.read_upload(upload, load_dataset, "Cannot read")


def subset(data: Any, n: int):
    """The first n examples, keeping every class (a stratified cut in file order)."""
    from attribution.probes.activations import LabeledSet

    per = max(2, n // max(len(data.classes), 1))
    keep, seen = [], {c: 0 for c in data.classes}
    for i, y in enumerate(data.labels):
        if seen[y] < per:
            keep.append(i)
            seen[y] += 1
    pick = lambda xs: [xs[i] for i in keep] if xs else xs  # noqa: E731
    return LabeledSet(pick(data.texts), pick(data.labels), pick(data.words), pick(data.marked))


JOB_KEY = "_probe_job"  # this session's probe job (app/jobs_view.py held_job)


def probe_spec(model: str, data: Any, name: str, pooling: str, concept: str) -> Any:
    """The job that probes every layer and builds concept vectors (no steering) from the same activations,
    keeping them for the PCA and steering views. Equal specs are one result: any session opens it."""
    from workbench.scheduler.kind_probes import dataset_spec
    from workbench.scheduler.specs import ProbeSpec, model_ref

    return ProbeSpec(model=model_ref(model), device="cpu", **dataset_spec(None, data, name=name), hook=None,
                     layers="all", pooling=pooling, test_frac=0.3, seed=0, n_boot=200, concept=concept,
                     keep_activations=True)


@st.cache_resource(show_spinner=False, max_entries=8)
def read_run(root: str, run_id: str):
    """A probe job's stored run, read once per server (runs never change)."""
    from attribution.probes.run import ProbeRun

    return ProbeRun.from_run(C.store().get(run_id))


def shown_run(run_id: str):
    """``read_run`` of this store, refused when it lacks what this page shows (then it offers to run again)."""
    from core.errors import RunStoreError

    out = read_run(str(C.store().root), run_id)
    if out.concepts is None or not out.acts:
        raise RunStoreError(f"run {run_id} lacks the concept vectors or activations this page shows")
    return out


def similarity_heatmap(concepts: Any):
    import plotly.graph_objects as go

    table = concepts.table()
    cols = [c for c in ("cos_mean_probe", "cos_mean_sae", "cos_probe_sae") if table[c].notna().any()]
    fig = go.Figure(
        go.Heatmap(
            z=table[cols].to_numpy(dtype=float).T,
            x=[str(x) for x in table["layer"]],
            y=[c.replace("cos_", "").replace("_", " · ") for c in cols],
            colorscale="RdBu",
            zmid=0,
            zmin=-1,
            zmax=1,
        )
    )
    fig.update_layout(
        title=f"Cosine similarity of {concepts.concept!r} concept vectors per layer",
        xaxis_title="layer",
        height=260,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def gdv_figure(probe: Any):
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Scatter(
            x=[r.layer for r in probe.layers],
            y=[r.gdv for r in probe.layers],
            mode="lines+markers",
            name="GDV",
        )
    )
    fig.update_layout(
        title="Generalized discrimination value (lower = classes better separated)",
        xaxis_title="layer",
        yaxis_title="GDV",
        height=320,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


def steer(loaded: Any, hook: str, vector: Any, prompt: str, n_new: int) -> str:
    """The model's continuation with ``vector`` added to the residual stream at ``hook``, from
    position 1 on: the first position is the attention sink, and pushing it (as we once did) broke
    every continuation after one token ("The")."""

    def add(act, hook):  # noqa: ARG001 - TransformerLens passes the hook point
        out = act.clone()
        out[:, 1:] += vector.to(act.dtype).to(act.device)
        return out

    with loaded.lock, loaded.model.hooks(fwd_hooks=[(hook, add)]):
        return loaded.model.generate(prompt, max_new_tokens=n_new)


@st.cache_data(show_spinner=False, max_entries=256)
def continuation(model: str, run_id: str, layer: int, scale: float, prompt: str, _loaded: Any, _hook: str,
                 _vector: Any) -> str:
    """``steer``, kept for every session: greedy decoding, so the same model, run, layer, strength and prompt
    give the same text (a new session opening a stored result does not generate again)."""
    return steer(_loaded, _hook, _vector, prompt, 12)


st.title("Probes and concepts")
st.caption(
    "Per-layer probe accuracy, selectivity and GDV; concept vectors, their similarity, PCA and steering."
)
if C.engine("attribution.probes.probe", "probes") is None:
    st.stop()
loaded = C.sidebar_model(("llm", "toy"), key="probe_model", default="smollm2-135m")

files = sorted(p.name for p in DATA.glob("*.jsonl")) if DATA.is_dir() else []
c1, c2, c3 = st.columns(3)
source = c1.selectbox("Dataset", files + ["upload"], key="probe_source")
upload = c1.file_uploader("JSONL", type=["jsonl", "json", "txt"], key="probe_upload") if source == "upload" else None
data = read_dataset(source, upload)
if data is None:
    st.stop()
n = c2.slider("Examples", 8, max(8, len(data)), min(120, len(data)), step=4, key="probe_n")
pooling = c3.radio("Pooling", ["last", "mean"], horizontal=True, key="probe_pooling")
data = subset(data, n)
concept = c2.selectbox("Concept (positive class)", data.classes, key="probe_concept")

name = source if source != "upload" else getattr(upload, "name", "upload")
# Probing every layer takes tens of seconds on smollm2: it runs when asked, as a job outside this server.
note = (f"Probe every layer on {n} examples ({pooling} pooling), then build concept vectors for {concept!r}. "
        "It runs as a job outside the app, so every page stays usable; its result is stored as a run, "
        "which any later session (also after a restart) opens at once.")
job, out = J.job_result(probe_spec(loaded.name, data, name, pooling, concept), JOB_KEY, "probe_job", "Run probes",
                        shown_run, note=note)
if out is None:  # running (its live panel), or not run yet, failed, cancelled, or its run is gone (offered)
    st.stop()
probe, concepts, acts = out.probe, out.concepts, out.acts
labels = out.labels or data.labels
best = probe.best
st.metric("best layer", str(best.layer), f"accuracy {best.accuracy:.2f}, selectivity {best.selectivity:+.2f}")
st.plotly_chart(probe.plot(), key="probe_curves")
c1, c2 = st.columns(2)
c1.plotly_chart(gdv_figure(probe), key="probe_gdv")
c2.plotly_chart(similarity_heatmap(concepts), key="probe_sim")

hooks = list(acts)
layer = st.select_slider(
    "Layer for PCA and steering", options=list(range(len(hooks))), value=int(best.layer), key="probe_layer"
)
from attribution.probes.geometry import projection_figure  # noqa: E402

fig = C.attempt(
    "PCA failed",
    projection_figure,
    acts[hooks[layer]],
    labels,
    "pca",
    f"PCA of layer {layer} ({pooling} pooling)",
)
if fig is not None:
    st.plotly_chart(fig, key="probe_pca")

st.subheader("Steering")
import numpy as np  # noqa: E402

from attribution.probes.concepts import class_mean_vector  # noqa: E402

X = acts[hooks[layer]].float()
direction = class_mean_vector(X, np.asarray(labels), concept)
norm = float(X.norm(dim=1).median())
scale = st.slider("Steering strength (× median activation norm)", -2.0, 2.0, 0.0, 0.25, key="probe_scale")
C.keep("probe_prompt", data.texts[0])
prompt = st.text_input("Prompt", key="probe_prompt", on_change=C.remember("probe_prompt"))
if not prompt.strip():
    st.warning("The prompt is empty: type a prompt to steer.")
else:
    vec = direction / direction.norm().clamp_min(1e-12) * norm * scale
    # Strength 0 adds nothing: the unsteered text (one per prompt, any layer) is the steered one there.
    plain = C.attempt("Generation failed", continuation, loaded.name, job.run_id, -1, 0.0, prompt, loaded,
                      hooks[layer], vec * 0)
    steered = plain if scale == 0 else C.attempt("Steering failed", continuation, loaded.name, job.run_id, layer,
                                                 float(scale), prompt, loaded, hooks[layer], vec)
    if steered is not None and plain is not None:
        left, right = st.columns(2)
        left.caption("unsteered")
        left.text(prompt + plain)
        right.caption(f"{C.quoted(concept)} direction at layer {layer}, strength {scale:+.2f}")
        right.text(prompt + steered)

st.caption(f"Stored as run {C.code(job.run_id)} (job {C.code(job.id)}, finished {C.esc(job.finished)}); see the "
           "Runs and Jobs pages.")
