"""Which backend a command asked for, and whether it serves an engine on a model, from names and config.json alone
(no torch, no nnsight): the CLI refuses a bad ``--backend`` or ``--remote`` in one line before anything heavy loads.
The backends' own refusals (``HookedModel.refusal``) stay the authority once a model is loaded; this check only
answers early where config.json already says it."""

from __future__ import annotations

from pathlib import Path

from core.errors import BackendError
from core.models.nnsight_tables import ENGINE_NEEDS, LOCAL_BACKWARD, NEED_WORDS, serves_internals

# the CLI's names -> the loader's (core.models.backends.BACKENDS)
BACKEND_NAMES = {"tl": "transformer_lens", "transformer_lens": "transformer_lens", "nnsight": "nnsight",
                 "bridge": "bridge"}


def backend_name(value: str) -> str:
    """The loader's name of a ``--backend`` value (tl | nnsight | bridge); BackendError in one line otherwise."""
    name = BACKEND_NAMES.get(str(value).strip().lower())
    if name is None:
        raise BackendError(f"unknown --backend {value!r}: tl, nnsight or bridge")
    return name


def _config(model: str) -> dict | None:
    """The model's config.json where the zoo already has its folder (None otherwise: the loaded model decides)."""
    from core.models.config import read_config
    from core.models.zoo import resolve

    path = getattr(resolve(model), "path", None)
    if not path or not (Path(path) / "config.json").is_file():
        return None
    return read_config(Path(path))


def check_backend_engine(model: str, backend: str, engine: str, remote: bool = False) -> None:
    """BackendError in one line when ``backend`` (a loader's name) cannot run ``engine`` on ``model``, as far as
    names and config.json tell: ``--remote`` off the nnsight backend, an engine whose backward runs after the trace
    on a remote model, an engine needing every internal on a family the nnsight backend maps only the hooks of."""
    if remote and backend != "nnsight":
        raise BackendError(f"--remote runs on NDIF through nnsight: give --backend nnsight (got --backend {backend})")
    if backend != "nnsight":
        return
    if remote and engine in LOCAL_BACKWARD:
        raise BackendError(f"{engine} does not run on a remote model: it needs {NEED_WORDS['local_backward']}")
    if ENGINE_NEEDS.get(engine, "internals") != "internals" or remote:  # a hosted model's config: the loader reads it
        return
    config = _config(model)
    if config is not None and not serves_internals(config):
        raise BackendError(f"{engine} does not run on the nnsight backend ({model}, {config.get('model_type')}): "
                           f"it needs {NEED_WORDS['internals']}; use --backend tl")
