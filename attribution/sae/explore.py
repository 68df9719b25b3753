"""What the CLI, the notebook and the app ask of dictionaries: list them, build and open their
dashboards, search their features (by exact token, label text or id)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.dashboard import Dashboards, build_dashboards, dashboard_dir, has_dashboards
from attribution.sae.dictionary import list_dictionaries
from core.errors import ModelFileError, RangeError

if TYPE_CHECKING:
    from attribution.sae.dashboard import Dashboards
    from core.models.hooked import HookedModel

SUMMARY_KEYS = ("path", "model", "hook", "layer", "kind", "explained_variance", "explained_variance_no_top2",
                "l0", "dead_fraction", "ce_loss_delta")


def summaries(root: str | Path | None = None, model: str | None = None) -> list[dict[str, Any]]:
    """One row per shipped or trained dictionary (data/saes, or ``root``): the contract fields of
    ``workbench sae list`` plus name, width, hook_out and whether its dashboards are built.
    Damaged entries are skipped with a warning (list_dictionaries)."""
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


def weights_digest(d: Any) -> str | None:
    """sha256 of a dictionary's weights file (``d``: a dictionary or its directory; None for neurons):
    dashboards record it when built, so dashboards older than retrained weights are flagged ``stale``."""
    import hashlib

    where = getattr(d, "path", d)
    path = Path(where) / "sae_weights.safetensors" if where else None
    if path is None or not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def open_dashboards(d: Any) -> Dashboards:
    """The stored dashboards of a unit source (ModelFileError with the build command if absent);
    ``meta["stale"]`` is True when the dictionary's weights changed since they were built."""
    db = Dashboards.load(dashboard_dir(d))
    built_on = db.meta.get("weights_sha256")
    db.meta["stale"] = bool(built_on) and built_on != weights_digest(d)
    n = int(d.W_dec.shape[0])
    if db.n_units != n:
        raise ModelFileError(f"the dashboards in {dashboard_dir(d)} cover {db.n_units} units but {d.name} "
                             f"has {n}: rebuild them")
    return db


def build(model: HookedModel, dictionaries: list[Any], n_tokens: int = 65_536, save: bool = True,
          **kwargs: Any) -> list[Dashboards]:
    """Build (and by default store beside each dictionary) the dashboards of ``dictionaries``, all
    from one forward pass of ``model``; see dashboard.build_dashboards for the options."""
    out = build_dashboards(model, dictionaries, n_tokens=n_tokens, **kwargs)
    for d, db in zip(dictionaries, out, strict=True):
        db.meta["weights_sha256"] = weights_digest(d)
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


def reference_max(db: Dashboards) -> Any:
    """Each unit's max activation over the held-out text, floored at the 10th percentile of the live
    units' maxima (a unit that almost never fires must not rank first for a tiny activation)."""
    m = db.tensors["max_act"].float()
    live = m[m > 0]
    floor = float(live.quantile(0.1)) if len(live) else 1.0
    return m.clamp_min(max(floor, 1e-6))


RANKS = ("informative", "relative", "activation")


def prompt_features(model: HookedModel, d: Any, prompt: str, db: Dashboards | None = None,
                    show_first: bool = False, relative: bool = True, top: int = 12,
                    per_pos: int = 3, rank: str | None = None) -> dict[str, Any]:
    """The units that fire most on a prompt: ``tokens``, ``first`` (1 unless position 0 is shown),
    ``acts`` [pos, unit] and ``score`` for the shown positions, and ``rows`` (feature, label, explanation,
    score, activation, relative, position, token), first by ``score``; ``per_position``: the ``per_pos``
    first units at each shown position. ``rank`` (default "relative" when ``relative``, else "activation"):
    "activation"; "relative", acts / the unit's held-out max (needs dashboards); "informative", relative
    times explain.informative_weights (halved where the unit's explanation does not predict it, halved where
    the explanation only lists tokens; needs explanations, else it is "relative")."""
    import torch

    tokens = model.to_tokens(prompt)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=[d.hook])
    a = cache[d.hook][0]
    acts = d.encode((a.flatten(1) if a.dim() > 2 else a).float()).float()
    strs = model.to_str_tokens(tokens)
    first = 0 if show_first else 1
    shown = acts[first:]
    ref = reference_max(db) if db is not None else None
    rank = rank or ("relative" if relative else "activation")
    if rank not in RANKS:
        raise RangeError(f"unknown ranking {rank!r}: {', '.join(RANKS)}")
    score = shown / ref if rank != "activation" and ref is not None else shown
    if rank == "informative" and db is not None and db.explanations is not None and shown.shape[0]:
        from attribution.sae.explain import informative_weights  # lazy: numpy

        ids = tokens[0, first:].tolist()
        score = score * torch.from_numpy(informative_weights(db.explanations, ids, {
            int(i): s for i, s in zip(tokens[0].tolist(), strs, strict=True)}))
    rows = []
    if shown.shape[0]:
        best = score.max(0)
        for f in best.values.topk(min(top, shown.shape[1])).indices.tolist():
            pos = int(best.indices[f])
            if float(shown[pos, f]) <= 0:
                continue
            rows.append({"feature": f, "label": db.labels[f] if db is not None else "",
                         **(db.explained(f) if db is not None else {}), "activation": float(shown[pos, f]),
                         "relative": float(shown[pos, f] / ref[f]) if ref is not None else None,
                         "position": pos + first, "token": strs[pos + first]})
    per_position = []  # each shown position's strongest units, so every token gets its own
    for pos in range(shown.shape[0]):
        for f in score[pos].topk(min(per_pos, shown.shape[1])).indices.tolist():
            if float(shown[pos, f]) > 0:
                per_position.append({"position": pos + first, "token": strs[pos + first], "feature": f,
                                     "label": db.labels[f] if db is not None else "",
                                     **(db.explained(f) if db is not None else {}),
                                     "activation": float(shown[pos, f]),
                                     "relative": float(shown[pos, f] / ref[f]) if ref is not None else None})
    return {"tokens": strs, "first": first, "acts": shown, "score": score, "rows": rows,
            "per_position": per_position}
