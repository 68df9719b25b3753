"""Where the shipped files are, for a source checkout and for an installed wheel alike.

A checkout (``./dev``'s editable install, the tests) keeps ``data/`` (toy checkpoints, ViT heads, dictionaries,
dashboards, lenses, prompt and bench sets, the corpus), ``results/`` (the measured documents) and ``app/`` beside
the packages. A wheel installs the same folders into site-packages beside ``workbench``: the app as the package
``app``, data/ as ``workbench_data`` and results/ as ``workbench_results`` (setup.py maps the folders). Both are
found from this file's location, never from the working directory, so every command works from any folder.
``WORKBENCH_DATA`` overrides the data folder.
"""

from __future__ import annotations

import os
from pathlib import Path

# The folder holding the ``workbench`` package: the checkout, or site-packages for an installed wheel.
PACKAGES_ROOT = Path(__file__).resolve().parent.parent


def installed() -> bool:
    """True for a wheel install (data shipped as ``workbench_data``), False in a source checkout."""
    return (PACKAGES_ROOT / "workbench_data").is_dir()  # a checkout never has it (setup.py maps data/ to it)


def data_root() -> Path:
    """The data folder: ``$WORKBENCH_DATA``, else the checkout's data/, else the installed ``workbench_data``."""
    env = os.environ.get("WORKBENCH_DATA")
    if env:
        return Path(env)
    return PACKAGES_ROOT / ("workbench_data" if installed() else "data")


def results_root() -> Path:
    """The shipped results documents (read only): the checkout's results/ or the installed ``workbench_results``."""
    return PACKAGES_ROOT / ("workbench_results" if installed() else "results")


def app_dir() -> Path:
    """The Streamlit app's folder (``main.py``, ``pages/``, ``static/``)."""
    return PACKAGES_ROOT / "app"


def data_label(path: Path) -> str:
    """A path under the data folder as the checkout spells it (``data/bench/...``), the same for every install;
    any other path as it is."""
    try:
        return "data/" + Path(path).resolve().relative_to(data_root().resolve()).as_posix()
    except ValueError:
        return str(path)


def version() -> str:
    """The installed distribution's version (pyproject.toml's, through importlib.metadata)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("workbench")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"
