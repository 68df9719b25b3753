"""The Vision page's benchmark: every chosen method on held-out images (``workbench vit-eval``), run as a job
outside the app; its stored run is what the page shows, so any later session (also after a restart) opens
the same evaluation at once."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import jobs_view as J

JOB_KEY = "_vit_bench_job"  # this session's benchmark job (app/jobs_view.py held_job)
SEED = 2  # the held-out test images, as `workbench vit-eval`
BATCH = 50  # images per method call, as `workbench vit-eval`


# which way each metric column is better (the table's headers carry an arrow, the tooltips say why)
BETTER = {
    "seconds": ("lower", "time the method took"),
    "pointing_game": ("higher", "1 if the map's top patch lies on the decisive object"),
    "energy_pointing_game": ("higher", "share of the map's mass on the decisive object"),
    "mask_iou": ("higher", "overlap of the map's top patches with the object mask"),
    "deletion_auc": ("lower", "p(class) as the top patches are removed first: a faithful map drops it fast"),
    "insertion_auc": ("higher", "p(class) as the top patches are put back first: a faithful map restores it fast"),
    "positive_perturbation_auc": ("lower", "accuracy while removing the most relevant patches first"),
    "negative_perturbation_auc": ("higher", "accuracy while removing the least relevant patches first"),
    "class_sensitivity": ("lower", "similarity of the maps for the true and the runner-up class"),
    "seconds_per_image": ("lower", "time the method took per image"),
}


def metric_columns(table: Any) -> dict[str, Any]:
    """Column headers with ↑ (higher is better) or ↓ (lower is better), and a tooltip for each."""
    config = {}
    for col in table.columns:
        if col in BETTER:
            way, what = BETTER[col]
            config[col] = st.column_config.NumberColumn(f"{col} {'↑' if way == 'higher' else '↓'}",
                                                        help=f"{what}; {way} is better", format="%.3f")
    return config


def bench_spec(model: str, methods: list[str], dataset: str, n: int) -> Any:
    """The job spec `workbench vit-eval` makes for the same choices (so a command's run opens here too)."""
    from workbench.scheduler.specs import VitEvalSpec

    return VitEvalSpec(model=model, methods=list(methods), n=int(n), seed=SEED, dataset=dataset, batch_size=BATCH)


def _stored(run_id: str) -> str:
    C.store().get(run_id)  # gone or damaged: the page offers to run it again
    return run_id


def show_run(run_id: str) -> None:
    """The benchmark's stored run: the metrics table (arrows: which way is better) and its bar chart."""
    import plotly.io as pio


    run = C.store().get(run_id)
    result = run.result()
    st.caption(f"{C.esc(result.get('n'))} {C.esc(result.get('dataset'))} images · accuracy "
               f"{result.get('accuracy', 0):.3f} · run {C.code(run_id)}")
    table = run.table("methods")
    st.dataframe(table, hide_index=True, column_config=metric_columns(table), key="vit_bench_table")
    figure = run.path / "metrics.plotly.json"
    if figure.exists():
        st.plotly_chart(pio.from_json(figure.read_text()), key="vit_bench_chart")


def benchmark(model: str, default_dataset: str) -> None:
    """Choices, the job (start button with its estimate, live progress) and, once done, its result."""
    from attribution.vit.data import DATASETS
    from attribution.vit.methods import METHODS

    c1, c2, c3 = st.columns([3, 1, 1])
    C.keep("vit_bench_methods", list(METHODS))
    methods = c1.multiselect("Methods", list(METHODS), key="vit_bench_methods")
    if st.session_state.get("_vit_bench_for") != model:  # each model starts on the images it was trained on
        st.session_state["_vit_bench_for"] = model
        st.session_state["vit_bench_set"] = default_dataset
    dataset = c2.selectbox("Images", list(DATASETS), key="vit_bench_set")
    n = int(c3.number_input("How many", 1, 2000, 200, step=50, key="vit_bench_n"))
    if not methods:
        st.info("Pick at least one method.")
        return
    note = (f"Pointing game, mask IoU, deletion/insertion and perturbation AUCs, class sensitivity and time "
            f"for {len(methods)} methods on {n} held-out {dataset} images. It runs as a job outside the app; "
            "its result is stored as a run that any later session opens at once.")
    _, run_id = J.job_result(bench_spec(model, methods, dataset, n), JOB_KEY, "vit_bench", "Run the benchmark",
                             _stored, note=note)
    if run_id is not None:
        C.attempt("Cannot read the benchmark run", show_run, run_id)
