"""What every page shares: one model per process, engine look-up, errors shown in the page, the run store.

Models live in ``st.cache_resource``, so all sessions of one server share a single copy; each carries
a lock because TransformerLens hooks are attached to the shared modules, so two sessions must not run
hooked forwards on the same model at the same time.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from core.errors import WorkbenchError

# -- text from users, files and runs ----------------------------------------------------------------
# Streamlit renders Markdown (and, in it, images, links, colour directives and formulas) in st.markdown,
# st.caption, st.info/warning/error/success, widget labels, tab and expander labels and help= tooltips. A prompt
# from the URL, a model name, a run's stored fields, a file's labels or an error message that quotes any of
# them is shown through one of these helpers, so it reads as the text it is and never fetches anything.
# The characters that make Markdown or HTML (or Streamlit's formulas) out of text. Other punctuation stays as it is,
# so an escaped message still reads (and matches) as typed; "_" is escaped only where it could start or end
# emphasis (an underscore inside a word, as in activation_patching, cannot).
_SPECIAL = re.compile(r"[\\`*\[\]<>$~|&#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_BLOCK_START = re.compile(r"^(\s*|\s*\d+(?=[.)]))([-+.)])(?=\s|$)")  # a list item at the very start


def esc(value: Any) -> str:
    """``value`` as literal text inside Markdown: no HTML, image, link, emphasis, code, formula or list can form
    (the characters that would make them backslash-escaped); line breaks as spaces."""
    text = _SPECIAL.sub(lambda m: "\\" + m.group(0), " ".join(str(value).splitlines()))
    return _BLOCK_START.sub(lambda m: m.group(1) + "\\" + m.group(2), text, count=1)


def quoted(value: Any) -> str:
    """``repr(value)`` as literal text inside Markdown (a prompt or token shown with its quotes and spaces)."""
    return esc(repr(value))


def code(value: Any) -> str:
    """``value`` as an inline code span (literal by Markdown's rules), fenced by more backticks than it holds."""
    text = " ".join(str(value).splitlines())
    fence = "`" * (max((len(r) for r in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if text.strip() else fence + " " + fence


# Every model load of this process; the load test and the Model page read it.
LOADS: list[dict[str, Any]] = []


@dataclass
class Loaded:
    """A model held for the whole process, with the lock engines run under."""

    name: str
    model: Any
    seconds: float
    lock: threading.RLock = field(default_factory=threading.RLock)


def _server_threads() -> None:
    """In the app server, give torch one thread per two cores (one on a two-core machine).

    Model work is serialized per model anyway, and on a small shared machine two intra-op threads
    fighting the browser and other processes made a forward pass ten times slower than one thread.
    ``WORKBENCH_APP_THREADS`` overrides; AppTest runs (inside pytest) are left alone.
    """
    server = "streamlit.web.bootstrap" in sys.modules  # `streamlit run` imports it; AppTest does not
    if os.environ.get("WORKBENCH_APP_THREADS") is None and not server:
        return
    import torch

    default = 1 if (os.cpu_count() or 2) <= 2 else (os.cpu_count() or 2) // 2
    torch.set_num_threads(int(os.environ.get("WORKBENCH_APP_THREADS") or default))


def model_bytes(model: Any) -> int:
    """Bytes of a model's parameters and buffers (0 when it exposes none)."""
    module = getattr(model, "tl", model)
    total = 0
    for get in ("parameters", "buffers"):
        try:
            total += sum(t.numel() * t.element_size() for t in getattr(module, get)())
        except (AttributeError, TypeError):
            pass
    return total


def cache_budget() -> int:
    """Bytes of model weights one server keeps loaded: WORKBENCH_APP_MODEL_MB, else a quarter of the
    machine's memory (at least 1 GiB). Sized by memory, not by count: six toy models cost less than one
    LLM, so they must not push a ViT or smollm2 out (it would be loaded a second time)."""
    mb = os.environ.get("WORKBENCH_APP_MODEL_MB")
    if mb:
        return int(float(mb) * 2**20)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 * 2**30
    return max(2**30, total // 4)


# name -> (bytes, last use) of the models in load_cached's cache, oldest use first when evicting
HELD: dict[str, list[float]] = {}
HELD_LOCK = threading.Lock()


def _evict_for(name: str) -> None:
    """Drop least recently used models (never ``name``) until the held weights fit the budget."""
    with HELD_LOCK:
        budget = cache_budget()
        while sum(b for b, _ in HELD.values()) > budget and len(HELD) > 1:
            oldest = min((n for n in HELD if n != name), key=lambda n: HELD[n][1])
            HELD.pop(oldest)
            load_cached.clear(oldest)
            print(f"[workbench-app] unloaded model {oldest} (model cache over {budget / 2**20:.0f} MB)",
                  file=sys.stderr, flush=True)


@st.cache_resource(show_spinner=False)
def load_cached(name: str) -> Loaded:
    """A model by name, loaded once per server process (every session shares it)."""
    import workbench as wb

    _server_threads()
    started = time.perf_counter()
    model = wb.load(name)
    seconds = time.perf_counter() - started
    LOADS.append({"name": name, "seconds": round(seconds, 3), "at": time.time()})
    # One line per load on stderr: the load test counts these to prove a model is loaded once.
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else "?"
    print(
        f"[workbench-app] loaded model {name} in {seconds:.2f} s ({threads} torch threads)",
        file=sys.stderr,
        flush=True,
    )
    return Loaded(name, model, seconds)


def _held(name: str) -> Loaded:
    """``load_cached(name)``, keeping the cache within its memory budget (see cache_budget)."""
    loaded = load_cached(name)
    with HELD_LOCK:
        if name in HELD:
            HELD[name][1] = time.monotonic()
        else:
            HELD[name] = [float(model_bytes(loaded.model)), time.monotonic()]
    _evict_for(name)
    return loaded


def get_model(name: str | None) -> Loaded | None:
    """The shared model, or None after an error message in the page (bad name, unreadable files)."""
    if not name or not str(name).strip():
        st.info("Pick a model from the zoo or give a local model directory.")
        return None
    try:
        with st.spinner(f"Loading {esc(name)} (once per server)…"):
            return _held(str(name).strip())
    except WorkbenchError as exc:
        st.error(f"Cannot load model: {esc(exc)}")
    except Exception as exc:  # a broken checkpoint must not end the session
        error(f"Cannot load model {name!r}", exc)
    return None


def sidebar_model(kinds: tuple[str, ...], key: str, default: str | None = None, allow_path: bool = True) -> Loaded:
    """The sidebar's model picker and the loaded model; the page stops (with the picker's message) when
    none is loaded."""
    with st.sidebar:
        name = model_picker(kinds, key=key, default=default, allow_path=allow_path)
    loaded = get_model(name)
    if loaded is None:
        st.stop()
    return loaded


def zoo(kinds: tuple[str, ...] | None = None) -> list[Any]:
    from core.models.zoo import list_models

    return [e for e in list_models() if kinds is None or e.kind in kinds]


# -- widgets that survive page switches -------------------------------------------------------------
def keep(key: str, default: Any) -> None:
    """Restore a widget's value after a page switch (Streamlit drops state of widgets not drawn)."""
    shadow = f"_keep_{key}"
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(shadow, default)


def remember(key: str) -> Callable[[], None]:
    def _store() -> None:
        st.session_state[f"_keep_{key}"] = st.session_state[key]

    return _store


def seed_from_query(mapping: dict[str, str], types: dict[str, Callable[[str], Any]] | None = None) -> list[str]:
    """Deep links: ``?model=...&prompt=...`` fill the page's widgets on the page's first run in a session
    (later runs leave them alone: the page's own share links write these parameters back into the URL).
    ``types`` converts a parameter for its widget (``{"bb_d": int}``; a value that does not convert is
    ignored). Returns the widget keys it filled."""
    done = st.session_state.setdefault("_query_seeded", set())
    seeded = []
    for param, key in mapping.items():
        if (param, key) in done:
            continue
        done.add((param, key))
        value = st.query_params.get(param)
        if value is None:
            continue
        if types and key in types:
            try:
                value = types[key](value)
            except (TypeError, ValueError):
                continue
        st.session_state[key] = st.session_state[f"_keep_{key}"] = value
        seeded.append(key)
    return seeded


def model_picker(
    kinds: tuple[str, ...],
    key: str,
    default: str | None = None,
    allow_path: bool = True,
    container: Any = None,
) -> str | None:
    """A zoo selectbox (plus "local path…"); returns the chosen name or path."""
    box = container or st
    seed_from_query({"model": key})
    names = [e.name for e in zoo(kinds)]
    if allow_path and key in st.session_state and st.session_state[key] not in names + [LOCAL_PATH]:
        # a path (from a deep link or a test) selects "local path…" with that directory
        st.session_state[f"{key}_path"] = st.session_state[f"_keep_{key}_path"] = st.session_state[key]
        st.session_state[key] = st.session_state[f"_keep_{key}"] = LOCAL_PATH
    if not names and not allow_path:
        box.info(f"No {'/'.join(kinds)} model in the zoo yet.")
        return None
    if allow_path:
        names.append(LOCAL_PATH)
    keep(key, default if default in names else names[0])
    if st.session_state[key] not in names:  # a stale choice from an earlier zoo
        st.session_state[key] = names[0]
    choice = box.selectbox("Model", names, key=key, on_change=remember(key))
    if choice == LOCAL_PATH:
        keep(f"{key}_path", "")
        path = box.text_input(
            "Local model directory",
            key=f"{key}_path",
            on_change=remember(f"{key}_path"),
            placeholder="/path/to/hf-model-dir",
        )
        return path or None
    return choice


LOCAL_PATH = "local path…"


# -- engines and errors -------------------------------------------------------------------------------
def engine(module: str, label: str) -> Any | None:
    """Import an engine module, or say in the page that it is not there yet (and return None)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            st.info(
                f"The {label} engine (`{module}`) is not in this checkout yet; this view appears "
                "once it lands."
            )
            return None
        error(f"The {label} engine could not be imported", exc)
    except Exception as exc:
        error(f"The {label} engine could not be imported", exc)
    return None


def has_engine(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def error(what: str, exc: BaseException) -> None:
    """A clear message for bad input; a short one plus the traceback (collapsed) for a bug."""
    if isinstance(exc, WorkbenchError):
        st.error(f"{esc(what)}: {esc(exc)}")
        return
    st.error(f"{esc(what)}: {type(exc).__name__}: {esc(exc)}")
    with st.expander("details"):
        st.code("".join(traceback.format_exception(exc)), language="text")


def attempt(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any | None:
    """Call an engine; on failure show the message and return None (the session stays alive)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        error(what, exc)
        return None


def read_upload(upload: Any, read: Callable[[Any], Any], what: str) -> Any | None:
    """``read(path)`` of an uploaded file saved under the user's own file name in a temporary folder, so a
    message about the file names their file (``concepts.jsonl``), not ``/tmp/tmpzfpae6ah.jsonl``; None after
    the message in the page."""
    import tempfile
    from pathlib import Path

    name = Path(upload.name).name or "upload"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(upload.getvalue())
        try:
            return read(path)
        except WorkbenchError as exc:
            st.error(f"{esc(what)} {quoted(name)}: {esc(str(exc).replace(str(path), name).replace(tmp + '/', ''))}")
        except Exception as exc:  # a bug: message and traceback, the session lives on
            error(f"{what} {name!r}", exc)
    return None


# -- run store ----------------------------------------------------------------------------------------
def store():
    from core.store import RunStore

    return RunStore()


def save_button(draft_fn: Callable[[], Any], key: str, label: str = "Save to run store",
                after: Callable[[Any], None] | None = None, scope: str | None = None) -> None:
    """A button that saves ``draft_fn()`` (a RunDraft or a result with .save) and says where it went.

    Saving happens in the click callback, before the page redraws, so run lists show the new run. ``after``
    gets the saved run in the same callback (a graph's pins and supernodes written into it). ``scope``: what was
    saved (a graph's identity); the "Saved as run" line stays only while the page shows that same thing.
    """

    def _save() -> None:
        try:
            from core.store import RunDraft

            obj = draft_fn()  # a RunDraft, or an engine result that saves itself
            # Not hasattr(obj, "save"): once nnsight is imported every object has a .save (its trace marker).
            run = store().save(obj) if isinstance(obj, RunDraft) else obj.save(store())
            st.session_state[f"{key}_saved"] = run.id
            st.session_state[f"{key}_saved_scope"] = scope
            if after is not None:
                after(run)
        except Exception as exc:
            st.session_state[f"{key}_error"] = f"{type(exc).__name__}: {exc}"

    st.button(label, key=key, on_click=_save)
    if st.session_state.get(f"{key}_error"):
        st.error(f"Could not save the run: {esc(st.session_state.pop(f'{key}_error'))}")
    if st.session_state.get(f"{key}_saved") and st.session_state.get(f"{key}_saved_scope") == scope:
        st.success(
            f"Saved as run {code(st.session_state[f'{key}_saved'])} (see the Runs page, "
            "or `workbench runs show` on the command line)."
        )


def run_picker(kind: str | list[str] | None, key: str, label: str = "Open a saved run") -> Any | None:
    """A selectbox of stored runs of ``kind``; returns the opened Run or None."""
    kinds = [kind] if isinstance(kind, str) else kind
    try:
        rows = [r for r in store().list() if kinds is None or r["kind"] in kinds]
    except Exception as exc:
        error("Cannot read the run store", exc)
        return None
    if not rows:
        st.caption("No saved runs of this kind yet.")
        return None
    ids = [""] + [r["id"] for r in rows]
    chosen = st.selectbox(label, ids, key=key, format_func=lambda i: "—" if not i else _run_label(i, rows))
    if not chosen:
        return None
    return open_run(chosen)


def open_run(run_id: str) -> Any | None:
    try:
        return store().get(run_id)
    except Exception as exc:
        error("Cannot open the run", exc)
        return None


def _run_label(run_id: str, rows: list[dict[str, Any]]) -> str:
    row = next(r for r in rows if r["id"] == run_id)
    return f"{row['id']} · {row.get('model') or ''} · {row.get('method') or ''}"


class Progress:
    """Long work inside ``st.status`` with a progress bar: ``with Progress("…", n) as p: p.step("…")``.

    ``p.attempt(what, fn, ...)`` calls an engine like ``attempt`` and, when it fails, turns the status red
    ("… failed") so the error shown below never sits under a green "done" line.
    """

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self.failed = label, max(total, 1), 0, False
        self.seconds = 0.0

    def __enter__(self) -> Progress:
        self.status = st.status(esc(self.label), expanded=False)
        self.bar = self.status.progress(0.0)
        self.started = time.perf_counter()
        return self

    def step(self, text: str) -> None:
        self.done += 1
        self.bar.progress(min(self.done / self.total, 1.0), text=esc(text))

    def fail(self) -> None:
        """Mark the work as failed (the status turns red when the block ends)."""
        self.failed = True

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any | None:
        out = attempt(what, fn, *args, **kwargs)
        if out is None:
            self.fail()
        return out

    def __exit__(self, exc_type, exc, tb) -> None:
        seconds = time.perf_counter() - self.started
        self.seconds = seconds
        if exc is None and not self.failed:
            self.status.update(label=f"{esc(self.label)} done in {seconds:.2f} s", state="complete")
        else:
            self.status.update(label=f"{esc(self.label)} failed after {seconds:.2f} s (see below)", state="error")
