"""Prompt files: JSONL rows {"prompt", "target", "foil"?, "corrupt"?}, read with a one-line PromptError on bad input.

Kept out of workbench.commands so the app and notebooks can read prompt files without importing the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.checks import JSONTooDeep, loads_bounded
from core.errors import MethodError, PromptError, WorkbenchError
from core.text import one_line


def check_input_file(path: str | Path, what: str, error: type[WorkbenchError]) -> Path:
    """``path`` as a Path when it is a regular file (a symlink to one included); else ``error``, one line naming
    what was typed: "WHAT 'PATH' does not exist", "... is a directory", "... is not a regular file (a named
    pipe)". A pipe or device is refused before it is opened: reading /dev/zero never ends, a pipe blocks."""
    import stat

    file = Path(path)
    try:
        mode = file.stat().st_mode
    except FileNotFoundError:
        raise error(f"{what} {str(path)!r} does not exist") from None
    except OSError as exc:
        raise error(f"cannot read {what} {str(path)!r}: {one_line(exc)}") from None
    if stat.S_ISREG(mode):
        return file
    if stat.S_ISDIR(mode):
        raise error(f"{what} {str(path)!r} is a directory, not a file")
    kind = ("a named pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a plain file")
    raise error(f"{what} {str(path)!r} is not a regular file ({kind}); give a .jsonl file")


def read_prompts(path: str, limit: int | None = None) -> list[dict]:
    """The rows of a prompt file; PromptError on a missing, unreadable, empty or malformed file."""
    file = check_input_file(path, "prompts file", PromptError)
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
            row = loads_bounded(line, parse_constant=_no_constant)  # depth-bounded, as every JSON read
        except _NonFiniteField as exc:
            raise PromptError(f"{source}:{n}: a field is {exc}, not a finite number (JSON has no NaN)") from None
        except JSONTooDeep as exc:
            raise PromptError(f"{source}:{n}: {exc}; a row is one flat JSON object") from None
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
        raise MethodError(f"{getattr(model, 'name', type(model).__name__)} is a vision model: prompts need a "
                          "language model")
    encs = []
    for n, row in enumerate(rows, 1):
        try:
            encs.append(model.encode(row["prompt"], row["target"], row.get("foil") if use_foil else None))
        except WorkbenchError as exc:
            raise type(exc)(f"{source}:{n}: {exc}" if source else f"prompt {n}: {exc}") from None
    return encs
