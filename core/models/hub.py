"""Hugging Face models by name: hub ids (``openai-community/gpt2``) and TransformerLens' official short names
(``gpt2-small``, ``pythia-70m``), resolved through ``huggingface_hub`` to a snapshot folder.

The local Hugging Face cache comes first (``HF_HOME`` / ``HF_HUB_CACHE`` say where it is); the hub is asked
only when the cache lacks the model and ``HF_HUB_OFFLINE`` is not set, with huggingface_hub's own progress
bars, and only for the files the workbench reads (config, tokenizer, safetensors weights: never pickles).
Not cached and not reachable is a ModelFileError that names the model and how to fetch it.

A hub look-up is bounded: huggingface_hub's shared HTTP client has no timeout, so behind a proxy that accepts
and never answers (or a DNS server that never replies) its first call would hang for minutes with nothing
printed. The first request (the model's metadata) is made with a short timeout (``WORKBENCH_HUB_TIMEOUT``
seconds, default 5) in a thread that is abandoned at the deadline, after a progress line on stderr; only
once the hub has answered are the files downloaded.

TransformerLens' alias table is read from its source file without importing TransformerLens (seconds).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from core.errors import ModelFileError
from core.models.families import FAMILIES

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
                lookup(repo)
                print(f"downloading {repo}'s config, tokenizer and safetensors weights into {cache_location()} ...",
                      file=sys.stderr, flush=True)
                # by branch, not by the commit just looked up: the cache then records refs/main, which the
                # offline look-ups (and `workbench models`) read
                return Path(snapshot_download(repo, allow_patterns=PATTERNS))
            except Exception as exc:  # network, auth, missing repo: all end in the one line below
                reason = first_line(exc)
                if isinstance(exc, HubUnreachable):
                    break  # the next candidate would wait just as long
    raise not_fetchable(name, repos[0], reason)


def not_fetchable(name: str, repo: str, reason: str, files: str = "") -> ModelFileError:
    """The one line for a model that is neither cached nor fetchable now, saying how to fetch it."""
    return ModelFileError(
        f"model {name!r} is not in the Hugging Face cache ({cache_location()}) and cannot be fetched ({reason}); "
        f"on a machine with network run `hf download {repo}{files}` (or set HF_HOME to a cache that has it)")


class HubUnreachable(OSError):
    """The hub (or a proxy on the way) did not answer within the look-up timeout."""


def lookup_timeout() -> float:
    """Seconds a hub look-up may take (WORKBENCH_HUB_TIMEOUT, default 5, within 0.1..120)."""
    try:
        value = float(os.environ.get("WORKBENCH_HUB_TIMEOUT", "") or 5.0)
    except ValueError:
        value = 5.0
    return min(max(value, 0.1), 120.0) if value == value else 5.0


def endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def lookup(repo: str) -> str:
    """The commit hash of ``repo`` on the hub, asked once with a hard deadline (one progress line on stderr);
    HubUnreachable when nothing answers in time, the hub's own error (missing, gated) otherwise."""
    from huggingface_hub import HfApi

    timeout = lookup_timeout()
    print(f"looking up {repo} on the Hugging Face hub ({endpoint()}, up to {timeout:g} s) ...", file=sys.stderr,
          flush=True)
    box: dict[str, Any] = {}

    def ask() -> None:
        try:
            box["info"] = HfApi().model_info(repo, timeout=timeout)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    # a daemon thread: DNS resolution and a proxy's CONNECT are not all covered by the HTTP timeout
    worker = threading.Thread(target=ask, name=f"hub-lookup {repo}", daemon=True)
    worker.start()
    worker.join(timeout + 1.0)
    error = box.get("error")
    if worker.is_alive() or _is_timeout(error):
        raise HubUnreachable(f"no answer from {endpoint()} within {timeout:g} s: offline, or a proxy that does "
                             "not answer; WORKBENCH_HUB_TIMEOUT sets the wait")
    if error is not None:
        if _is_connection_error(error):
            raise HubUnreachable(f"cannot reach {endpoint()}: {first_line(error)}") from None
        raise error
    sha = getattr(box.get("info"), "sha", None)
    if not sha:
        raise HubUnreachable(f"{endpoint()} gave no revision for {repo}")
    return str(sha)


def _is_timeout(exc: BaseException | None) -> bool:
    return exc is not None and ("timeout" in type(exc).__name__.lower() or isinstance(exc, TimeoutError))


def _is_connection_error(exc: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError) and getattr(exc, "response", None) is not None:
        return False  # the hub answered (missing, gated, private): its own message says which
    names = {t.__name__ for t in type(exc).__mro__}
    return bool(names & {"ConnectError", "ProxyError", "NetworkError", "TransportError", "ConnectionError",
                         "OfflineModeIsEnabled"}) or isinstance(exc, OSError)


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (its class name when it has none), at most 160 characters."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def cached_models() -> list[tuple[str, Path]]:
    """(repo id, snapshot folder) of every model in the local Hugging Face cache whose config names a
    supported family (no network, nothing loaded)."""
    import json

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
