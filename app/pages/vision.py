"""Vision: every map method on one image, beside the object mask, with metrics; and the benchmark over
held-out images, run as a job (app/vit_bench.py)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import share as S
from app import vit_bench as B
from app.vit_bench import metric_columns


def read_upload(upload: Any, size: int, channels: int):
    """An uploaded picture as a (1, C, size, size) tensor in [0, 1], or an error message in the page.
    The declared pixel count is checked before decoding (attribution.vit.images.MAX_PIXELS)."""
    import numpy as np
    import torch
    from PIL import Image

    from attribution.vit.images import open_image
    from attribution.vit.model import ImageError

    try:
        img = open_image(upload.getvalue(), upload.name)
    except ImageError as exc:
        msg = str(exc)
        st.error(f"{msg[:1].upper()}{msg[1:]}. Upload a PNG or JPEG.")
        return None
    img = img.convert("RGB" if channels == 3 else "L").resize((size, size), Image.BILINEAR)
    arr = np.asarray(img, dtype=np.float32) / 255.0
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    return torch.from_numpy(arr.copy())[None]


def metrics_table(model: Any, images: Any, masks: Any, maps: dict[str, Any]):
    import pandas as pd

    from attribution.vit import metrics as M

    rows = []
    for name, pm in maps.items():
        row: dict[str, Any] = {"method": name, "seconds": round(pm.seconds, 4)}
        if masks is not None:
            row.update(
                {k: float(v[0]) for k, v in M.localization_scores(pm.flat, masks, pm.patch_size).items()}
            )
        row.update(
            {
                k: float(v[0])
                for k, v in M.perturbation_scores(
                    model, images, pm.targets.to(images.device), pm.flat
                ).items()
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def explain_image(model: Any, lock: Any, images: Any, masks: Any, methods: list[str], target: int | None):
    from attribution.vit.methods import explain

    maps = {}
    with C.Progress(f"Explaining with {len(methods)} methods", len(methods) + 1) as prog, lock:
        for name in methods:
            pm = prog.attempt(f"{name} failed", explain, model, images, name, target_class=target)
            if pm is not None:
                maps[name] = pm
            prog.step(name)
        table = prog.attempt("Metrics failed", metrics_table, model, images, masks, maps) if maps else None
        prog.step("metrics")
    return maps, table


st.title("Vision")
st.caption("Maps of every method over the image, beside the decisive object's mask, and the metrics table.")
if C.engine("attribution.vit.methods", "ViT attribution") is None:
    st.stop()
from attribution.vit import data as D  # noqa: E402
from attribution.vit.maps import overlay_figure  # noqa: E402
from attribution.vit.methods import METHODS  # noqa: E402

loaded = C.sidebar_model(("vit",), key="vit_model", default="vit-synth")
model = loaded.model
if not hasattr(model, "check_images"):
    st.error(f"{loaded.name} is not an image classifier: pick a ViT model.")
    st.stop()
cfg = model.cfg

# The benchmark first: the image view below may stop the page (no upload yet, no method picked).
with st.expander("Benchmark: every method on held-out images (vit-eval)",
                 expanded=bool(st.session_state.get(B.JOB_KEY))):
    B.benchmark(loaded.name, "hard" if "hard" in loaded.name else "digits" if "digit" in loaded.name else "synthetic")

c1, c2, c3 = st.columns([1, 1, 2])
SOURCES = ["synthetic", "hard", "digits", "upload"]
if st.session_state.get("_vit_source_for") != loaded.name:  # each model starts on the images it was trained on
    first = "_vit_source_for" not in st.session_state
    st.session_state["_vit_source_for"] = loaded.name
    if not (first and st.session_state.get("vit_source") in SOURCES):  # a choice made before the first run stays
        st.session_state["vit_source"] = "hard" if "hard" in loaded.name else "synthetic"
source = c1.radio("Image", SOURCES, key="vit_source",
                  help="synthetic: the shapes the ViTs were trained on; hard: several objects, one decisive "
                       "(vit-synth-hard); digits: handwritten digits (a model trained on them only); upload.")
if source == "upload":
    from attribution.vit.images import SUFFIXES

    upload = c2.file_uploader("PNG or JPEG", type=list(SUFFIXES), key="vit_upload")
    if upload is None:
        st.info("Upload an image; it is resized to the model's input size.")
        st.stop()
    images = read_upload(upload, cfg.image_size, cfg.in_channels)
    if images is None:
        st.stop()
    masks, label, class_names = (
        None,
        None,
        tuple(cfg.class_names) or tuple(str(i) for i in range(cfg.n_classes)),
    )
else:
    index = c2.number_input("Sample", 0, 63, 0, key="vit_index")
    batch = C.attempt("Cannot build the sample", D.sample_images, source, int(index) + 1)
    if batch is None:
        st.stop()
    images, masks = batch.images[int(index) : int(index) + 1], batch.masks[int(index) : int(index) + 1]
    label, class_names = int(batch.labels[int(index)]), batch.class_names
    known = set(cfg.class_names or ())
    if known and not set(class_names) <= known:
        st.warning(f"{loaded.name} was trained on {', '.join(cfg.class_names)}; the {source} images' classes "
                   f"({', '.join(map(str, class_names))}) are not among them, so its prediction (and every map) "
                   "explains a class the image does not show. Pick images the model knows.")
C.seed_from_query({"methods": "_vit_methods_q"})
if "_vit_methods_q" in st.session_state:  # ?methods=dap,rollout
    st.session_state["vit_methods"] = [
        m for m in st.session_state.pop("_vit_methods_q").split(",") if m in METHODS
    ]
C.keep("vit_methods", list(METHODS))
methods = c3.multiselect("Methods", list(METHODS), key="vit_methods", on_change=C.remember("vit_methods"))
if not methods:
    st.info("Pick at least one method.")
    st.stop()

try:
    images = model.check_images(images)
except Exception as exc:
    C.error("This image does not fit the model", exc)
    st.stop()
import torch  # noqa: E402

with loaded.lock, torch.no_grad():
    probs = torch.softmax(model(images)[0], -1)
names = list(cfg.class_names) or list(class_names)
pred = int(probs.argmax())
c1, c2 = st.columns([1, 3])
c1.metric("prediction", names[pred] if pred < len(names) else str(pred), f"p = {float(probs[pred]):.2f}")
if label is not None:
    c1.caption(f"true class: {class_names[label]}")
target = c2.selectbox("Explain class", ["predicted"] + names, key="vit_target")
target_idx = None if target == "predicted" else names.index(target)

sig = (loaded.name, source, str(images.sum().item()), tuple(methods), target_idx)
held = st.session_state.get("_vit_result")
if not held or held[0] != sig:
    maps, table = explain_image(model, loaded.lock, images, masks, methods, target_idx)
    held = (sig, maps, table)
    st.session_state["_vit_result"] = held
_, maps, table = held
if not maps:
    st.stop()
fig = overlay_figure(images.cpu(), maps, [0], masks=masks, panel_px=240, colorbar=True)
st.plotly_chart(fig, key="vit_overlay", width="content")
if masks is not None:
    st.caption("White outline (black edge): the decisive object's mask. Colour: each map normalised to 0-1.")
if table is not None:
    st.dataframe(table, hide_index=True, column_config=metric_columns(table))
    st.caption("↑ higher is better · ↓ lower is better (hover a header for what it measures).")


def _draft():
    from workbench.store import RunDraft

    return RunDraft(
        kind="vit-explain",
        model=loaded.name,
        method=",".join(maps),
        args={"source": source, "target": target, "methods": list(maps)},
        timings={m: pm.seconds for m, pm in maps.items()},
        result={"prediction": names[pred] if pred < len(names) else pred},
        tensors={f"map_{m}": pm.scores for m, pm in maps.items()} | {"image": images.cpu()},
        tables={"metrics": table} if table is not None else {},
        figures={"overlay": fig},
    )


C.save_button(_draft, key="vit_save")
S.share("vit", loaded.name,
        ["from attribution.vit.data import sample_images" if source != "upload"
         else "# images: your (1, C, H, W) tensor in [0, 1]",
         *([f"images = sample_images({source!r}, {int(index) + 1}).images[{int(index)}:{int(index) + 1}]"]
           if source != "upload" else []),
         *[f"map_{mth} = " + S.call("explain", S.M, S.Name("images"), mth, target_class=target_idx) for mth in maps]],
        {"methods": list(maps)}, imports=("from attribution.vit.methods import explain",))

with st.expander("Open a saved vision run"):
    run = C.run_picker(["vit-explain", "vit-eval"], key="vit_open")
    if run is not None:
        import plotly.io as pio

        for i, f in enumerate(sorted(run.path.glob("*.plotly.json"))):
            st.plotly_chart(pio.from_json(f.read_text()), key=f"vit_open_fig_{i}")
        for t in run.tables():
            st.dataframe(run.table(t), hide_index=True)
