"""Time the CLI's refusals of input that needs no model, each in a fresh process as a user runs it: every one
should answer in under 1 s (issue 52: `workbench ablate M -c ''` took 8.8 s, loading TransformerLens and the
model before it read -c). Writes results/cli/refusals.md.

    python scripts/bench_refusals.py [--repeat 3] [--before PATH] [--out results/cli/refusals.md]

The cases are tests/test_hardening_refusals.py's LIGHT_REFUSALS (the tests check each is refused without a
model load and without importing torch or TransformerLens; this script says how long each takes). Each runs
as ``python -m workbench.cli ARGS`` in an empty folder with its own run store; the time is the median wall
time of --repeat runs, start-up included. --before PATH times the same cases in another checkout (say a
``git worktree`` of an older commit) for a before/after column.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_hardening_refusals import DATASET, LIGHT_REFUSALS  # noqa: E402

BASELINES = [["models"], ["--help"]]


def timed(repo: Path, args: list[str], repeat: int) -> tuple[float, int, str]:
    """(median seconds, exit code, first stderr line) of ``workbench ARGS`` run from the checkout ``repo``."""
    times, rc, line = [], 0, ""
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="refusal-") as tmp:
            (Path(tmp) / "d.jsonl").write_text(DATASET)
            env = dict(os.environ, PYTHONPATH=str(repo), WORKBENCH_RUNS=str(Path(tmp) / "runs"))
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "workbench.cli", *args], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=600)
            times.append(time.perf_counter() - started)
            rc, line = proc.returncode, (proc.stderr.strip().splitlines() or [""])[0]
    return statistics.median(times), rc, line


def commit(repo: Path) -> str:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or str(repo)


def shown(args: list[str]) -> str:
    return "workbench " + " ".join(a if a and " " not in a else repr(a) for a in args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", type=Path, help="Another checkout to time the same cases in (one run each).")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "cli" / "refusals.md")
    opts = ap.parse_args()
    rows = []
    for args in [*BASELINES, *(a for a, _ in LIGHT_REFUSALS)]:
        after = timed(ROOT, args, opts.repeat)
        before = timed(opts.before, args, 1) if opts.before else None
        rows.append((args, before, after))
        print(f"{after[0]:6.2f} s" + (f" (before {before[0]:6.2f} s)" if before else "") + f"  {shown(args)}",
              file=sys.stderr, flush=True)
    cases = rows[len(BASELINES):]
    slowest = max(after[0] for _, _, after in cases)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "# Refusals before anything loads (issue 52)",
        "",
        f"`python scripts/bench_refusals.py{' --before OLD' if opts.before else ''}` on {platform.node()} "
        f"({os.cpu_count()} CPU cores, load average {load:.1f} when it ended), Python {platform.python_version()}: "
        f"each command in a fresh process (start-up included), median of {opts.repeat} runs"
        + (f", before: one run in the checkout at {commit(opts.before)}" if opts.before else "") + ".",
        "",
        f"Every case is refused in one line with exit 2; the slowest takes {slowest:.2f} s "
        f"({'all under' if slowest < 1 else 'NOT all under'} 1 s). The first rows are commands that need no model "
        "at all, for scale.",
        "",
        "| command | " + ("before s | " if opts.before else "") + "after s | exit | line |",
        "|---|" + ("---:|" if opts.before else "") + "---:|---:|---|",
    ]
    for args, before, after in rows:
        cells = [f"`{shown(args)}`"] + ([f"{before[0]:.2f}"] if before else []) + \
                [f"{after[0]:.2f}", str(after[1]), after[2].replace("|", "\\|")[:120]]
        lines.append("| " + " | ".join(cells) + " |")
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {opts.out}", file=sys.stderr)
    bad = [shown(a) for a, _, after in cases if after[1] != 2]
    if bad:
        print(f"not refused with exit 2: {bad}", file=sys.stderr)
    return 1 if bad or slowest >= 1 else 0


if __name__ == "__main__":
    sys.exit(main())
