"""Model: pick from the zoo or a local path, see the architecture, try a quick generation."""

from __future__ import annotations

import streamlit as st

from app import common as C
from app import share as S
from app import shared as SH


def clean_continuation(model, text: str) -> tuple[str, str | None]:
    """The continuation up to the first special token (``<|im_end|>``, ``</s>`` ...), and that token."""
    tok = getattr(model, "tokenizer", None)
    specials = [t for t in (getattr(tok, "all_special_tokens", None) or []) if t]
    cut, stop = len(text), None
    for t in specials:
        i = text.find(t)
        if 0 <= i < cut:
            cut, stop = i, t
    return text[:cut], stop


st.title("Model")
st.caption("Every model a user can load now; loaded once per server and shared by all sessions and pages.")

with st.expander("The zoo", expanded=False):
    import workbench as wb

    st.dataframe(wb.models(), hide_index=True)

name = C.model_picker(("llm", "toy", "vit"), key="model_name", default="smollm2-135m")
loaded = C.get_model(name)
if loaded is None:
    st.stop()
model = loaded.model
st.success(f"{C.esc(loaded.name)} loaded in {loaded.seconds:.2f} s (held for the whole server)")
arch_obj = getattr(model, "arch", None)
if arch_obj is not None:
    arch = arch_obj.to_dict() if hasattr(arch_obj, "to_dict") else dict(arch_obj)
elif hasattr(model, "architecture"):  # the ViTs describe themselves this way
    arch = model.architecture()
else:
    arch = {}
c1, c2 = st.columns([1, 1])
with c1:
    st.subheader("Architecture")
    st.dataframe([{"fact": k, "value": str(v)} for k, v in arch.items()], hide_index=True)
with c2:
    st.subheader("Identity")
    st.json(
        {
            "name": getattr(model, "name", loaded.name),
            "kind": getattr(model, "kind", None),
            "backend": getattr(model, "backend", None),
            "info": getattr(model, "info", {}),
        }
    )
    st.caption(
        f"Models loaded by this server so far: {len(C.LOADS)} ({', '.join(C.esc(x['name']) for x in C.LOADS)})"
    )

if not hasattr(model, "generate") or getattr(model, "kind", "llm") == "vit":
    st.info("This model has no text generation (e.g. an image classifier).")
    st.stop()

st.subheader("Quick generate")
C.seed_from_query({"prompt": "model_prompt"})
C.keep("model_prompt", "The capital of France is")
prompt = st.text_input("Prompt", key="model_prompt", on_change=C.remember("model_prompt"))
n_new = st.slider("New tokens", 1, 64, 12, key="model_new_tokens")
if not prompt.strip():
    st.warning("The prompt is empty: type something for the model to continue.")
    st.stop()
sig = (loaded.name, prompt, n_new)
cache = st.session_state.setdefault("_model_gen", {})
if sig not in cache:

    def _gen() -> str:
        with loaded.lock:
            return model.generate(prompt, max_new_tokens=n_new)

    with st.spinner("Generating…"):  # greedy, so one generation per server serves every session
        cache[sig] = SH.shared(("generate", *sig), lambda: C.attempt("Cannot generate", _gen))
text = cache.get(sig)
if text is None:
    cache.pop(sig, None)
    st.stop()
shown, stop = clean_continuation(model, text)
st.code(prompt + shown, language="text")  # once: the prompt and its continuation
if stop:
    st.caption(f"Generation stopped at the model's end-of-turn token {C.quoted(stop)} (not shown).")
S.share("model_gen", loaded.name, [f"print({S.call('m.generate', prompt, max_new_tokens=n_new)})"],
        {"prompt": prompt})


def _draft():
    from core.store import RunDraft

    return RunDraft(
        kind="generate",
        model=loaded.name,
        method="greedy",
        args={"prompt": prompt, "max_new_tokens": n_new},
        result={"continuation": text},
    )


C.save_button(_draft, key="model_save")
