"""Prompt files: JSONL rows {"prompt", "target", "foil"?, "corrupt"?}, read with a one-line PromptError on bad input.

Kept out of workbench.commands so the app and notebooks can read prompt files without importing the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import PromptError, WorkbenchError


def read_prompts(path: str, limit: int | None = None) -> list[dict]:
    """The rows of a prompt file; PromptError on a missing, unreadable, empty or malformed file."""
    file = Path(path)
    if not file.is_file():
        raise PromptError(f"prompts file {path!r} does not exist")
    try:
        # utf-8-sig: a byte-order mark (as some editors write) is not part of the first row.
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read prompts file {path!r}: {exc}") from None
    return parse_prompts(text, path, limit)


class _NonFiniteField(ValueError):
    pass


def _no_constant(name: str) -> None:
    """json's NaN, Infinity and -Infinity (Python accepts them; standard JSON does not): refused."""
    raise _NonFiniteField(name)


def parse_prompts(text: str, source: str, limit: int | None = None) -> list[dict]:
    """Rows from JSONL text; errors name ``source`` and the line ("ioi.jsonl:3: ...")."""
    rows = []
    # JSONL lines end at "\n" only: str.splitlines() also splits at U+2028, U+2029 and U+0085,
    # which json.dumps(..., ensure_ascii=False) leaves unescaped inside strings.
    for n, line in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_constant=_no_constant)
        except _NonFiniteField as exc:
            raise PromptError(f"{source}:{n}: a field is {exc}, not a finite number (JSON has no NaN)") from None
        except ValueError:
            raise PromptError(f"{source}:{n}: not a JSON object") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) \
                or not isinstance(row.get("target"), str):
            raise PromptError(f"{source}:{n}: needs string fields \"prompt\" and \"target\" "
                              "(and optional \"foil\", \"corrupt\")")
        for key in ("foil", "corrupt"):  # corrupt: a counterfactual prompt of the same token length
            if row.get(key) is not None and not isinstance(row[key], str):
                raise PromptError(f"{source}:{n}: \"{key}\" must be a string")
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise PromptError(f"prompts file {source!r} holds no prompts")
    return rows


def encode_rows(model: Any, rows: list[dict], use_foil: bool = True, source: str | None = None) -> list[Any]:
    """Every row encoded (target and foil one token each) before any method runs; a bad row fails as
    "SOURCE:N: why" (or "prompt N: why" without a source)."""
    if not hasattr(model, "encode"):
        from core.errors import MethodError

        raise MethodError(f"{getattr(model, 'name', type(model).__name__)} is a vision model: prompts need a "
                          "language model")
    encs = []
    for n, row in enumerate(rows, 1):
        try:
            encs.append(model.encode(row["prompt"], row["target"], row.get("foil") if use_foil else None))
        except WorkbenchError as exc:
            raise type(exc)(f"{source}:{n}: {exc}" if source else f"prompt {n}: {exc}") from None
    return encs
