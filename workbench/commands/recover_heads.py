"""``workbench recover-heads``: black-box recovery of multi-head attention from value queries."""

from __future__ import annotations

import typer

from core.options import allow_long_option, int_range, nonempty, nonneg_float, nonneg_int, positive_int
from workbench.commands.common import JSON_OPTION, SAVE_OPTION, emit, result_console


def register(app: typer.Typer) -> None:
    app.command("recover-heads")(recover_heads)


def recover_heads(
    d: int = typer.Option(None, "--d", help="Token dimension (default with --model: its d_model).",
                          callback=positive_int),
    heads: int = typer.Option(None, "--heads", help="Number of heads H (default with --model: its n_heads).",
                              callback=positive_int),
    bound: int = typer.Option(None, "--bound",
                              help="Only a bound H0 >= H is known: 4 H0 d^2 - 2 H0 + 1 queries.",
                              callback=positive_int),
    noise: float = typer.Option(0.0, "--noise",
                                help="Gaussian output noise of this scale s (also runs a sweep).",
                                callback=nonneg_float),
    seed: int = typer.Option(0, "--seed", help="Seed of the random instance and of the query bases.",
                             callback=nonneg_int),
    model: str = typer.Option(None, "--model", help="A toy model from the zoo (attention layer as oracle); "
                                                     "'tiny-attn' trains a tiny one on the spot.",
                              callback=nonempty),
    layer: int = typer.Option(0, "--layer", help="Attention layer of --model.", callback=nonneg_int),
    oracle: str = typer.Option(None, "--oracle", help="Your own oracle: module:function or file.py:function "
                                                      "mapping an (N, d) array to a scalar. This imports and "
                                                      "runs that Python code, by design: name only code you "
                                                      "trust.", callback=nonempty),
    oversample: int = typer.Option(0, "--oversample", help="Extra k values per experiment (least squares; "
                                                           "reports its own, larger query count).",
                                                           callback=nonneg_int),
    merged: int = typer.Option(0, "--merged", help="Random instance: heads that copy head 0's W.", callback=nonneg_int),
    zero: int = typer.Option(0, "--zero", help="Random instance: heads with v = 0.", callback=nonneg_int),
    float64: bool = typer.Option(False, "--float64",
                                 help="Random instance: float64 oracle instead of exact."),
    dps: int = typer.Option(50, "--dps", help="Digits of the mpmath arithmetic (exact oracles).",
                            callback=int_range(20, 100000)),
    ffn: bool = typer.Option(False, "--ffn", help="FFN extension: random attention + bias-free ReLU FFN, "
                             "recovered near one point; reports agreement on fresh inputs."),
    sweep: bool = typer.Option(False, "--sweep", help="Also sweep the noise scale and plot error vs s."),
    save: bool = SAVE_OPTION,
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Recover canonical heads (W_h, v_h) of a multi-head attention oracle from value queries."""
    from attribution.blackbox.run import DEFAULT_SWEEP, run
    from core.errors import WorkbenchError

    if dps < 20:
        raise WorkbenchError(f"--dps must be >= 20 (got {dps})")
    if d is not None and heads is not None:
        _check_cost(d, heads, bound, float64, allow_long, oversample)
    grid = sorted(set(DEFAULT_SWEEP + ([noise] if noise > 0 else []))) if (sweep or noise > 0) else None
    if ffn:
        from attribution.blackbox.run import run_ffn

        if model is not None or oracle is not None or bound is not None or noise:
            raise WorkbenchError("--ffn runs on its own random instance: "
                                 "drop --model/--oracle/--bound/--noise")
        if d is None or heads is None:
            raise WorkbenchError("--ffn needs --d and --heads")
        out, draft = run_ffn(d=d, heads=heads, seed=seed)
    else:
        out, draft = run(d=d, heads=heads, bound=bound, noise=noise, seed=seed, model=model,
                         oracle_spec=oracle, oversample=oversample, dps=dps, merged=merged, zero=zero,
                         exact=not float64, layer=layer, sweep=grid)
    if save:
        from core.store import RunStore

        out["run"] = RunStore().save(draft).id

    def human(r):
        c = result_console()
        c.print(f"queries {r['queries']} (formula {r['expected_queries']}), longest {r['max_query_length']}")
        c.print(f"heads: true {r['heads_true']}, recovered {r['heads_recovered']}")
        c.print(f"max relative error: W {r['max_rel_error_W']}, v {r['max_rel_error_v']}")
        if r.get("error_estimate_W") is not None or "reliable" in r:
            c.print(f"estimated error (answers re-solved with fresh noise of the oracle's scale, no truth used): "
                    f"W {r.get('error_estimate_W')}, v {r.get('error_estimate_v')}; reliable: {r.get('reliable')}")
        if r.get("note"):
            c.print(f"note: {r['note']}")
        if "agreement_region" in r:
            c.print(f"agreement on fresh inputs: in the region {r['agreement_region']}, "
                    f"unrestricted {r['agreement_global']} ({r['fraction_global_in_region']:.0%} in region)")
        if "within_tolerance" in r:
            c.print(f"within tolerance {r['tolerance']:g}: {r['within_tolerance']}")
        if "run" in r:
            c.print(f"saved run {r['run']}  ({r['seconds']:.1f} s)")

        if "noise_sweep" in r:
            c.print(f"error vs noise: log-log slope {r['noise_sweep']['loglog_slope']} (figure in the run)")

    emit(out, as_json, human)


def _check_cost(d: int, heads: int, bound: int | None, float64: bool, allow_long: bool, oversample: int = 0) -> None:
    """Memory (H0 d x d matrices; an exact mpmath entry takes ~200 bytes) and time (4 H0 d^2 queries, each
    about d + H0 ms of exact arithmetic here) known from --d and --heads, checked before anything is built."""
    from attribution.blackbox.recovery import expected_queries
    from core.options import check_long, check_memory

    h0 = max(heads, bound or heads)
    check_memory(f"--d {d} with {h0} heads", 8 * h0 * d * d * (8 if float64 else 200))
    queries = expected_queries(d, h0) * (1 + oversample / (2 * h0 + 1))  # o more k values per experiment
    check_long(f"recovering {h0} heads at --d {d} ({queries:,.0f} queries)", queries * (d + h0) * 1e-3, allow_long)
