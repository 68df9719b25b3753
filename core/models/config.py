"""A model folder's ``config.json``, read in one place: the zoo reads it to route a directory to its loader,
the LLM loader to check it before building the model. Plain JSON only (no torch), so ``workbench info`` and
``workbench models`` stay light; every refusal is a one-line ModelFileError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import ModelFileError

# Bounds on the sizes a config.json may ask for, checked before anything is allocated from them.
CONFIG_BOUNDS = {"num_hidden_layers": 1024, "n_layer": 1024, "hidden_size": 65536, "n_embd": 65536,
                 "intermediate_size": 1 << 20, "n_inner": 1 << 20, "num_attention_heads": 1024, "n_head": 1024,
                 "num_key_value_heads": 1024, "head_dim": 4096, "vocab_size": 1 << 22,
                 "max_position_embeddings": 1 << 22, "n_positions": 1 << 22}


def read_config(path: Path) -> dict[str, Any]:
    """The config.json of the model folder ``path`` as a dict, its sizes bounded (ModelFileError in one line
    otherwise: no config.json, unreadable or not JSON, not an object, a size out of bounds)."""
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ModelFileError(f"{str(path)!r} has no config.json: not a model directory (or a damaged snapshot)")
    from core.checks import loads_bounded  # depth-bounded: a config nested 10^5 deep is one line, not a crash

    try:
        config = loads_bounded(cfg.read_text())
    except (OSError, ValueError) as exc:
        from core.text import one_line

        raise ModelFileError(f"cannot read {cfg}: {one_line(exc)}") from None  # (was repr'd whole by a stray !r)
    if not isinstance(config, dict):
        raise ModelFileError(f"{cfg} is not a JSON object")
    for key, bound in CONFIG_BOUNDS.items():
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= bound:
            raise ModelFileError(f"{cfg}: {key} is {str(value)[:40]!r}, not a whole number in 1..{bound}")
    return config
