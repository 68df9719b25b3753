"""A prompt set picked in the page: a bundled JSONL file under data/prompts or an upload."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import common as C
from core.paths import data_root

PROMPTS = data_root() / "prompts"
UPLOAD = "upload a JSONL file…"


def pick_rows(limit: int, key: str = "sets") -> tuple[str, list[dict[str, Any]]] | None:
    """(name, rows) from a bundled prompt file or an upload; a message and None on a bad file.

    Widgets are keyed ``{key}_file`` and ``{key}_upload``.
    """
    from core.prompt_files import parse_prompts, read_prompts

    files = sorted(p.relative_to(PROMPTS).as_posix() for p in PROMPTS.rglob("*.jsonl"))  # MODEL/*.jsonl too
    choice = st.selectbox("Prompt file", files + [UPLOAD], key=f"{key}_file",
                          help="Rows {\"prompt\", \"target\", \"foil\"?, \"corrupt\"?}, one JSON object per line.")
    if choice != UPLOAD:
        rows = C.attempt("Bad prompt file", read_prompts, str(PROMPTS / choice), limit)
        return (choice, rows) if rows else None
    upload = st.file_uploader("JSONL prompt file", type=["jsonl", "json", "txt"], key=f"{key}_upload")
    if upload is None:
        st.info("Upload a prompt file to go on.")
        return None
    try:
        text = upload.getvalue().decode("utf-8")
    except UnicodeDecodeError:
        st.error(f"{C.esc(upload.name)} is not UTF-8 text: upload a JSONL file.")
        return None
    rows = C.attempt("Bad prompt file", parse_prompts, text, upload.name, limit)
    return (upload.name, rows) if rows else None
