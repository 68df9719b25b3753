"""Vision: every map method on one image, beside the object mask, with metrics; and the benchmark over
held-out images, run as a job (app/vit_bench.py)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import share as S
from app import shared as SH
from app import vit_bench as B
from app.vit_bench import metric_columns


def read_upload(upload: Any, size: int, channels: int, strict_rgb_patch: int | None = None):
    """An uploaded picture as a (1, C, size, size) tensor in [0, 1], or an error message in the page.
    The declared pixel count is checked before decoding (attribution.vit.images.MAX_PIXELS).
    ``strict_rgb_patch`` (DINOv2): refuse an image that is not RGB or is smaller than one such patch."""
    import numpy as np
    import torch
    from PIL import Image

    from attribution.vit.images import open_image
    from core.models.vit import ImageError

    try:
        img = open_image(upload.getvalue(), upload.name)
        if strict_rgb_patch is not None:
            if img.mode != "RGB":
                raise ImageError(f"{upload.name!r} is not an RGB image (mode {img.mode}); this model takes RGB "
                                 "photographs: convert it first")
            if min(img.size) < strict_rgb_patch:
                raise ImageError(f"{upload.name!r} is {img.size[0]} x {img.size[1]} pixels, smaller than one "
                                 f"{strict_rgb_patch} x {strict_rgb_patch} patch")
    except ImageError as exc:
        msg = str(exc)
        st.error(f"{C.esc(msg[:1].upper() + msg[1:])}. Upload a PNG or JPEG.")
        return None
    img = img.convert("RGB" if channels == 3 else "L").resize((size, size), Image.BILINEAR)
    arr = np.asarray(img, dtype=np.float32) / 255.0
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    return torch.from_numpy(arr.copy())[None]


def metrics_table(model: Any, images: Any, masks: Any, maps: dict[str, Any], perturb: bool = True):
    import pandas as pd

    from attribution.vit import metrics as M

    rows = []
    for name, pm in maps.items():
        row: dict[str, Any] = {"method": name, "seconds": round(pm.seconds, 4)}
        if masks is not None:
            row.update(
                {k: float(v[0]) for k, v in M.localization_scores(pm.flat, masks, pm.patch_size).items()}
            )
        if perturb:
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


def explain_image(model: Any, lock: Any, images: Any, masks: Any, methods: list[str], target: int | None,
                  perturb: bool = True):
    from attribution.vit.methods import explain

    maps = {}
    with C.Progress(f"Explaining with {len(methods)} methods", len(methods) + 1) as prog, lock:
        for name in methods:
            pm = prog.attempt(f"{name} failed", explain, model, images, name, target_class=target)
            if pm is not None:
                maps[name] = pm
            prog.step(name)
        table = prog.attempt("Metrics failed", metrics_table, model, images, masks, maps, perturb) if maps else None
        prog.step("metrics")
    return maps, table


st.title("Vision")
st.caption("Maps of every method over the image, beside the decisive object's mask, and the metrics table.")
if C.engine("attribution.vit.methods", "ViT attribution") is None:
    st.stop()
from attribution.vit import data as D  # noqa: E402
from attribution.vit.maps import overlay_figure  # noqa: E402
from attribution.vit.methods import METHODS  # noqa: E402

PER_ROW = 4  # panels per figure row

loaded = C.sidebar_model(("vit",), key="vit_model", default="vit-synth")
model = loaded.model
if not hasattr(model, "check_images"):
    st.error(f"{C.esc(loaded.name)} is not an image classifier: pick a ViT model.")
    st.stop()
DINO = getattr(model, "backbone_name", None) == "dinov2-small"  # a backbone whose decision is a head we pick
head = None
if DINO:
    from core.models import dinov2 as DV  # noqa: E402

    heads = DV.head_names()
    # real photographs by default, so the decoder's saliency (a synthetic-shape head calls a house "plus")
    C.keep("vit_head", "saliency" if "saliency" in heads else DV.DEFAULT_HEAD if DV.DEFAULT_HEAD in heads else heads[0])
    head = st.sidebar.selectbox("Decision (head)", heads, key="vit_head", on_change=C.remember("vit_head"),
                                help="Linear heads trained here on DINOv2's frozen class token (synthetic, hard), "
                                     "or saliency: the package decoder's mean saliency inside a region you pick.")
    if head != "saliency":
        model = C.attempt("Cannot attach the head", DV.with_head, model, head)
        if model is None:
            st.stop()
cfg = model.cfg

# The benchmark first: the image view below may stop the page (no upload yet, no method picked).
with st.expander("Benchmark: every method on held-out images (vit-eval)",
                 expanded=bool(st.session_state.get(B.JOB_KEY))):
    B.benchmark(loaded.name, "hard" if "hard" in loaded.name else "digits" if "digit" in loaded.name else "synthetic")

c1, c2, c3 = st.columns([1, 1, 2])
SOURCES = ["photo", "synthetic", "hard", "upload"] if DINO else ["synthetic", "hard", "digits", "upload"]
if st.session_state.get("_vit_source_for") != loaded.name:  # each model starts on the images it was trained on
    first = "_vit_source_for" not in st.session_state
    st.session_state["_vit_source_for"] = loaded.name
    if not (first and st.session_state.get("vit_source") in SOURCES):  # a choice made before the first run stays
        st.session_state["vit_source"] = "photo" if DINO else "hard" if "hard" in loaded.name else "synthetic"
if st.session_state.get("vit_source") not in SOURCES:
    st.session_state["vit_source"] = SOURCES[0]
source = c1.radio("Image", SOURCES, key="vit_source",
                  help="photo: real photographs bundled with scikit-image (DINOv2); synthetic: the shapes the "
                       "ViTs were trained on; hard: several objects, one decisive (vit-synth-hard); digits: "
                       "handwritten digits (a model trained on them only); upload.")
# The methods box is drawn before anything can stop the page (no upload yet): a widget left out of a run
# came back empty in the browser after the upload.
C.seed_from_query({"methods": "_vit_methods_q"})
if "_vit_methods_q" in st.session_state:  # ?methods=dap,rollout
    st.session_state["vit_methods"] = [
        m for m in st.session_state.pop("_vit_methods_q").split(",") if m in METHODS
    ]
C.keep("vit_methods", ["dap", "rollout", "gae", "attention", "dpa"] if DINO else list(METHODS))
methods = c3.multiselect("Methods", list(METHODS), key="vit_methods", on_change=C.remember("vit_methods"))
index = 0
if source == "upload":
    from attribution.vit.images import SUFFIXES

    upload = c2.file_uploader("PNG or JPEG", type=list(SUFFIXES), key="vit_upload")
    if upload is None:
        st.info("Upload an image; it is resized to the model's input size.")
        st.stop()
    images = read_upload(upload, cfg.image_size, cfg.in_channels, cfg.patch_size if DINO else None)
    if images is None:
        st.stop()
    masks, label, class_names = (
        None,
        None,
        tuple(cfg.class_names) or tuple(str(i) for i in range(cfg.n_classes)),
    )
elif source == "photo":
    from attribution.vit.images import PHOTOS, fit_image, photo

    which = c2.selectbox("Photograph", list(PHOTOS), key="vit_photo",
                         help="Bundled with scikit-image (skimage.data); resized to the model's input.")
    raw = C.attempt("Cannot read the photograph", photo, which)
    if raw is None:
        st.stop()
    images = fit_image(raw, cfg.image_size, cfg.patch_size, which)
    masks, label = None, None
    class_names = tuple(cfg.class_names) or tuple(str(i) for i in range(cfg.n_classes))
else:
    index = c2.number_input("Sample", 0, 63, 0, key="vit_index")
    batch = C.attempt("Cannot build the sample", D.sample_images, source, int(index) + 1)
    if batch is None:
        st.stop()
    if DINO:
        batch = D.at_size(batch, cfg.image_size)
    images, masks = batch.images[int(index) : int(index) + 1], batch.masks[int(index) : int(index) + 1]
    label, class_names = int(batch.labels[int(index)]), batch.class_names
    known = set(cfg.class_names or ())
    if known and not set(class_names) <= known:
        st.warning(f"{C.esc(loaded.name)} was trained on {C.esc(', '.join(cfg.class_names))}; the {C.esc(source)} "
                   f"images' classes ({C.esc(', '.join(map(str, class_names)))}) are not among them, so its "
                   "prediction (and every map) explains a class the image does not show. Pick images the model knows.")
region = None
if head == "saliency":
    size = cfg.image_size
    st.caption(f"The decision: the decoder's mean saliency inside this box, in the {size} x {size} input's pixels "
               "(x1, y1 exclusive).")
    r1, r2, r3, r4 = st.columns(4)
    box = (r1.number_input("x0", 0, size, size // 4, key="vit_x0"), r2.number_input("y0", 0, size, size // 4,
                                                                                     key="vit_y0"),
           r3.number_input("x1", 0, size, 3 * size // 4, key="vit_x1"),
           r4.number_input("y1", 0, size, 3 * size // 4, key="vit_y1"))
    region = tuple(int(v) for v in box)
    model = C.attempt("This region does not fit the image", DV.with_head, model, head, region)
    if model is None:
        st.stop()
    cfg = model.cfg
    class_names = tuple(cfg.class_names)
    label = None
if not methods:
    st.info("Pick at least one method.")
    st.stop()
perturb = True
if DINO:  # deletion / insertion cost 63 forwards of 224 px per method (several seconds each on CPU)
    perturb = c3.checkbox("Deletion / insertion metrics (slow: 63 forwards per method)", value=False,
                          key="vit_perturb")

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
    c1.caption(f"true class: {C.esc(class_names[label])}")
# the saliency decision is "salient" (its mean in the region); "not salient" is its runner-up
options = names if head == "saliency" else ["predicted"] + names
if st.session_state.get("vit_target") not in options:
    st.session_state["vit_target"] = options[0]
target = c2.selectbox("Explain class", options, key="vit_target")
target_idx = None if target == "predicted" else names.index(target)

if head == "saliency":
    with loaded.lock:
        smap = model.saliency_map(images)[0]
    c1.caption(f"mean saliency in the region: {float(probs[0]):.3f} (whole image {float(smap.mean()):.3f})")
sig = (loaded.name, head, region, source, str(images.sum().item()), tuple(methods), target_idx, perturb)
held = st.session_state.get("_vit_result")
if not held or held[0] != sig:
    # one explanation per server for these inputs (a new session on the same image draws at once); a partial
    # one (a method failed) is not kept, so its message shows again
    got = SH.peek(("vit", *sig))
    maps, table = got if got is not None else explain_image(model, loaded.lock, images, masks, methods, target_idx,
                                                            perturb)
    if got is None and len(maps) == len(methods) and table is not None:
        SH.put(("vit", *sig), (maps, table))
    held = (sig, maps, table)
    st.session_state["_vit_result"] = held
_, maps, table = held
if not maps:
    st.stop()
shown = masks
if region is not None:  # the saliency head: outline the region
    import torch as _t

    from core.models.vit_heads import region_mask

    shown = region_mask(region, cfg.image_size, cfg.image_size)[None] > 0.5
    if masks is not None:
        shown = _t.logical_or(shown, masks)
# At most PER_ROW panels a figure (the image, then the maps; a colour bar on each): nine methods in one
# row were 75 px wide with their titles cut off.
names = list(maps)
rows = [names[: PER_ROW - 1]] + [names[i: i + PER_ROW] for i in range(PER_ROW - 1, len(names), PER_ROW)]
for r, chunk in enumerate(rows):
    part = overlay_figure(images.cpu(), {m: maps[m] for m in chunk}, [0], masks=shown, panel_px=240,
                          colorbar=True, image_panel=r == 0)
    st.plotly_chart(part, key="vit_overlay" if r == 0 else f"vit_overlay_{r}", width="content")
if region is not None:
    st.caption("White outline (black edge): the region whose mean saliency is explained. Colour: each map "
               "normalised to 0-1.")
elif masks is not None:
    st.caption("White outline (black edge): the decisive object's mask. Colour: each map normalised to 0-1.")
if table is not None:
    st.dataframe(table, hide_index=True, column_config=metric_columns(table))
    st.caption("↑ higher is better · ↓ lower is better (hover a header for what it measures).")


def _draft():
    from core.store import RunDraft

    return RunDraft(
        kind="vit-explain",
        model=loaded.name,
        method=",".join(maps),
        args={"source": source, "target": target, "methods": list(maps),
              **({"head": head} if head else {}), **({"region": list(region)} if region else {})},
        timings={m: pm.seconds for m, pm in maps.items()},
        result={"prediction": names[pred] if pred < len(names) else pred},
        tensors={f"map_{m}": pm.scores for m, pm in maps.items()} | {"image": images.cpu()},
        tables={"metrics": table} if table is not None else {},
        figures={"overlay": overlay_figure(images.cpu(), maps, [0], masks=shown, panel_px=240, colorbar=True)},
    )


C.save_button(_draft, key="vit_save")
if source == "upload":
    image_lines = ["# images: your (1, C, H, W) tensor in [0, 1]"]
elif source == "photo":
    image_lines = ["from attribution.vit.images import fit_image, photo",
                   f"images = fit_image(photo({which!r}), {cfg.image_size}, {cfg.patch_size})"]
else:
    image_lines = ["from attribution.vit.data import sample_images" + (", at_size" if DINO else ""),
                   f"images = sample_images({source!r}, {int(index) + 1}).images[{int(index)}:{int(index) + 1}]"]
    if DINO:
        image_lines[-1] = (f"images = at_size(sample_images({source!r}, {int(index) + 1}), {cfg.image_size})"
                           f".images[{int(index)}:{int(index) + 1}]")
head_lines = ["from core.models.dinov2 import with_head",
              "m = " + S.call("with_head", S.M, head, region=region)] if head else []
S.share("vit", loaded.name,
        [*image_lines, *head_lines,
         *[f"map_{mth} = " + S.call("explain", S.M, S.Name("images"), mth, target_class=target_idx) for mth in maps]],
        {"methods": list(maps)}, imports=("from attribution.vit.methods import explain",))

with st.expander("Open a saved vision run"):
    run = C.run_picker(["vit-explain", "vit_eval", "vit-eval"], key="vit_open")  # vit-eval: runs saved before
    if run is not None:
        import plotly.io as pio

        for i, f in enumerate(sorted(run.path.glob("*.plotly.json"))):
            st.plotly_chart(pio.from_json(f.read_text()), key=f"vit_open_fig_{i}")
        for t in run.tables():
            st.dataframe(run.table(t), hide_index=True)
