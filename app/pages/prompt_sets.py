"""Prompt sets: one attribution method over a JSONL prompt file (``workbench attribute-set`` in the browser)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from app import jobs_view as J
from app import share as S
from app.prompt_source import pick_rows


def show(res: Any) -> None:
    m1, m2, m3 = st.columns(3)
    m1.metric("prompts", len(res.results))
    m2.metric("attribution time", f"{res.seconds:.2f} s")
    m3.metric("per prompt", f"{res.seconds_per_prompt:.3f} s",
              help=f"{res.method} ran {res.batch_size} prompt(s) per pass")
    st.plotly_chart(res.plot(), key="sets_mean")
    table = res.table()
    st.dataframe(table, hide_index=True)
    labels = [f"{i}: {p}" for i, p in enumerate(table["prompt"])]
    pick = st.selectbox("Look at one prompt", range(len(labels)), format_func=lambda i: labels[i], key="sets_pick")
    st.plotly_chart(res.results[pick].plot(), key="sets_one")
    C.save_button(lambda: res, key="sets_save")


def per_prompt_seconds(loaded: Any, row: dict[str, Any], method: str, level: str, use_foil: bool) -> float | None:
    """Seconds one prompt of the set costs with this method here, measured once per (model, method, level,
    prompt): activation patching from attribution/cost.py (one timed batch of items), any other method by
    running it on the prompt (a pass or a few). None when the prompt does not encode (the run says why)."""
    key = (loaded.name, method, level, row["prompt"], row.get("target"), row.get("foil") if use_foil else None)
    held = st.session_state.setdefault("_sets_cost", {})
    if key not in held:
        import time

        from attribution import attribute
        from attribution.cost import estimate

        foil = row.get("foil") if use_foil else None
        try:
            with loaded.lock:
                enc = loaded.model.encode(row["prompt"], row.get("target"), foil)
                cost = estimate(loaded.model, enc, method, level)
                if cost is None:
                    started = time.perf_counter()
                    attribute(loaded.model, row["prompt"], target=row.get("target"), foil=foil, method=method,
                              level=level)
                    held[key] = time.perf_counter() - started
                else:
                    held[key] = cost.seconds
        except Exception:  # a bad row: the set's own run reports it
            held[key] = None
    return held[key]


def set_from_run(run_id: str) -> Any:
    """An AttributionSet read back from its run (a job's result)."""
    from attribution.prompt_set import AttributionSet

    return AttributionSet.from_run(C.store().get(run_id))


st.title("Prompt sets")
st.caption("One method over a whole prompt file: each prompt's top items, their mean, and the time it took.")
engine = C.engine("attribution.prompt_set", "prompt-set attribution")
if engine is None:
    st.stop()
from attribution.methods import METHODS  # noqa: E402

loaded = C.sidebar_model(("llm", "toy"), key="sets_model", default="smollm2-135m")

c1, c2, c3 = st.columns([1, 1, 1])
method = c1.selectbox("Method", list(METHODS), key="sets_method",
                      help="; ".join(f"{m}: {s.help}" for m, s in METHODS.items()))
level = c2.selectbox("Level", list(METHODS[method].levels), key="sets_level")
limit = int(c3.number_input("First N prompts", min_value=1, max_value=10_000, value=20, key="sets_limit"))
c4, c5 = st.columns(2)
use_foil = c4.checkbox("Explain target minus foil (when a row has one)", value=True, key="sets_foil")
batch = int(c5.number_input("DPA prompts per pass", min_value=1, max_value=256, value=16, key="sets_batch",
                            disabled=method != "dpa"))
picked = pick_rows(limit, key="sets")
if picked is None:
    st.stop()
name, rows = picked
sig = (loaded.name, name, method, level, limit, use_foil, batch)
# The whole set's cost, from the first prompt measured here: a set estimated over a few seconds runs as a job
# outside this server (every session stays usable), after the user confirms; a cheap one runs here at once.
cost = per_prompt_seconds(loaded, rows[0], method, level, use_foil)
estimate = None if cost is None else cost * len(rows)
from workbench.scheduler.specs import AttributeSetSpec  # noqa: E402

spec = AttributeSetSpec(model=loaded.name, rows=rows, method=method, level=level, use_foil=use_foil,
                        batch_size=batch, prompts_file=name)
held = st.session_state.get("_sets_result")
# the job widget (app/jobs_view.py): a done job's set (any session's, or `workbench attribute-set`'s), a
# running one's progress, why one failed
job = J.follow(spec, "_sets_job", "sets_job") if not (held and held[0] == sig) else None
if job is not None and job.state == "done" and job.run_id:
    res = C.attempt("Cannot read the job's result", set_from_run, job.run_id)
    if res is not None:
        held = (sig, res)
        st.session_state["_sets_result"] = held
elif job is not None and job.state in J.ACTIVE:
    pass  # its live panel is shown
elif estimate is not None and estimate > J.THRESHOLD_S and not (held and held[0] == sig):
    text = f"{len(rows)} prompts x {cost:.2f} s each (measured on the first prompt) = about {estimate:.0f} s"
    if J.start_button(spec, "_sets_job", f"Attribute {len(rows)} prompts with {method} at {level} level as a job",
                      estimate=(estimate, text), button="sets_job_go") is not None:
        st.rerun()
elif st.button(f"Attribute {len(rows)} prompts with {method} at {level} level", key="sets_go"):
    with C.Progress(f"{method} · {level} · {len(rows)} prompts", len(rows)) as prog, loaded.lock:

        def advance(n: int) -> None:
            for _ in range(n):
                prog.step(f"{prog.done + 1} of {len(rows)} prompts")

        res = prog.attempt("Attribution failed", engine.attribute_set, loaded.model, rows, method=method, level=level,
                           use_foil=use_foil, batch_size=batch, on_step=advance)
    if res is not None:
        held = (sig, res)
        st.session_state["_sets_result"] = held
if held and held[0] == sig:
    show(held[1])
    S.share("sets", loaded.name,
            ["r = " + S.call("wb.attribute_set", S.M, f"data/prompts/{name}" if not name.endswith("upload") else name,
                             method=method, level=level, use_foil=use_foil, batch_size=batch, limit=limit),
             "r.table()"], {"method": method, "level": level})
elif job is None:
    here = "" if estimate is None else f" (about {estimate:.1f} s here)"
    st.caption(f"{len(rows)} prompts from {C.esc(name)}{here}; press the button to attribute them.")
