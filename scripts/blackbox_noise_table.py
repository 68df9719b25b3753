"""Recovery error vs oracle noise for a few (d, heads, seed) settings: the table in
results/blackbox/noise.md.

    python scripts/blackbox_noise_table.py > results/blackbox/noise.md

Each cell: max relative error of W (true canonical heads, best permutation) / the recovery's own
error estimate (no truth used) / the outcome (ok = estimate below 1e-2; unreliable = a result whose
estimate is above 1e-2 or infinite; NoiseBreakdown / HeadCount = the one-line error raised). Noise 0
is the float64 oracle (rounding only); "exact" is the mpmath oracle.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRID = [0.0, 1e-12, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-3]
SETTINGS = [(3, 2, 0), (3, 2, 1), (3, 2, 2), (4, 2, 0), (4, 2, 1), (4, 2, 2), (4, 3, 0), (6, 2, 0)]


def cell(params, noise, seed, oversample, exact=False):
    from attribution.blackbox.canonical import canonicalize, compare_heads
    from attribution.blackbox.noisy import noisy_mha_oracle
    from attribution.blackbox.oracle import mha_oracle
    from attribution.blackbox.recovery import recover
    from core.errors import WorkbenchError

    oracle = mha_oracle(params, exact=True) if exact else noisy_mha_oracle(params, noise, seed=seed)
    try:
        rec = recover(oracle, params.heads, seed=seed, oversample=oversample, dps=50 if exact else 30)
    except WorkbenchError as exc:
        return {"err": None, "est": None, "outcome": type(exc).__name__.replace("Error", "") or "error"}
    truth = canonicalize(params)
    if rec.heads != truth.heads:
        return {"err": None, "est": rec.error_estimate, "outcome": f"{rec.heads} heads"}
    cmp = compare_heads(truth, rec.W, rec.v)
    err = max(cmp.max_rel_error_W, cmp.max_rel_error_v)
    return {"err": err, "est": rec.error_estimate, "outcome": "ok" if rec.reliable else "unreliable"}


def fmt(c) -> str:
    e = "-" if c["err"] is None else f"{c['err']:.0e}"
    s = "-" if c["est"] is None else ("inf" if c["est"] == float("inf") else f"{c['est']:.0e}")
    return f"{e} / {s} / {c['outcome']}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oversample", type=int, default=0)
    a = ap.parse_args()
    from attribution.blackbox.oracle import random_mha

    t0 = time.time()
    print(f"oversample {a.oversample}; cell: max relative error of W and v vs the truth / the recovery's own "
          "estimate / outcome\n")
    print("| d, H, seed | exact | " + " | ".join("float64" if s == 0 else f"{s:g}" for s in GRID)
          + " | reliable up to |")
    print("|---" * (len(GRID) + 3) + "|")
    for d, H, seed in SETTINGS:
        p = random_mha(d, H, seed=seed)
        cells = [cell(p, 0.0, seed, a.oversample, exact=True)] + [cell(p, s, seed, a.oversample) for s in GRID]
        ok = [s for s, c in zip(GRID, cells[1:], strict=True) if c["outcome"] == "ok"]
        upto = 0.0
        for s, c in zip(GRID, cells[1:], strict=True):
            if c["outcome"] != "ok" or c["err"] is None or c["err"] >= 1e-2:
                break
            upto = s
        print(f"| {d}, {H}, {seed} | " + " | ".join(fmt(c) for c in cells) + f" | {upto:g} |", flush=True)
        del ok
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
