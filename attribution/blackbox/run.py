"""One recover-heads run: build the oracle, recover, compare with the truth, package for the store."""

from __future__ import annotations

import importlib
import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np

from attribution.blackbox.canonical import canonicalize, compare_heads
from attribution.blackbox.ffn import random_ffn, recover_ffn
from attribution.blackbox.noisy import noise_sweep, noisy_mha_oracle
from attribution.blackbox.oracle import Oracle, check_dims, mha_oracle, random_mha
from attribution.blackbox.recovery import NoiseBreakdownError, Recovery, expected_queries, recover
from attribution.blackbox.trained import attention_oracle, load_toy
from core.errors import WorkbenchError
from core.store import RunDraft

TRAINED_TOL = 1e-4  # the relative error a trained-layer run must reach to count as recovered
DEFAULT_SWEEP = [1e-12, 1e-11, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4]


def load_user_oracle(spec: str, d: int) -> Oracle:
    """``module:function`` or ``path/file.py:function``: any function from an (N, d) array to a scalar."""
    mod_name, _, fn_name = spec.rpartition(":")
    if not mod_name or not fn_name:
        raise WorkbenchError(f"--oracle must look like module:function or file.py:function (got {spec!r})")
    try:
        if mod_name.endswith(".py"):
            file = Path(mod_name)
            if not file.is_file():
                raise WorkbenchError(f"oracle file {mod_name!r} does not exist")
            loc = importlib.util.spec_from_file_location(file.stem, file)
            module = importlib.util.module_from_spec(loc)
            loc.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
        fn = getattr(module, fn_name)
    except WorkbenchError:
        raise
    except Exception as exc:  # import errors of user code: still one line
        raise WorkbenchError(f"cannot load oracle {spec!r}: {type(exc).__name__}: {exc}") from None
    if not callable(fn):
        raise WorkbenchError(f"oracle {spec!r} is not callable")
    return Oracle(fn, d, exact=False, name=spec)


def _build(d: int | None, heads: int | None, bound: int | None, noise: float, seed: int, model: str | None,
           oracle_spec: str | None, merged: int, zero: int, exact: bool, layer: int):
    """(oracle, truth or None, d, heads, basis_scale, extra json)."""
    if not noise >= 0:
        raise WorkbenchError(f"noise must be >= 0 (got {noise})")
    # fail on bad sizes before any model is loaded
    check_dims(1 if d is None else d, 1 if heads is None else heads, None if heads is None else bound)
    if bound is not None and bound < 1:
        raise WorkbenchError(f"bound must be >= 1 (got {bound})")
    if model is not None:
        tl = load_toy(model)
        t = attention_oracle(tl, layer=layer, seed=seed, name=model)
        if d is not None and d != t.oracle.d:
            raise WorkbenchError(f"--d {d} does not match the model's d_model {t.oracle.d}")
        if heads is not None and heads != tl.cfg.n_heads:
            raise WorkbenchError(f"--heads {heads} does not match the model's {tl.cfg.n_heads} heads")
        heads = int(tl.cfg.n_heads)
        check_dims(t.oracle.d, heads, bound)
        if 2 * (bound or heads) + 1 > t.n_ctx:
            raise WorkbenchError(f"queries of length {2 * (bound or heads) + 1} exceed "
                                 f"the model's n_ctx {t.n_ctx}")
        oracle = _with_noise(t.oracle, noise, seed)
        extra = {"model": model, "layer": layer, "dropped_b_Q_norm": t.dropped_b_Q_norm,
                 "reference": "model's own W_K W_Q^T / attn_scale and W_V W_O w (w: read-out direction)"}
        return oracle, t.truth, t.oracle.d, heads, t.token_scale, extra
    if d is None or heads is None:
        raise WorkbenchError("--d and --heads are required unless --model is given")
    check_dims(d, heads, bound)
    if oracle_spec is not None:
        return _with_noise(load_user_oracle(oracle_spec, d), noise, seed), None, d, heads, 1.0, \
            {"oracle": oracle_spec}
    if merged < 0 or zero < 0 or 1 + merged + zero > heads:
        raise WorkbenchError(f"--merged {merged} and --zero {zero} must leave one ordinary head of {heads}")
    params = random_mha(d, heads, seed=seed, merged=merged, zero=zero)
    if noise > 0 or not exact:
        return noisy_mha_oracle(params, noise, seed=seed), params, d, heads, 1.0, {"oracle": "random-mha"}
    return mha_oracle(params, exact=True), params, d, heads, 1.0, {"oracle": "random-mha (exact, mpmath)"}


def _with_noise(oracle: Oracle, noise: float, seed: int) -> Oracle:
    if noise == 0:
        return oracle
    rng = np.random.default_rng(seed + 15485863)
    fn, bfn = oracle.fn, oracle.batch_fn
    noisy = Oracle(lambda X: float(fn(X)) + noise * float(rng.standard_normal()), oracle.d, noise=noise,
                   name=f"{oracle.name}+noise({noise:g})",
                   batch_fn=None if bfn is None else
                   (lambda Xs: [float(y) + noise * float(rng.standard_normal()) for y in bfn(Xs)]))
    return noisy


def run(*, d: int | None = None, heads: int | None = None, bound: int | None = None, noise: float = 0.0,
        seed: int = 0, model: str | None = None, oracle_spec: str | None = None, oversample: int = 0,
        dps: int = 50, merged: int = 0, zero: int = 0, exact: bool = True, layer: int = 0,
        sweep: list[float] | None = None, basis_scale: float | None = None) -> tuple[dict[str, Any], Any]:
    """Returns (the command's JSON object, a RunDraft for the store)."""
    t0 = time.perf_counter()
    oracle, truth, d, heads, scale, extra = _build(d, heads, bound, noise, seed, model, oracle_spec,
                                                   merged, zero, exact, layer)
    rec: Recovery = recover(oracle, heads, bound=bound, seed=seed, oversample=oversample,
                            dps=dps if oracle.exact else min(dps, 30),
                            basis_scale=basis_scale if basis_scale is not None else scale)
    out: dict[str, Any] = {
        "queries": rec.queries,
        "expected_queries": expected_queries(d, bound or heads),
        "max_query_length": rec.max_query_length,
        "heads_true": None,
        "heads_recovered": rec.heads,
        "max_rel_error_W": None,
        "max_rel_error_v": None,
        "seconds": 0.0,
        "d": d, "heads": heads, "bound": bound, "noise": noise, "seed": seed, "oversample": oversample,
        "max_query_length_limit": 2 * (bound or heads) + 1 + oversample,
        "exact_oracle": oracle.exact, "precision_digits": rec.dps, "fit_residual": rec.fit_residual,
        "error_estimate_W": rec.diagnostics.get("error_estimate_W"),
        "error_estimate_v": rec.diagnostics.get("error_estimate_v"),
        "reliable": rec.reliable, "link_ambiguity": rec.diagnostics.get("link_ambiguity"),
        **({"note": rec.diagnostics["note"]} if "note" in rec.diagnostics else {}),
        **extra,
    }
    tensors = {"W": _t(rec.W_float()), "v": _t(rec.v_float())}
    tables, figures = {"recovered": rec.table()}, {"recovered_W": rec.plot()}
    if truth is not None:
        canon = canonicalize(truth)
        if canon.heads != rec.heads:  # why here: the comparison below needs the same count

            raise NoiseBreakdownError(
                f"recovered {rec.heads} canonical head(s), the instance has {canon.heads}: "
                + (f"noise {noise:g} hides the smaller heads (above this instance's breakdown level); "
                   "lower the noise or add --oversample" if noise > 0 else
                   "the fits merged heads at this oracle's precision; use an exact oracle or more --dps"))
        cmp = compare_heads(canon, rec.W, rec.v)
        out.update(heads_true=canon.heads, max_rel_error_W=cmp.max_rel_error_W,
                   max_rel_error_v=cmp.max_rel_error_v)
        tensors.update(W_true=_t(canon.W), v_true=_t(canon.v))
        import pandas as pd

        tables["heads"] = pd.DataFrame({"true_head": range(len(cmp.permutation)),
                                        "recovered_head": cmp.permutation,
                                        "rel_error_W": cmp.rel_error_W, "rel_error_v": cmp.rel_error_v})
        if model is not None:
            out.update(tolerance=TRAINED_TOL,
                       within_tolerance=bool(max(cmp.max_rel_error_W, cmp.max_rel_error_v) < TRAINED_TOL))
    if sweep and truth is not None and model is None:
        sw = noise_sweep(truth, sweep, seed=seed,
                         oversample=oversample)
        tables["noise_sweep"] = sw.table()
        figures["error_vs_noise"] = sw.plot()
        out["noise_sweep"] = sw.to_json()
    out["seconds"] = time.perf_counter() - t0
    out = clean_json(out)
    draft = RunDraft(kind="recover-heads", model=model or extra.get("oracle"),
                     method="rational-interpolation",
                     args={k: out[k] for k in ("d", "heads", "bound", "noise", "seed", "oversample")},
                     timings={"seconds": out["seconds"]}, result=out, tensors=tensors, tables=tables,
                     figures=figures)
    return out, draft


def run_ffn(*, d: int, heads: int, seed: int = 0, hidden: int | None = None, eps: float = 1e-3,
            n_fresh: int = 200) -> tuple[dict[str, Any], Any]:
    """The FFN extension on a random attention + bias-free ReLU FFN layer."""
    t0 = time.perf_counter()
    check_dims(d, heads)
    params = random_ffn(d, heads, hidden=hidden, seed=seed)
    res = recover_ffn(params, heads, seed=seed, eps=eps, n_fresh=n_fresh)
    out = {"queries": res.recovery.queries, "expected_queries": expected_queries(d, heads),
           "max_query_length": res.recovery.max_query_length, "heads_true": heads,
           "heads_recovered": res.recovery.heads, "max_rel_error_W": res.max_rel_error_W,
           "max_rel_error_v": res.max_rel_error_v_local, "seconds": 0.0, "d": d, "heads": heads,
           "seed": seed, "ffn_hidden": int(params.B.shape[0]), **res.to_json()}
    out["seconds"] = time.perf_counter() - t0
    out = clean_json(out)
    draft = RunDraft(kind="recover-heads", model="random-attn-relu-ffn", method="rational-interpolation+ffn",
                     args={"d": d, "heads": heads, "seed": seed, "ffn": True},
                     timings={"seconds": out["seconds"]}, result=out,
                     tensors={"W": _t(res.recovery.W_float()), "v_local": _t(res.recovery.v_float())})
    return out, draft


def clean_json(obj: Any) -> Any:
    """inf/nan become null, so --json output stays strict JSON."""
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def _t(a: np.ndarray):
    import torch

    return torch.tensor(np.asarray(a, dtype=np.float64))
