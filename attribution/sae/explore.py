"""What the CLI, the notebook and the app ask of dictionaries: list them, build and open their
dashboards, search their features (by exact token, label text or id)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import RangeError

if TYPE_CHECKING:
    from attribution.sae.dashboard import Dashboards
    from workbench.hooked import HookedModel

SUMMARY_KEYS = ("path", "model", "hook", "layer", "kind", "explained_variance", "explained_variance_no_top2",
                "l0", "dead_fraction", "ce_loss_delta")


def summaries(root: str | Path | None = None, model: str | None = None) -> list[dict[str, Any]]:
    """One row per shipped or trained dictionary (data/saes, or ``root``): the contract fields of
    ``workbench sae list`` plus name, width, hook_out and whether its dashboards are built.
    Damaged entries are skipped with a warning (list_dictionaries)."""
    from attribution.sae.dashboard import has_dashboards
    from attribution.sae.dictionary import list_dictionaries

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = list_dictionaries(root, model)
    rows = []
    for d in found:
        s = d.summary()
        rows.append({**{k: s.get(k) for k in SUMMARY_KEYS}, "name": d.name, "width": s.get("width"),
                     "hook_out": d.hook_out, "dashboards": has_dashboards(d.path)})
    for w in caught:  # say which entries were skipped (import-time deprecations of libraries stay quiet)
        if "dictionary" in str(w.message):
            warnings.warn(str(w.message), stacklevel=2)
    return rows


def open_dashboards(d: Any) -> Dashboards:
    """The stored dashboards of a unit source (ModelFileError with the build command if absent)."""
    from attribution.sae.dashboard import Dashboards, dashboard_dir

    db = Dashboards.load(dashboard_dir(d))
    n = int(d.W_dec.shape[0])
    if db.n_units != n:
        from workbench.errors import ModelFileError

        raise ModelFileError(f"the dashboards in {dashboard_dir(d)} cover {db.n_units} units but {d.name} "
                             f"has {n}: rebuild them")
    return db


def build(model: HookedModel, dictionaries: list[Any], n_tokens: int = 65_536, save: bool = True,
          **kwargs: Any) -> list[Dashboards]:
    """Build (and by default store beside each dictionary) the dashboards of ``dictionaries``, all
    from one forward pass of ``model``; see dashboard.build_dashboards for the options."""
    from attribution.sae.dashboard import build_dashboards, dashboard_dir

    out = build_dashboards(model, dictionaries, n_tokens=n_tokens, **kwargs)
    if save:
        for d, db in zip(dictionaries, out, strict=True):
            db.meta["path"] = str(db.save(dashboard_dir(d)))
    return out


def find_features(db: Dashboards, token: str | None = None, label: str | None = None,
                  feature: int | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Search one dictionary's dashboards: by exact token (units that fire on it, with their max
    activation over its held-out occurrences), by label text, or by id. Exactly one criterion."""
    given = [x is not None for x in (token, label, feature)]
    if sum(given) != 1:
        raise RangeError("search by exactly one of token, label or feature")
    if token is not None:
        return db.search_token(token, limit)
    if label is not None:
        return db.search_label(label, limit)
    return [db.row(db.check(feature))]
