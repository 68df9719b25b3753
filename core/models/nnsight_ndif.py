"""NDIF's address and whether it answers as NDIF, without importing nnsight or torch (the CLI checks ``--remote``
before anything heavy loads; core/models/remote.py checks it again before a remote trace).

The host is nnsight's own: ``NDIF_HOST``, else the user's nnsight config file (``$NNSIGHT_CONFIG`` or
``$XDG_CONFIG_HOME/nnsight/config.yaml``), else the file nnsight ships (https://api.ndif.us). NDIF answers
``GET /status`` with its deployments as JSON (what ``nnsight.status()`` reads); any other answer is not NDIF."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.errors import BackendError

DEFAULT_HOST = "https://api.ndif.us"


def remote_timeout() -> float:
    """Seconds to wait for NDIF before a remote trace is refused (WORKBENCH_REMOTE_TIMEOUT, default 5)."""
    try:
        return max(0.1, float(os.environ.get("WORKBENCH_REMOTE_TIMEOUT", "5")))
    except ValueError:
        return 5.0


def _yaml_host(path: Path) -> str | None:
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except Exception:  # unreadable or not YAML: nnsight's next source decides, as nnsight's own loader would fail
        return None
    api = data.get("API") if isinstance(data, dict) else None
    host = api.get("HOST") if isinstance(api, dict) else None
    return host if isinstance(host, str) and host.strip() else None


def ndif_host() -> str:
    """The NDIF address nnsight would use (its precedence: environment, user file, shipped file)."""
    if os.environ.get("NDIF_HOST"):
        return os.environ["NDIF_HOST"]
    user = os.environ.get("NNSIGHT_CONFIG") or str(
        Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "nnsight" / "config.yaml")
    host = _yaml_host(Path(user)) if Path(user).is_file() else None
    if host is None:
        import importlib.util

        spec = importlib.util.find_spec("nnsight")
        if spec is not None and spec.submodule_search_locations:
            host = _yaml_host(Path(list(spec.submodule_search_locations)[0]) / "config.yaml")
    return (host or DEFAULT_HOST).rstrip("/")


def check_ndif(host: str | None = None, timeout: float | None = None, identify: bool = False) -> None:
    """A BackendError in one line naming ``host`` unless it answers within ``timeout`` seconds (any HTTP answer);
    with ``identify``, unless it answers ``GET /status`` as NDIF does (a JSON object of deployments)."""
    import httpx

    host = (host or ndif_host()).rstrip("/")
    timeout = remote_timeout() if timeout is None else timeout
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout)) as client:
            answer = client.get(host + "/status" if identify else host)
    except httpx.HTTPError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BackendError(f"nnsight remote=True: NDIF at {host} did not answer within {timeout:g} s ({reason}); "
                           "check the network, or load the model locally (remote=False)") from None
    if identify and not _is_ndif(answer):
        kind = answer.headers.get("content-type", "no content type").split(";")[0]
        raise BackendError(f"nnsight remote=True: {host} answered but is not an NDIF server (GET /status gave HTTP "
                           f"{answer.status_code}, {kind}, not NDIF's deployments); set NDIF_HOST to NDIF's address")


def _is_ndif(answer: Any) -> bool:
    if answer.status_code != 200:
        return False
    try:
        body = answer.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("deployments"), dict)
