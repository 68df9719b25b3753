"""Attribution: which tokens, heads, neurons and edges drive the model's target (minus foil) logit."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from app import attr_inputs as AI
from app import circuit_views as CV
from app import common as C
from app import jobs_view as J
from app import share as S
from app import shared as SH
from app import views as V
from app.head_view import show_head

DEFAULT_PROMPT = "When Mary and John went to the store, John gave a drink to"
COMPONENT_LEVELS = ("head", "neuron", "qk")
CACHE_SIZE = 12  # results per session; a neuron-level result of a long prompt is tens of MB


def rebuild(run: Any):
    """An AttributionResult from a stored "attribute" run (its scores checked against its axes)."""
    from attribution.result import AttributionResult

    tensors = run.tensors()
    if "scores" not in tensors:
        raise ValueError(f"run {run.id} holds no scores tensor")
    return AttributionResult.from_json(run.result(), scores=tensors["scores"])


def compute(
    loaded: Any, prompt: str, target: str, foil: str | None, method: str, levels: tuple[str, ...],
    position: int | None = None,
) -> dict[str, Any]:
    """AttributionResults for ``levels``, memoised in this session (reruns redraw without recomputing).

    A method that declares a one-pass implementation (MethodSpec.one_pass: DPA, IFR) gives every level from
    one pass; other methods run per level.
    """
    cache = st.session_state.setdefault("_attr_cache", {})
    sig = (loaded.name, prompt, target, foil, method, position)
    for lv in levels:  # what another session of this server computed (a new tab on the same prompt)
        if (*sig, lv) not in cache and (got := SH.peek(("attribute", *sig, lv))) is not None:
            cache[(*sig, lv)] = got
    todo = [lv for lv in levels if (*sig, lv) not in cache]
    if todo:
        with loaded.lock:
            fresh = _attribute(loaded.model, prompt, target, foil, method, tuple(todo), position)
        for lv, res in fresh.items():
            cache[(*sig, lv)] = res
            SH.put(("attribute", *sig, lv), res)
        while len(cache) > CACHE_SIZE:
            cache.pop(next(iter(cache)))
    return {lv: cache[(*sig, lv)] for lv in levels}


def _attribute(
    model: Any, prompt: str, target: str, foil: str | None, method: str, levels: tuple[str, ...],
    position: int | None,
) -> dict[str, Any]:
    from attribution import attribute_levels

    return attribute_levels(model, prompt, target, foil, method=method, levels=levels, position=position)


def available_methods(level: str) -> list[str]:
    from attribution.methods import METHODS

    return [
        m for m, spec in METHODS.items() if level in spec.levels and C.has_engine(spec.impl.split(":")[0])
    ]


def save_all(results: list[Any], sig: tuple) -> None:
    """Button callback: runs before the page redraws, so the saved runs are listed at once."""
    try:
        st.session_state["attr_saved"] = (sig, [r.save(C.store()).id for r in results])
    except Exception as exc:
        st.session_state["attr_save_error"] = str(exc)


def show_saved() -> None:
    with st.expander("Open a saved attribution run"):
        run = C.run_picker("attribute", key="attr_open")
        if run is None:
            return
        res = C.attempt(f"Cannot read run {run.id}", rebuild, run)
        if res is not None:
            st.caption(
                f"{C.esc(res.model)} · {C.esc(res.method)} · {C.esc(res.level)} · prompt {C.quoted(res.prompt)}"
                f" · target {C.quoted(res.target)} · foil {C.quoted(res.foil)}"
            )
            st.plotly_chart(res.plot(), key="attr_saved_fig")
            st.dataframe(V.top_items(res.scores, res.axes, res.tokens), hide_index=True)


def show_faithfulness(loaded: Any, prompt: str, target: str, foil: str | None, methods: list[str]) -> None:
    """Disrupt / recover curves for this one prompt (attribution.faithfulness.evaluate on one example)."""
    faith = C.engine("attribution.faithfulness", "faithfulness")
    if faith is None:
        return
    level = st.radio("Items", list(faith.LEVELS), horizontal=True, key="attr_faith_level")
    rank = st.radio("Rank by", list(faith.RANKS), horizontal=True, key="attr_faith_rank",
                    help="signed: items pushing the target up first; abs: largest influence either way first")
    usable = [m for m in methods if m in available_methods(level)]
    if not usable:
        st.info(f"None of the chosen methods scores at the {level} level.")
        return
    sig = (loaded.name, prompt, target, foil, tuple(usable), level, rank)
    if st.button(f"Compute curves for {', '.join(usable)}", key="attr_faith_go"):
        example = {"prompt": prompt, "target": target, **({"foil": foil} if foil else {})}
        with C.Progress("Disrupt / recover curves", 1) as prog, loaded.lock:
            res = prog.attempt(
                "Faithfulness failed", faith.evaluate, loaded.model, [example], usable, level=level, rank=rank
            )
            prog.step("done")
        if res is not None:
            st.session_state["_attr_faith"] = (sig, res)
    held = st.session_state.get("_attr_faith")
    if not held or held[0] != sig:
        st.caption(
            "Ablate the top (disrupt) or all but the top (recover) items in each method's order and "
            "watch p(target); a faithful ranking drops fast and recovers fast."
        )
        return
    res = held[1]
    st.plotly_chart(res.plot(), key="attr_faith_fig")
    st.dataframe(res.table(), hide_index=True)
    C.save_button(lambda: res, key="attr_faith_save")


# -- the page ------------------------------------------------------------------------------------------
def code_lines(results: dict[str, Any], levels: tuple[str, ...]) -> list[str]:
    """``r = wb.attribute(...)`` for each (method, level) result shown, with the page's arguments."""
    lines = []
    shown = [(method, level) for method, level in results if level in levels]
    for method, level in shown:
        name = f"r_{method}" if len(shown) > 1 else "r"
        lines.append(f"{name} = " + S.call("wb.attribute", S.M, prompt, target=target, foil=foil, method=method,
                                           level=level, position=position))
        lines.append(f"{name}.plot()")
    return lines


def link(level: str) -> dict[str, Any]:
    return {"prompt": prompt, "target": target, "foil": foil, "methods": methods, "method": detail,
            "level": level, "position": position}


TIMES: dict[str, float] = {}  # where this run's time went (shown at the bottom of the page)
PAGE_START = time.perf_counter()
st.title("Attribution")
st.caption("Which tokens, heads, neurons and attention edges move the target logit (minus the foil's).")
if C.engine("attribution", "attribution") is None:
    st.stop()
from attribution.methods import METHODS  # noqa: E402

show_saved()

AI.mark_typed(C.seed_from_query({"prompt": "attr_prompt", "methods": "_attr_methods_q", "target": "attr_target",
                                 "foil": "attr_foil", "method": "attr_detail", "position": "attr_position",
                                 "level": "_attr_level_q"}, {"attr_position": int}))
if "_attr_methods_q" in st.session_state:  # ?methods=dpa,gradient
    st.session_state["attr_methods"] = [m for m in st.session_state.pop("_attr_methods_q").split(",") if m]
loaded = C.sidebar_model(("llm", "toy"), key="attr_model", default="smollm2-135m")

C.keep("attr_prompt", DEFAULT_PROMPT)
prompt = st.text_area("Prompt", key="attr_prompt", on_change=C.remember("attr_prompt"), height=80)
if not prompt.strip():
    st.warning("The prompt is empty: type a prompt for the model to continue.")
    st.stop()
TIMES["model"] = time.perf_counter() - PAGE_START
ppass = AI.prompt_pass(loaded, prompt)
TIMES["top predictions"] = time.perf_counter() - PAGE_START - TIMES["model"]
if ppass is None:
    st.stop()
n_tokens = len(ppass.tokens)
position = AI.position_strip(ppass.tokens, (loaded.name, prompt))
last = position == n_tokens - 1
AI.follow(loaded, prompt, ppass, position)
preds = ppass.tops[position] if ppass.tops else ppass.top
st.caption(("Model's top predictions" + ("" if last else f" after token {position} "
            f"({C.quoted(ppass.tokens[position])}; the prompt continues with "
            f"{C.quoted(ppass.tokens[position + 1])})"))
           + ": " + " · ".join(f"{C.quoted(t)} {p:.2f}" for t, p in preds))

c1, c2, c3 = st.columns([1, 1, 2])
target = c1.text_input(
    "Target token",
    key="attr_target",
    on_change=AI.on_typed,
    args=("attr_target",),
    help="One token of the model, leading space included (' Mary', not 'Mary'). Kept when the prompt "
    "changes once you type it; empty it to follow the model's prediction again.",
)
foil = c2.text_input(
    "Foil token (optional)",
    key="attr_foil",
    on_change=AI.on_typed,
    args=("attr_foil",),
    help="Scores then explain target minus foil. Kept when the prompt changes once you type it.",
)
foil = foil or None
AI.leading_space_hint(loaded.model, "attr_target", "target")
AI.leading_space_hint(loaded.model, "attr_foil", "foil")
token_methods = available_methods("token")
if not token_methods:
    st.info("No attribution method engine is in this checkout yet (attribution/dpa, attribution/baselines).")
    st.stop()
C.keep("attr_methods", ["dpa"] if "dpa" in token_methods else token_methods[:1])
st.session_state["attr_methods"] = [m for m in st.session_state["attr_methods"] if m in token_methods]
methods = c3.multiselect(
    "Methods (side by side)",
    token_methods,
    key="attr_methods",
    on_change=C.remember("attr_methods"),
    help="; ".join(f"{m}: {METHODS[m].help}" for m in token_methods),
)
if not methods:
    st.info("Pick at least one method.")
    st.stop()
comp_methods = [m for m in methods if any(m in available_methods(lv) for lv in COMPONENT_LEVELS)]
if st.session_state.get("attr_detail") not in comp_methods:
    st.session_state.pop("attr_detail", None)
detail = st.sidebar.selectbox("Method for heads, neurons and edges", comp_methods or ["—"], key="attr_detail")

try:
    enc_check = loaded.model.encode(prompt, target, foil)
except Exception as exc:
    C.error("Bad target or foil", exc)
    st.stop()
pos_arg = None if last else position

jobs: dict[str, tuple[str, ...]] = {m: ("token",) for m in methods}
if detail in comp_methods:
    jobs[detail] = ("token",) + tuple(lv for lv in COMPONENT_LEVELS if detail in available_methods(lv))
# Levels estimated over a few seconds (activation patching of heads, neurons) never start silently here:
# each shows its measured estimate and runs, once confirmed, as a job outside this process.
slow = J.slow_levels(loaded, enc_check, detail, tuple(lv for lv in jobs.get(detail, ()) if lv != "token"))
if slow:
    jobs[detail] = tuple(lv for lv in jobs[detail] if lv not in slow)
results: dict[tuple[str, str], Any] = {}
started = time.perf_counter()
with C.Progress(f"Attributing {len(enc_check.str_tokens)} tokens", len(jobs)) as prog:
    for method, levels in jobs.items():
        got = prog.attempt(f"{method} attribution", compute, loaded, prompt, target, foil, method, levels, pos_arg)
        results.update({(method, lv): res for lv, res in (got or {}).items()})
        prog.step(f"{method} · {'/'.join(levels)}")
TIMES["attribution"] = time.perf_counter() - started
results.update(J.level_jobs(loaded, prompt, target, foil, detail, slow, pos_arg))
token_results = {m: results[(m, "token")] for m in methods if (m, "token") in results}
if not token_results:
    st.stop()
position = pos_arg  # the notebook code and the link name the position only when it is not the last

first = next(iter(token_results.values()))
m1, m2, m3 = st.columns(3)
m1.metric("target logit" + (" − foil logit" if foil else ""), f"{first.target_logit:+.3f}")
m2.metric("tokens", len(first.tokens))
engine_s = sum(
    max(r.seconds for (m, _), r in results.items() if m == meth) for meth in {m for m, _ in results}
)
m3.metric(
    "engine time", f"{engine_s:.2f} s", help="Seconds the engines took for these results (when computed)."
)
for m, r in token_results.items():  # path methods (integrated gradients) report whether their scores add up
    if r.convergence_delta is not None:
        (st.caption if r.converged else st.warning)(
            f"{m}: completeness gap {r.convergence_delta:+.3g} (sum of scores − (f(input) − f(baseline)); "
            f"f(input) − f(baseline) is {r.target_logit - r.baseline_logit:+.3g})" + ("" if r.converged else
            ": not converged; try baseline=mean with keep_first=true, or more steps"))
skip_tokens = V.first_token_toggle("attr_tokens_skip0")
st.plotly_chart(
    V.token_heatmap({m: r.scores for m, r in token_results.items()}, first.tokens, skip_first=skip_tokens),
    key="attr_tokens",
)
with st.expander("Coloured tokens", expanded=True):  # the same scores as text (CircuitsVis' colored_tokens)
    from app.attention_view import show_colored_tokens

    show_colored_tokens(token_results, skip_tokens)
S.share("attr_tokens", loaded.name, code_lines(results, ("token",)), link("token"))

TABS = ["Heads", "Attention", "Neurons", "Information flow", "Direct logit attribution", "Patching",
        "Disrupt / recover", "Save"]
level_q = st.session_state.pop("_attr_level_q", None)
default_tab = {"head": "Heads", "neuron": "Neurons", "qk": "Information flow",
               "edge": "Information flow"}.get(level_q or "")  # edge: links made before qk had its name
tabs = st.tabs(TABS, default=default_tab)
with tabs[0]:
    if (detail, "head") in results:
        show_head(loaded, prompt, target, foil, results[(detail, "head")].scores,
                  (loaded.name, prompt, target, foil, detail, position), -1 if position is None else position, TIMES)
        S.share("attr_heads", loaded.name, code_lines({(detail, "head"): results[(detail, "head")]}, ("head",)),
                link("head"))
    else:
        st.info(f"{detail} gives no head scores; pick another method for components.")
with tabs[1]:
    from app.attention_view import show_attention

    show_attention(loaded, prompt)
with tabs[2]:
    if (detail, "neuron") in results:
        res = results[(detail, "neuron")]
        skip_neurons = V.first_token_toggle("attr_neurons_skip0")
        top_neurons = V.top_items(res.scores, res.axes, res.tokens, k=25, skip_first=skip_neurons)
        n_left, n_right = st.columns([1, 1])
        if len(top_neurons):
            n_left.plotly_chart(V.neuron_figure(top_neurons, res.tokens, int(res.scores.shape[0])),
                                key="attr_neurons_fig")
        n_right.dataframe(top_neurons, hide_index=True)
        if skip_neurons:
            st.caption("Neurons at position 0 are left out of this ranking (turn the toggle off to include them).")
        S.share("attr_neurons", loaded.name, code_lines({(detail, "neuron"): res}, ("neuron",)), link("neuron"))
    else:
        st.info(f"{detail} gives no neuron scores.")
with tabs[3]:
    started = time.perf_counter()
    if position is not None:
        st.info("The information-flow circuit explains the last position; click the last token above to see it.")
    elif CV.prompt_circuit(loaded, prompt, target, foil, key="attr_flow"):
        TIMES["circuit"] = time.perf_counter() - started
with tabs[4]:
    from app.dla_view import show_dla

    show_dla(loaded, prompt, target, foil, position)
with tabs[5]:
    from app.patching_view import show_patching

    show_patching(loaded, prompt, target, foil, position=position)
with tabs[6]:
    if position is not None:
        st.info("Disrupt / recover curves are for the last position; click the last token above to see them.")
    else:
        show_faithfulness(loaded, prompt, target, foil, methods)
with tabs[7]:
    st.write(f"{len(results)} results: " + ", ".join(f"{m}·{lv}" for m, lv in results))
    sig = (loaded.name, prompt, target, foil, position, tuple(results))
    st.button(
        "Save all to the run store", key="attr_save", on_click=save_all, args=(list(results.values()), sig)
    )
    if st.session_state.get("attr_save_error"):
        st.error(f"Could not save: {C.esc(st.session_state.pop('attr_save_error'))}")
    saved = st.session_state.get("attr_saved")
    if saved and saved[0] == sig:
        st.success(
            "Saved runs (open them on the Runs page or above): " + ", ".join(C.code(i) for i in saved[1])
        )

TIMES["whole page"] = time.perf_counter() - PAGE_START
st.caption("This run: " + " · ".join(f"{k} {v:.2f} s" for k, v in TIMES.items()))
