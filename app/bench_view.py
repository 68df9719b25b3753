"""The circuit benchmark's leaderboard (``workbench bench circuits`` runs): tasks x methods with CPR, CMD, their
intervals and seconds, the best per task marked, the curves of a chosen task, and any cell's circuit drawn in
the circuit view. Shown by the Circuit benchmark page and by the Runs page for a run of kind ``bench``.

A run keeps the whole result as ``results.json`` (read once per server: a run never changes) and, since
the benchmark ran as a job, each cell's edge scores (circuits/bench/cells.py); older runs show their tables
and say why their circuits cannot be drawn.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import shared as SH
from app.graph_view import LEGEND_HELP, inspect_clicked, show_subgraph

BEST = " ★"  # appended to the best cell of each task column (highest CPR, lowest CMD) clear of random
OLD_RUN = ("this run was saved before bench runs kept each cell's edge scores: run `workbench bench circuits` "
           "again to draw its circuits")


def read_result(run: Any) -> dict[str, Any]:
    """The run's full benchmark result (results.json), checked as JSON; RunStoreError when absent or damaged."""
    from core.checks import read_json
    from core.errors import RunStoreError

    file = run.path / "results.json"
    if not file.is_file():
        raise RunStoreError(f"run {run.id} has no results.json: not a circuit benchmark run")
    data = read_json(file, f"run {run.id}'s results.json", RunStoreError)
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list) or "config" not in data:
        raise RunStoreError(f"run {run.id}'s results.json is damaged: no tasks or config")
    return data


SHIPPED = "shipped:"  # the page's choice of a shipped leaderboard: SHIPPED + the file's name


def shipped_results() -> dict[str, Any]:
    """The leaderboards that ship in results/circuits/ (``core.paths.results_root``): file name -> path, those
    whose JSON is a benchmark result (tasks and config); read once per server."""
    from core.paths import results_root

    def find() -> dict[str, Any]:
        found = {}
        for path in sorted((results_root() / "circuits").glob("bench_*.json")):
            try:
                _check_result(_read_json(path, f"shipped {path.name}"), path.name)
            except Exception:  # noqa: BLE001 - a supplement of another shape (bench_known.json) is not a leaderboard
                continue
            found[path.name] = path
        return found

    return SH.shared(("bench_shipped", str(results_root())), find)


def _read_json(path: Any, what: str) -> Any:
    from core.checks import read_json
    from core.errors import RunStoreError

    return read_json(path, what, RunStoreError)


def _check_result(data: Any, what: str) -> dict[str, Any]:
    from core.errors import RunStoreError

    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list) \
            or not isinstance(data.get("config"), dict):
        raise RunStoreError(f"{what} is damaged: no tasks or config")
    if not all(isinstance(t, dict) and isinstance(t.get("methods"), dict) for t in data["tasks"]):
        raise RunStoreError(f"{what} is damaged: a task without methods")
    return data


def read_shipped(name: str) -> dict[str, Any]:
    """A shipped leaderboard's result, checked; RunStoreError when it is absent or damaged."""
    from core.errors import RunStoreError

    path = shipped_results().get(name)
    if path is None:
        raise RunStoreError(f"no shipped leaderboard {name}")
    return _check_result(_read_json(path, f"shipped {name}"), f"shipped {name}")


def shipped_caption(name: str, result: dict[str, Any]) -> str:
    """What a shipped leaderboard is and the settings it was measured under (an older one: its IOI was the
    names counterfactual, its random baseline one draw)."""
    cfg = result["config"]
    text = (f"Shipped leaderboard results/circuits/{name} (committed, not a run of this store): "
            f"{len(result['tasks'])} tasks x {len(cfg.get('methods') or [])} methods, levels "
            f"{', '.join(cfg.get('levels') or [])}, {cfg.get('n_train')} train / {cfg.get('n_test')} test prompts, "
            f"selection {cfg.get('selection')}, seed {cfg.get('seed')}.")
    if "random_seeds" not in cfg:
        text += (" Measured before issue 39: its ioi is the names counterfactual (ioi:counterfactual=names, not "
                 "MIB's S2 -> IO flip) and its random baseline one draw.")
    return text


def shape_of(store: Any, run_id: str) -> str:
    """"5 tasks x 4 methods" of a stored bench run, from its arguments (read once per server)."""

    def read() -> str:
        try:
            args = store.get(run_id).meta.get("args") or {}
            return f"{len(args.get('tasks') or [])} tasks x {len(args.get('methods') or [])} methods"
        except Exception:  # noqa: BLE001 - a run removed or damaged: its id alone still picks it
            return "unreadable"

    return SH.shared(("bench_shape", str(store.root), run_id), read)


def levels_of(result: dict[str, Any]) -> list[str]:
    """The levels measured, in the config's order."""
    found = {lv for t in result["tasks"] for m in t["methods"].values() for lv in m.get("levels", {})}
    return [lv for lv in result["config"].get("levels", []) if lv in found] or sorted(found)


def column_names(result: dict[str, Any]) -> dict[str, str]:
    """Each task's column name: its label (a task file's stem) when the labels are distinct, else the task."""
    labels = {t["task"]: t.get("label") or t["task"] for t in result["tasks"]}
    return labels if len(set(labels.values())) == len(labels) else {k: k for k in labels}


def _methods(result: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for t in result["tasks"]:
        seen += [m for m in t["methods"] if m not in seen]
    return seen


def _clear_of(cell: dict[str, Any], random: dict[str, Any] | None, key: str) -> bool | None:
    """Whether ``cell``'s interval lies wholly on the better side of random's (above it for CPR, below for CMD);
    None when the task has no random baseline."""
    if random is None:
        return None
    lo, hi = cell[f"{key}_ci"]
    r_lo, r_hi = random[f"{key}_ci"]
    return lo > r_hi if key == "cpr" else hi < r_lo


def table(result: dict[str, Any], level: str, key: str) -> Any:
    """Methods x tasks of ``key`` (cpr or cmd) as "value [lo, hi]". Per task the best method whose interval is
    clear of random's is marked with BEST (a method whose interval overlaps random's is no winner, however high
    its mean); ``frame.attrs["indistinguishable"]`` holds the (method, task) cells whose interval overlaps random's
    (drawn grey by ``styled``)."""
    import pandas as pd

    methods, tasks, names = _methods(result), result["tasks"], column_names(result)
    data: dict[str, list[str]] = {"method": methods}
    grey: set[tuple[str, str]] = set()
    for t in tasks:
        cells = {m: t["methods"].get(m, {}).get("levels", {}).get(level) for m in methods}
        random = cells.get("random")
        clear = {m: _clear_of(c, random, key) for m, c in cells.items() if c and m != "random"}
        grey |= {(m, names[t["task"]]) for m, ok in clear.items() if ok is False}
        winners = [m for m, ok in clear.items() if ok is not False]  # no random baseline: every method competes
        pick = max if key == "cpr" else min
        best = pick(winners, key=lambda m: cells[m][key]) if winners else None
        column = []
        for m in methods:
            c = cells[m]
            if not c:
                column.append("-")
                continue
            lo, hi = c[f"{key}_ci"]
            column.append(f"{c[key]:.3f} [{lo:.2f}, {hi:.2f}]" + (BEST if m == best else ""))
        data[names[t["task"]]] = column
    frame = pd.DataFrame(data)
    frame = frame[[c for c in frame.columns if c == "method" or (frame[c] != "-").any()]]
    frame.attrs["indistinguishable"] = sorted(grey)
    return frame


def styled(frame: Any) -> Any:
    """``table``'s frame with the cells indistinguishable from random in grey."""
    grey = set(map(tuple, frame.attrs.get("indistinguishable", [])))

    def colour(column: Any) -> list[str]:
        return ["color: #9e9e9e" if (m, column.name) in grey else "" for m in frame["method"]]

    return frame.style.apply(colour, axis=0)


def seconds_table(result: dict[str, Any]) -> Any:
    """Methods x tasks: scoring seconds on train, and the evaluation of every curve in parentheses."""
    import pandas as pd

    methods = _methods(result)
    data: dict[str, list[str]] = {"method": methods}
    for t in result["tasks"]:
        column = []
        for m in methods:
            res = t["methods"].get(m)
            if res is None:
                column.append("-")
                continue
            ev = sum(lv.get("eval_seconds", 0.0) for lv in res.get("levels", {}).values())
            column.append(f"{res['seconds']:.1f} ({ev:.0f})")
        data[column_names(result)[t["task"]]] = column
    return pd.DataFrame(data)


def goal_table(goal: dict[str, dict[str, Any]]) -> Any:
    """Tasks of ``dpa_goal`` (circuits/bench/goal.py): the DPA variants best or tied best by intervals on CPR and
    on CMD, their scoring time against EAP-IG's in the same run, and which meets both within a third of its
    cost."""
    import pandas as pd

    rows = goal.values()
    return pd.DataFrame({"task": list(goal),
                         "best or tied on CPR": [", ".join(r["cpr"]) or "-" for r in rows],
                         "on CMD": [", ".join(r["cmd"]) or "-" for r in rows],
                         "time / EAP-IG's": [", ".join(f"{m} {c:.2f}" for m, c in r["cost"].items() if c is not None)
                                             for r in rows],
                         "goal met by": [", ".join(r["met"]) or "no" for r in rows]})


def agreement_table(result: dict[str, Any]) -> Any:
    """Methods x tasks: "Spearman / Pearson" of each method's edge scores against activation patching on a
    sample of edges (circuits/bench/agreement.py); None when the run patched no sample."""
    import pandas as pd

    from circuits.bench.report import agreement_cells

    cells = agreement_cells(result)
    if not cells:
        return None
    tasks = [t["task"] for t in result["tasks"] if t.get("patching_agreement")]
    return pd.DataFrame({"method": list(cells), **{t: [row.get(t, "-") for row in cells.values()] for t in tasks}})


def decade_ticks(values: list[float]) -> dict[str, Any]:
    """A log axis ticked at every power of ten the values span, each written in full ("0.001", "0.01", "0.1",
    "1"), never plotly's minor digits between decades ("0.001, 2, 5, 0.01")."""
    import math

    pos = [v for v in values if v > 0 and math.isfinite(v)]
    if not pos:
        return {"type": "log"}
    lo, hi = math.floor(math.log10(min(pos))), math.ceil(math.log10(max(pos)))
    vals = [10.0**e for e in range(lo, max(hi, lo + 1) + 1)]
    return {"type": "log", "tickmode": "array", "tickvals": vals, "ticktext": [f"{v:g}" if v >= 1e-4 else f"{v:.0e}"
                                                                               for v in vals]}


def curves_figure(result: dict[str, Any], task: str, level: str, key: str) -> Any:
    """Each method's faithfulness curve on ``task`` (``key``: the cpr curve, signed scores, or the cmd one,
    |scores|) against the fraction of the graph kept."""
    import plotly.graph_objects as go

    t = next(t for t in result["tasks"] if t["task"] == task)
    fig = go.Figure()
    fractions: list[float] = []
    for method, res in t["methods"].items():
        lv = res.get("levels", {}).get(level)
        if lv:
            c = lv["curves"][key]
            fractions += [float(x) for x in c["fractions"]]
            fig.add_trace(go.Scatter(x=c["fractions"], y=c["faithfulness"], mode="lines+markers", name=method,
                                     customdata=c["edges_kept"],
                                     hovertemplate="%{x:.3f} of the graph (%{customdata} kept): %{y:.3f}"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    what = "signed scores (CPR)" if key == "cpr" else "|scores| (CMD)"
    fig.update_layout(title=f"{task}, {level} level: faithfulness by circuit size, {what}", height=380,
                      xaxis={**decade_ticks(fractions), "title": "fraction of the graph kept"},
                      yaxis={"title": "normalised faithfulness"}, margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def drawable(run: Any) -> tuple[set[tuple[str, str]], str | None]:
    """The (task, method) cells whose circuit can be drawn, and why none can (None when some can)."""
    meta = run.result()
    if "cells" not in meta:
        return set(), OLD_RUN
    return {(c.get("task"), c.get("method")) for c in meta["cells"] if isinstance(c, dict)}, None


def _subgraph(run: Any, task: str, method: str, k: int) -> Any:
    from circuits.bench.cells import cell_subgraph

    return SH.shared(("bench_cell", str(run.path), task, method, k),
                     lambda: C.attempt("Cannot draw the circuit", cell_subgraph, run, task, method, k))


def show_leaderboard(run: Any, prefix: str) -> bool:
    """The leaderboard of a bench run, its curves and the circuit of a chosen cell; False when unreadable."""
    result = SH.shared(("bench_result", str(run.path)), lambda: C.attempt("Cannot read the benchmark", read_result,
                                                                          run))
    if result is None:
        return False
    return show_result(result, prefix, run)


def show_shipped(name: str, prefix: str) -> bool:
    """A shipped leaderboard (results/circuits/NAME), marked as shipped with its settings; its circuits cannot be
    drawn (a shipped document keeps no edge scores)."""
    result = SH.shared(("bench_shipped_result", name),
                       lambda: C.attempt("Cannot read the shipped leaderboard", read_shipped, name))
    if result is None:
        return False
    st.info(C.esc(shipped_caption(name, result)))
    return show_result(result, prefix, None)


def show_result(result: dict[str, Any], prefix: str, run: Any | None) -> bool:
    """The leaderboard of a result (a run's, or a shipped one when ``run`` is None)."""
    cfg = result["config"]
    st.caption(f"{C.esc(result['model'])} · {len(result['tasks'])} tasks · {cfg.get('n_train')} train / "
               f"{cfg.get('n_test')} {cfg.get('eval_split', 'test')} prompts · selection "
               f"{C.code(cfg.get('selection'))} · "
               f"{cfg.get('n_boot')} bootstrap resamples · {result['seconds'] / 60:.1f} min")
    levels = levels_of(result)
    level = st.radio("Level", levels, horizontal=True, key=f"{prefix}_level") if len(levels) > 1 else levels[0]
    st.markdown("**CPR** (area under the faithfulness curve; higher is better; ★ best per task)",
                help="MIB's CPR over its grid of circuit sizes, with a 95% bootstrap interval over the prompts.")
    st.dataframe(styled(table(result, level, "cpr")), hide_index=True, key=f"{prefix}_cpr")
    st.markdown("**CMD** (area between the curve and 1; lower is better; ★ best per task)")
    st.dataframe(styled(table(result, level, "cmd")), hide_index=True, key=f"{prefix}_cmd")
    st.caption("★ marks the best method of a task only where its 95% interval is clear of random's; grey: an "
               "interval that overlaps random's (indistinguishable from the random baseline on these prompts).")
    st.markdown("**Seconds** (scoring on train; evaluation of all curves in parentheses)")
    st.dataframe(seconds_table(result), hide_index=True, key=f"{prefix}_seconds")
    from circuits.bench.goal import dpa_goal, goal_summary

    goal = dpa_goal(result, level)  # empty where the run has no EAP-IG or no DPA variant at this level
    if goal:
        st.markdown("**DPA against EAP-IG**: variants best or tied best by intervals, at what share of EAP-IG's "
                    "scoring time", help="The goal: a DPA variant best, or tied best (its 95% interval overlaps "
                    "the best's), on both CPR and CMD, at no more than 1/3 of EAP-IG's scoring time.")
        st.dataframe(goal_table(goal), hide_index=True, key=f"{prefix}_goal")
        st.caption(goal_summary(goal))
    agree = agreement_table(result)
    if agree is not None:
        n = next(t["patching_agreement"]["n_edges"] for t in result["tasks"] if t.get("patching_agreement"))
        st.markdown(f"**Agreement with activation patching** on a sample of {n} edges (Spearman / Pearson)",
                    help="Exact single-edge patching effects on the train prompts against each method's scores "
                         "on the same edges; a uniform sample is mostly tiny effects.")
        st.dataframe(agree, hide_index=True, key=f"{prefix}_agreement")

    tasks = [t["task"] for t in result["tasks"]]
    c1, c2 = st.columns([3, 1])
    task = c1.selectbox("Curves of task", tasks, key=f"{prefix}_task")
    curve = c2.radio("Curve", ["cpr", "cmd"], horizontal=True, key=f"{prefix}_curve",
                     format_func=lambda k: "CPR (signed)" if k == "cpr" else "CMD (|score|)")
    st.plotly_chart(curves_figure(result, task, level, curve), key=f"{prefix}_curves")
    if run is None:
        st.caption("A shipped leaderboard keeps no edge scores, so its circuits cannot be drawn: run "
                   "`workbench bench circuits` to get a run whose cells can be opened.")
    else:
        _circuit(run, result, tasks, prefix)
    return True


def _circuit(run: Any, result: dict[str, Any], tasks: list[str], prefix: str) -> None:
    st.subheader("A cell's circuit")
    cells, why = C.attempt("Cannot read the run", drawable, run) or (set(), "the run's result.json is unreadable")
    c1, c2, c3 = st.columns([2, 2, 1])
    task = c1.selectbox("Task", tasks, key=f"{prefix}_cell_task")
    method = c2.selectbox("Method", _methods(result), key=f"{prefix}_cell_method")
    k = int(c3.number_input("Edges", 5, 1000, 50, step=5, key=f"{prefix}_cell_k"))
    if why is None and (task, method) not in cells:
        why = f"{method} has no edge scores on {task} (node level only, or not run on it)"
    opened = f"{prefix}_opened"
    if st.button("Open this cell's circuit", key=f"{prefix}_open", disabled=why is not None):
        st.session_state[opened] = (run.id, task, method, k)
    if why is not None:
        st.caption(f"Circuit unavailable: {C.esc(why)}.")
    got = st.session_state.get(opened)
    if not got or got[0] != run.id:
        return
    _, task, method, k = got
    sub = _subgraph(run, task, method, k)
    if sub is None:
        return
    clicked = show_subgraph(sub, key=f"{prefix}_circuit",
                            title=f"{method} on {task}: top {len(sub.edges)} edges (train-split scores)")
    edge = next((t["methods"].get(method, {}).get("levels", {}).get("edge") for t in result["tasks"]
                 if t["task"] == task), None)
    if edge:
        st.caption(f"{C.esc(method)} on {C.esc(task)} at edge level: CPR {edge['cpr']:.3f}, CMD {edge['cmd']:.3f}.")
    st.caption(LEGEND_HELP)
    inspect_clicked(sub, clicked, prefix)
