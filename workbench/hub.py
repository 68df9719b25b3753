"""Hugging Face models by name: hub ids (``openai-community/gpt2``) and TransformerLens' official short names
(``gpt2-small``, ``pythia-70m``), resolved through ``huggingface_hub`` to a snapshot folder.

The local Hugging Face cache comes first (``HF_HOME`` / ``HF_HUB_CACHE`` say where it is); the hub is asked
only when the cache lacks the model and ``HF_HUB_OFFLINE`` is not set, with huggingface_hub's own progress
bars, and only for the files the workbench reads (config, tokenizer, safetensors weights: never pickles).
Not cached and not reachable is a ModelFileError that names the model and how to fetch it.

TransformerLens' alias table is read from its source file without importing TransformerLens (seconds).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
from pathlib import Path

from workbench.errors import ModelFileError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
# What a model folder needs, and nothing that would be unpickled.
PATTERNS = ["*.json", "*.safetensors", "tokenizer.model", "*.txt", "*.tiktoken"]


@functools.lru_cache(maxsize=1)
def _tl_tables() -> tuple[frozenset[str], dict[str, str]]:
    """(official names, alias -> official name) from transformer_lens/supported_models.py, parsed, not run."""
    spec = importlib.util.find_spec("transformer_lens")
    if spec is None or not spec.submodule_search_locations:
        return frozenset(), {}
    source = Path(list(spec.submodule_search_locations)[0]) / "supported_models.py"
    official: list[str] = []
    aliases: dict[str, list[str]] = {}
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError):
        return frozenset(), {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        name = getattr(target, "id", None)
        value = getattr(node, "value", None)
        try:
            if name == "OFFICIAL_MODEL_NAMES":
                official = list(ast.literal_eval(value))
            elif name == "MODEL_ALIASES":
                aliases = dict(ast.literal_eval(value))
        except (ValueError, TypeError):
            continue
    flat = {alias: off for off, names in aliases.items() for alias in names}
    return frozenset(official), flat


def official_name(name: str) -> str | None:
    """The hub id a TransformerLens short name or official name stands for (None if it is neither)."""
    official, aliases = _tl_tables()
    if name in official:
        return name
    return aliases.get(name)


def looks_like_hub_id(name: str) -> bool:
    return bool(HUB_ID.match(name)) or official_name(name) is not None


def candidates(name: str) -> list[str]:
    """Repository ids to look for, in order: the official id, and for org-less legacy ids (``gpt2``) the
    organisation the hub moved them to."""
    repo = official_name(name) or name
    found = [repo]
    if "/" not in repo:
        found.append(f"openai-community/{repo}" if repo.startswith(("gpt2", "openai-gpt")) else repo)
    return list(dict.fromkeys(found))


def cache_location() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve(name: str) -> Path:
    """The local snapshot folder of ``name`` (cache first, then the hub when allowed)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    repos = candidates(name)
    for repo in repos:
        try:
            return Path(snapshot_download(repo, local_files_only=True, allow_patterns=PATTERNS))
        except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
            continue
    reason = "HF_HUB_OFFLINE is set"
    if not offline():
        for repo in repos:
            try:
                return Path(snapshot_download(repo, allow_patterns=PATTERNS))
            except Exception as exc:  # network, auth, missing repo: all end in the one line below
                reason = _first_line(exc)
    fetch = repos[0]
    raise ModelFileError(
        f"model {name!r} is not in the Hugging Face cache ({cache_location()}) and cannot be fetched ({reason}); "
        f"on a machine with network run `hf download {fetch}` (or set HF_HOME to a cache that has it)")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def cached_models() -> list[tuple[str, Path]]:
    """(repo id, snapshot folder) of every model in the local Hugging Face cache whose config names a
    supported family (no network, nothing loaded)."""
    import json

    from workbench.families import FAMILIES

    root = Path(cache_location())
    found = []
    if not root.is_dir():
        return found
    for repo_dir in sorted(root.glob("models--*")):
        ref = repo_dir / "refs" / "main"
        try:
            snapshot = repo_dir / "snapshots" / ref.read_text().strip()
            config = json.loads((snapshot / "config.json").read_text())
        except (OSError, ValueError):
            continue
        archs = config.get("architectures") if isinstance(config, dict) else None
        if isinstance(archs, list) and archs and archs[0] in FAMILIES:
            found.append((repo_dir.name[len("models--"):].replace("--", "/"), snapshot))
    return found
