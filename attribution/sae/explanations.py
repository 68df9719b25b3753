"""Build and store the explanations of every feature of a dictionary (explain.py chooses and scores them).

One forward pass over fresh held-out windows (the held-out split's windows after the ones the dashboards
were built on, so no explanation is scored on text its dashboard showed) gives every feature's true
activations; even windows are the explanation half (rules are chosen there), odd windows the score half
(the score reported). Stored as ``explanations.json.gz`` beside ``dashboards.safetensors`` (a separate
file: dashboards built before explanations existed open unchanged).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from attribution.sae.cache import stop_layer
from attribution.sae.dashboard import N_TOP, Dashboards, held_out_windows
from attribution.sae.explain import Text, choose, promoted, render, score_rule
from attribution.sae.explanation_store import VERSION
from core.errors import DatasetError

if TYPE_CHECKING:
    from core.models.hooked import HookedModel

N_WINDOWS = 256  # fresh held-out windows: 128 to choose each rule on, 128 to score it on
FIRE_LIMIT = 20


# -- what a dashboard says a feature fires on ----------------------------------------------------------
def fire_lists(db: Dashboards) -> tuple[list[list[int]], list[list[int]]]:
    """Per unit: the token ids it fires on (its top contexts' tokens by count, then its token-index tokens by
    max activation, then its quantile contexts' tokens; at most FIRE_LIMIT) and the ids of the tokens just
    before its top activations that recur (count >= 2)."""
    t = db.tensors
    windows = t["windows"].long().numpy()
    width = windows.shape[1]
    ctx = t["ctx_token"].long().numpy()
    w, p = ctx // (width - 1), ctx % (width - 1) + 1
    ok = ctx >= 0
    center = np.where(ok, windows[np.clip(w, 0, None), p], -1)
    before = np.where(ok, windows[np.clip(w, 0, None), p - 1], -1)
    ptr = t["tok_ptr"].long().numpy()
    toks = np.repeat(t["tok_ids"].long().numpy(), np.diff(ptr))
    feat, val = t["tok_feat"].long().numpy(), t["tok_val"].float().numpy()
    order = np.lexsort((-val, feat))
    feat, toks = feat[order], toks[order]
    starts = np.searchsorted(feat, np.arange(db.n_units + 1))
    fire, prev = [], []
    for f in range(db.n_units):
        top = [int(i) for i in center[f, :N_TOP] if i >= 0]
        by_count = [i for i, _ in Counter(top).most_common()]
        index = toks[starts[f] : starts[f + 1]].tolist()
        quant = [int(i) for i in center[f, N_TOP:] if i >= 0]
        fire.append(list(dict.fromkeys(by_count + index + quant))[:FIRE_LIMIT])
        prev.append([i for i, n in Counter(int(i) for i in before[f, :N_TOP] if i >= 0).most_common() if n >= 2])
    return fire, prev


# -- the fresh windows and their activations ------------------------------------------------------------
def fresh_windows(model: HookedModel, db: Dashboards, n_windows: int) -> Any:
    """[n, L] held-out windows after those the dashboards were built on (DatasetError when fewer than 16)."""
    seen = db.tensors["windows"]
    ctx = int(seen.shape[1])
    per = ctx - 1
    rows = held_out_windows(model, (int(seen.shape[0]) + n_windows) * per, ctx)
    if rows.shape[0] >= seen.shape[0] and not bool((rows[: seen.shape[0]] == seen.long()).all()):
        raise DatasetError("the held-out windows differ from the ones these dashboards were built on: rebuild "
                           "the dashboards before explaining them")
    rows = rows[int(seen.shape[0]) :]
    if rows.shape[0] < 16:
        raise DatasetError(f"only {rows.shape[0]} held-out windows are left after the dashboards' own; "
                           "explanations need at least 16")
    return rows


def activations(model: HookedModel, dictionaries: list[Any], windows: Any, batch_size: int = 8,
                bf16: bool | None = None, on_progress: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
    """Per dictionary, [W, L, F] float16 activations of its units on ``windows`` (one shared forward)."""
    import torch

    hooks = sorted({d.hook for d in dictionaries})
    stops = [stop_layer(h) for h in hooks]
    stop = {"stop_at_layer": max(stops)} if None not in stops and model.can_stop_at_layer else {}
    if bf16 is None:
        bf16 = model.device.type == "cpu" and model.n_params() > 10_000_000
    W, L = windows.shape
    out = [np.zeros((W, L, int(d.W_dec.shape[0])), dtype=np.float16) for d in dictionaries]
    with torch.no_grad():
        for s in range(0, W, batch_size):
            toks = windows[s : s + batch_size]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(bf16)):
                _, cache = model.run_with_cache(toks.to(model.device), names_filter=hooks, **stop)
            for d, o in zip(dictionaries, out, strict=True):
                a = cache[d.hook]
                a = a.flatten(2) if a.dim() > 3 else a
                x = a.reshape(-1, a.shape[-1]).float().cpu()
                o[s : s + len(toks)] = d.encode(x).float().clamp_min(0).reshape(len(toks), L, -1).numpy()
            if on_progress:
                on_progress(min(s + batch_size, W), W)
    return out


# -- explaining one dictionary -----------------------------------------------------------------------------
def explain_units(db: Dashboards, ids: np.ndarray, acts: np.ndarray, text_of: dict[int, str],
                  seed: int = 0) -> dict[str, Any]:
    """Every unit's explanation and simulation score: rules chosen on the even windows of ``ids`` [W, L]
    (activations ``acts`` [W, L, F]), scored on the odd ones. Returns the stored file's content."""
    started = time.time()
    fire, prev = fire_lists(db)
    ex_text, sc_text = Text.of(ids[0::2], text_of), Text.of(ids[1::2], text_of)
    ex_acts = np.ascontiguousarray(acts[0::2].transpose(2, 0, 1))
    sc_acts = np.ascontiguousarray(acts[1::2].transpose(2, 0, 1))
    rng = np.random.default_rng(seed)
    ex_order, sc_order = rng.permutation(ex_acts.shape[1]), rng.permutation(sc_acts.shape[1])
    live = (db.tensors["count"] > 0).tolist()
    features: list[dict[str, Any]] = []
    for f in range(db.n_units):
        if not live[f]:
            features.append({"text": "dead: never fires on held-out text", "short": "dead", "score": None,
                             "explain_score": None, "rule": None})
            continue
        rule, ex_score = choose(ex_text, ex_acts[f].astype(np.float32), ex_order, fire[f], prev[f])
        score = score_rule(rule, sc_text, sc_acts[f].astype(np.float32), sc_order) if rule else None
        features.append({"score": rounded(score), "explain_score": rounded(ex_score), "rule": rule})
    words(db, features, text_of, fire)
    scores = [x["score"] for x in features if x["score"] is not None]
    return {"version": VERSION, "name": db.meta["name"], "features": features,
            "summary": {"n_scored": len(scores), "median_score": rounded(float(np.median(scores))) if scores else None,
                        "mean_score": rounded(float(np.mean(scores))) if scores else None},
            "dashboards_built_at": db.meta.get("built_at"), "weights_sha256": db.meta.get("weights_sha256"),
            "explain_seconds": round(time.time() - started, 1)}


def words(db: Dashboards, features: list[dict[str, Any]], text_of: dict[int, str],
          fire: list[list[int]] | None = None) -> None:
    """Write (or rewrite) each live unit's ``text`` and ``short`` from its rule, its dashboard's tokens and
    what its top logit tokens promote (no forward pass: a change of wording re-renders stored rules)."""
    fire = fire if fire is not None else fire_lists(db)[0]
    t = db.tensors
    logit_ok = (t["logit_top_vals"].abs().sum(1) > 0).tolist()
    for f, e in enumerate(features):
        if e.get("short") == "dead":
            continue
        logits = [db.token(i) for i in t["logit_top_ids"][f].tolist()] if logit_ok[f] else []
        e["text"], e["short"] = render(e["rule"], text_of, fire[f], promoted(logits))


def rounded(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def build_explanations(model: HookedModel, dictionaries: list[Any], dbs: list[Dashboards],
                       n_windows: int = N_WINDOWS, batch_size: int = 8, bf16: bool | None = None,
                       on_progress: Callable[[str, int, int], None] | None = None) -> list[dict[str, Any]]:
    """Explanations of every unit of each dictionary (its dashboards ``dbs`` alongside), from one forward
    pass over ``n_windows`` fresh held-out windows shared by all."""
    started = time.time()
    windows = fresh_windows(model, dbs[0], n_windows)
    for db in dbs[1:]:
        if tuple(db.tensors["windows"].shape) != tuple(dbs[0].tensors["windows"].shape):
            raise DatasetError("dashboards built on different windows: explain these dictionaries one at a time")
    acts = activations(model, dictionaries, windows, batch_size, bf16,
                       (lambda d, n: on_progress("forward", d, n)) if on_progress else None)
    forward_s = time.time() - started
    ids = windows.numpy()
    used = set(np.unique(ids).tolist())
    out = []
    for k, (db, a) in enumerate(zip(dbs, acts, strict=True)):
        fire, _ = fire_lists(db)
        need = used | {i for fs in fire for i in fs}
        text_of = {int(i): model.decode([int(i)]) for i in need}
        data = explain_units(db, ids, a, text_of)
        data.update({"n_windows": int(windows.shape[0]), "ctx": int(windows.shape[1]),
                     "windows_from": int(db.tensors["windows"].shape[0]),
                     "forward_seconds": round(forward_s / len(dbs), 1),
                     "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        out.append(data)
        if on_progress:
            on_progress("explain", k + 1, len(dbs))
    return out
