"""A package that the notebook facade also offers as a function of the same name (``wb.jobs()``, ``wb.models()``).

Once a subpackage is imported Python makes it an attribute of its parent, so ``workbench.jobs`` names the package
from then on, where the facade's function stood (a second ``wb.jobs()`` was "'module' object is not callable"),
and a function defined after the import hides the package from attribute paths (``workbench.models.decode``).
Making the package callable keeps both: calling it calls the facade's function, kept in workbench/__init__.py
under a private name, argument checks included; its modules stay attributes."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


def make_callable(package: str, facade_name: str, fallback: Callable[..., Any]) -> None:
    """Turn the module ``package`` into one whose call is ``workbench.<facade_name>(...)`` (or ``fallback`` while
    the facade is not imported yet)."""

    def facade() -> Callable[..., Any]:
        return getattr(sys.modules.get("workbench"), facade_name, fallback)

    class CallablePackage(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return facade()(*args, **kwargs)

        @property
        def __wrapped__(self) -> Any:  # inspect.signature(wb.jobs) gives the function's
            return facade()

        @property
        def __checks__(self) -> Any:  # the facade's argument rules (workbench/arguments.py), as on the function
            return getattr(facade(), "__checks__", None)

    sys.modules[package].__class__ = CallablePackage
