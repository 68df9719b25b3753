"""Built-in models whose weights ship in a registry package and are converted once into the cache.

Each entry names a "module:function" (imported only when run, so the core imports nothing heavy):
``prepare(force=False) -> Path`` converts once and returns the cache directory, and ``ready() -> bool``
says, without converting, whether the cache is already there. ``workbench setup`` (called by
``./dev setup``) runs them all in order; ``--model NAME`` runs one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from core.errors import UnknownModelError

# name -> (prepare "module:function", ready "module:function")
PREPARERS: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("core.models.llm:prepare_smollm2", "core.models.llm:smollm2_ready"),
    "gemma3-270m": ("core.models.gemma:prepare", "core.models.gemma:ready"),
    "dinov2-small": ("core.models.dinov2:prepare_dinov2", "core.models.dinov2:dinov2_ready"),
}


def _function(target: str) -> Callable:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def names() -> list[str]:
    return list(PREPARERS)


def is_ready(name: str) -> bool:
    return bool(_function(_entry(name)[1])())


def prepare(name: str, force: bool = False) -> Path:
    return Path(_function(_entry(name)[0])(force=force))


def _entry(name: str) -> tuple[str, str]:
    if name not in PREPARERS:
        raise UnknownModelError(f"no built-in model {name!r} to prepare; known: {', '.join(PREPARERS)}")
    return PREPARERS[name]
