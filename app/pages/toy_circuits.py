"""Toy circuits: accuracy, attention patterns, ablation, patching, Fourier, spectra and the FFN variants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import streamlit as st

from app import common as C
from app import share as S
from app import shared as SH
from app import views as V

N_EVAL = 256


def pattern_grid(pats: Any, tokens: list[str]):
    """All heads' patterns [layer, head, query, key] for one example as a grid of heatmaps.

    Token labels sit on the bottom row (keys) and the left column (queries) only, with room between rows,
    so a panel's title never runs into the tick labels of the panel above it; hover names query and key."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n_layers, n_heads = int(pats.shape[0]), int(pats.shape[1])
    labels = V.token_labels(tokens)
    panel = 260
    height = panel * n_layers + 80 * (n_layers - 1) + 140
    fig = make_subplots(
        rows=n_layers,
        cols=n_heads,
        subplot_titles=[f"L{lay}H{h}" for lay in range(n_layers) for h in range(n_heads)],
        horizontal_spacing=0.04,
        vertical_spacing=min(0.3, 80 / height) if n_layers > 1 else 0.0,
    )
    for lay in range(n_layers):
        for h in range(n_heads):
            fig.add_trace(
                go.Heatmap(
                    z=pats[lay, h].numpy(),
                    x=labels,
                    y=labels,
                    colorscale="Blues",
                    zmin=0,
                    zmax=1,
                    showscale=False,
                    hovertemplate=f"L{lay}H{h}<br>query %{{y}}<br>key %{{x}}<br>%{{z:.3f}}<extra></extra>",
                ),
                row=lay + 1,
                col=h + 1,
            )
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=True, col=1, **V.all_ticks(labels))
    fig.update_xaxes(showticklabels=True, row=n_layers, tickangle=-60, **V.all_ticks(labels))
    fig.update_annotations(font_size=13, yshift=4)
    fig.update_layout(height=height, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def variants_table(entries: list[Any]):
    """Every toy checkpoint's test metrics beside its FFN variant (read from metrics.json)."""
    import pandas as pd

    rows = []
    for e in entries:
        try:
            cfg = json.loads((Path(e.path) / "config.json").read_text())
            metrics = json.loads((Path(e.path) / "metrics.json").read_text())
        except (OSError, ValueError, TypeError):
            continue
        spec = cfg.get("model", {})
        test = metrics.get("test", {})
        rows.append(
            {
                "model": e.name,
                "task": spec.get("task"),
                "ffn": spec.get("ffn"),
                "layers": spec.get("layers"),
                "heads": spec.get("heads"),
                "d_model": spec.get("d_model"),
                "params": e.params,
                "test_accuracy": test.get("accuracy"),
                "test_loss": test.get("loss"),
            }
        )
    return pd.DataFrame(rows)


def _draft(kind: str, method: str, res: Any, model_name: str, seed: int):
    from core.store import RunDraft

    return RunDraft(
        kind=f"toy-{kind}",
        model=model_name,
        method=method,
        args={"seed": seed, "n": N_EVAL},
        result=res.to_json(),
        tables={"scores": res.table()},
        figures={"plot": res.plot()},
    )


def components(model: Any) -> list[str]:
    out = [f"head:{lay}.{h}" for lay in range(model.arch.n_layers) for h in range(model.arch.n_heads)]
    if model.arch.mlp != "none":
        out += [f"mlp:{lay}" for lay in range(model.arch.n_layers)]
    return out


st.title("Toy circuits")
st.caption("Small transformers trained here on tasks with known solutions: how they solve them.")
if C.engine("circuits.tools", "circuit tools") is None:
    st.stop()
entries = C.zoo(("toy",))
loaded = C.sidebar_model(("toy",), key="toy_model", allow_path=True)
model = loaded.model
if getattr(model, "kind", None) != "toy" or "task" not in getattr(model, "info", {}):
    st.error(
        f"{C.esc(loaded.name)} is not a toy checkpoint: pick one of "
        f"{', '.join(C.esc(e.name) for e in entries) or 'none'}."
    )
    st.stop()
from circuits.toy.train import evaluate  # noqa: E402
from core.models.toy_tasks import get_task  # noqa: E402

info = model.info
task = C.attempt("Cannot rebuild the task", get_task, info["task"]["task"], **info["task"].get("params", {}))
if task is None:
    st.stop()
st.caption(f"task {C.code(task.name)} · {C.code(json.dumps(info.get('spec', {})))}")
seed = st.sidebar.number_input("Evaluation seed", 0, 10_000, 0, key="toy_seed")
batch = C.attempt("Cannot sample the task", task.batch, "test", N_EVAL, int(seed))
if batch is None:
    st.stop()
def _evaluate():
    with loaded.lock:
        return C.attempt("Evaluation failed", evaluate, model, batch, task)


acc = SH.shared(("toy_eval", loaded.name, int(seed)), _evaluate)  # once per server for this checkpoint and seed
if acc:
    cols = st.columns(len(acc))
    for col, (k, v) in zip(cols, acc.items(), strict=True):
        col.metric(k, f"{v:.4f}" if isinstance(v, float) else str(v))

tabs = st.tabs(["Attention patterns", "Ablation", "Patching", "Fourier", "Spectra", "FFN variants"])
is_tokens = task.kind != "regression"
with tabs[0]:
    if not is_tokens:
        st.info("This task feeds vectors, not tokens; patterns are shown for token tasks.")
    else:
        idx = st.number_input("Test example", 0, len(batch) - 1, 0, key="toy_example")
        ids = batch.tokens[int(idx)].tolist()
        from circuits.tools.patterns import patterns

        with loaded.lock:
            pats = C.attempt("Cannot read the patterns", patterns, model, ids)
        if pats is not None:
            tokens = model.to_str_tokens(ids)
            st.caption("example: " + C.esc(" ".join(tokens)))
            st.plotly_chart(pattern_grid(pats[:, 0].cpu(), tokens), key="toy_patterns")
with tabs[1]:
    from circuits.tools.ablation import METHODS as ABL
    from circuits.toy.analysis import ablate_task

    method = st.radio(
        "Ablation", list(ABL), horizontal=True, index=list(ABL).index("mean"), key="toy_ablation"
    )
    key = ("abl", loaded.name, int(seed), method)
    if st.session_state.get("_toy_abl", (None,))[0] != key:
        with C.Progress(f"{method} ablation of every component", 1) as prog, loaded.lock:
            res = prog.attempt(
                "Ablation failed", ablate_task, model, batch, task, components(model), method=method
            )
            prog.step("done")
        st.session_state["_toy_abl"] = (key, res)
    res = st.session_state["_toy_abl"][1]
    if res is not None:
        metric = "accuracy" if "accuracy" in res.base else next(iter(res.base))
        st.plotly_chart(res.plot(metric), key="toy_abl_fig")
        st.dataframe(res.table(), hide_index=True)
        C.save_button(lambda: _draft("ablation", method, res, loaded.name, int(seed)), key="toy_abl_save")
with tabs[2]:
    if not is_tokens:
        st.info("Patching needs token prompts.")
    else:
        c1, c2 = st.columns(2)
        i_clean = c1.number_input("Clean example", 0, len(batch) - 1, 0, key="toy_clean")
        i_bad = c2.number_input("Corrupted example", 0, len(batch) - 1, 1, key="toy_bad")
        pos = int(batch.mask[int(i_clean)].nonzero()[-1]) if batch.mask[int(i_clean)].any() else -1
        target, foil = int(batch.targets[int(i_clean), pos]), int(batch.targets[int(i_bad), pos])
        st.caption(
            f"clean: {C.esc(' '.join(model.to_str_tokens(batch.tokens[int(i_clean)].tolist())))} → "
            f"{C.esc(model.decode([target]))}; corrupted: "
            f"{C.esc(' '.join(model.to_str_tokens(batch.tokens[int(i_bad)].tolist())))} → "
            f"{C.esc(model.decode([foil]))}"
        )
        from circuits.tools.patching import patch_heads, patch_residual

        clean, bad = batch.tokens[int(i_clean)].tolist(), batch.tokens[int(i_bad)].tolist()
        with loaded.lock:
            results = {
                tag: C.attempt(f"{what} patching failed", fn, model, clean, bad, target,
                               foil if foil != target else None, pos=pos)
                for tag, what, fn in (("heads", "Head", patch_heads), ("resid", "Residual", patch_residual))
            }
        for tag, res in results.items():
            if res is not None:
                st.plotly_chart(res.plot(), key=f"toy_patch_{tag}")
        S.share("toy_patch", loaded.name, [
            f"task = get_task({task.name!r}, **{info['task'].get('params', {})!r})",
            f"batch = task.batch('test', {N_EVAL}, {int(seed)})",
            f"clean, bad = batch.tokens[{int(i_clean)}].tolist(), batch.tokens[{int(i_bad)}].tolist()",
            "heads = " + S.call("patch_heads", S.M, S.Name("clean"), S.Name("bad"), target,
                                foil if foil != target else None, pos=pos),
            "resid = " + S.call("patch_residual", S.M, S.Name("clean"), S.Name("bad"), target,
                                foil if foil != target else None, pos=pos),
            "heads.plot()"], {}, imports=("from core.models.toy_tasks import get_task",
                                          "from circuits.tools.patching import patch_heads, patch_residual"))
with tabs[3]:
    if task.name != "modadd":
        st.info("Fourier plots are for modular-addition models; pick a modadd checkpoint.")
    else:
        from circuits.tools.fourier import fourier_analysis

        def _fourier():
            with loaded.lock:
                return C.attempt("Fourier analysis failed", fourier_analysis, model)

        four = SH.shared(("toy_fourier", loaded.name), _fourier)
        if four is not None:
            st.metric("key frequencies", ", ".join(map(str, four.key_freqs)))
            if four.embedding_spectrum is not None:
                spec = four.embedding_spectrum
                # the spectrum starts at frequency 1 (the constant term is left out): label by frequency
                st.plotly_chart(
                    V.bar(
                        [str(k) for k in range(1, len(spec) + 1)],
                        [float(x) for x in spec],
                        "Embedding energy per frequency",
                    ),
                    key="toy_four_spec",
                )
            st.plotly_chart(four.plot(), key="toy_four_fig")
with tabs[4]:
    from circuits.tools.spectra import plot_over_training, weight_spectra
    from circuits.toy.analysis import spectra_over_training

    table = SH.shared(("toy_spectra", loaded.name),
                      lambda: C.attempt("No spectra over training", spectra_over_training, model))
    if table is not None:
        value = st.selectbox(
            "Quantity",
            [c for c in table.columns if c not in ("step", "layer", "head", "matrix")],
            key="toy_spec_value",
        )
        st.plotly_chart(plot_over_training(table, value), key="toy_spectra")
    else:
        now = C.attempt("Spectra failed", weight_spectra, model)
        if now is not None:
            st.dataframe(now, hide_index=True)
with tabs[5]:
    frame = variants_table(entries)
    if frame.empty:
        st.info("No toy checkpoints with metrics yet.")
    else:
        st.dataframe(frame, hide_index=True)
        import plotly.express as px

        fig = px.bar(
            frame,
            x="model",
            y="test_accuracy",
            color="ffn",
            facet_col="task",
            title="Test accuracy by FFN variant",
        )
        fig.update_xaxes(matches=None)
        st.plotly_chart(fig, key="toy_variants")
