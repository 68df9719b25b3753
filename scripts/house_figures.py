"""The figures a restructuring must not move (issue 48): a circuit, its exports, a feature graph, DPA at head level and
a circuit-benchmark task, each computed by the CLI of the checkout this runs in, into one JSON file; ``--compare``
checks two such files number by number.

    python scripts/house_figures.py --out /tmp/before.json          # in the old checkout
    python scripts/house_figures.py --out /tmp/after.json           # in the new one
    python scripts/house_figures.py --compare /tmp/before.json /tmp/after.json

Each command runs with a fresh run store (WORKBENCH_RUNS) so run ids, paths and times are the only differences;
those keys are left out of the comparison. Numbers must agree to float precision (relative 1e-5 of the scale).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "When Mary and John went to the store, John gave a drink to"
CLI = [sys.executable, "-c", "from workbench.cli import main; main()"]

# (name, arguments); "{runs}" is the fresh run store, "{run}" the id of the run the circuit command saved
COMMANDS: list[tuple[str, list[str]]] = [
    ("attribute_dpa_head", ["attribute", "smollm2-135m", PROMPT, "--target", " Mary", "--foil", " John",
                            "--method", "dpa", "--level", "head", "--json"]),
    ("circuit_dpa", ["circuit", "discover", "--model", "smollm2-135m", "--prompts", "data/prompts/ioi.jsonl",
                     "--method", "dpa", "--edges", "100", "--limit", "4", "--grid", "10,50,200", "--json"]),
    ("export_graph_json", ["export", "{run}", "--format", "graph-json", "--out", "{tmp}/graph.json"]),
    ("export_mib", ["export", "{run}", "--format", "mib", "--out", "{tmp}/mib.json"]),
    ("feature_graph_dpa", ["feature-graph", "--model", "smollm2-135m", "--prompt", PROMPT, "--target", " Mary",
                           "--foil", " John", "--saes",
                           "smollm2-135m-L12-resid-topk2304,smollm2-135m-L18-resid-topk2304", "--json"]),
    ("bench_ioi", ["bench", "circuits", "--model", "smollm2-135m", "--tasks", "ioi",
                   "--methods", "random,eap,eap_ig,dpa,dpa_cf,dpa_path:steps=4", "--levels", "edge,node",
                   "--n-train", "8", "--n-test", "8", "--no-save-run", "--out", "{tmp}/bench.md", "--json"]),
]

# keys whose values differ between two runs of the same work
VOLATILE = ("time", "seconds", "document", "json", "slug", "elapsed", "run", "id", "path", "created", "date",
            "out", "version", "commit", "host", "load", "started", "finished", "cache", "_s", "eta", "git", "pid",
            "dir", "file", "url")


def run_all(out: Path, only: list[str] | None = None) -> None:
    figures: dict[str, object] = json.loads(out.read_text()) if only and out.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "WORKBENCH_RUNS": f"{tmp}/runs", "WORKBENCH_JOBS": f"{tmp}/jobs"}
        run_id = ""
        for name, args in COMMANDS:
            if only and name not in only:
                continue
            args = [a.replace("{tmp}", tmp).replace("{run}", run_id) for a in args]
            t0 = time.perf_counter()
            done = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env)
            print(f"{name}: exit {done.returncode} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            if done.returncode != 0:
                sys.exit(f"{name} failed: {done.stderr.strip()[-2000:]}")
            if name.startswith("export_"):
                target = Path(args[args.index("--out") + 1])
                figures[name] = json.loads(target.read_text())
                continue
            figures[name] = json.loads(done.stdout)
            if name == "circuit_dpa":
                run_id = find_run_id(figures[name])
    out.write_text(json.dumps(figures, indent=1, sort_keys=True))
    print(f"wrote {out}", file=sys.stderr)


def find_run_id(result: object) -> str:
    if isinstance(result, dict):
        for key in ("run_id", "run", "id"):
            if isinstance(result.get(key), str):
                return result[key]
        for value in result.values():
            if found := find_run_id(value):
                return found
    return ""


def volatile(key: str) -> bool:
    k = key.lower()
    return any(k == v or k.endswith(v) or k.startswith(v + "_") for v in VOLATILE)


def numbers(value: object, where: str = "") -> dict[str, float | str]:
    """Every leaf under its path, volatile keys left out."""
    found: dict[str, float | str] = {}
    if isinstance(value, dict):
        for key, sub in value.items():
            if not volatile(str(key)):
                found.update(numbers(sub, f"{where}/{key}"))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            found.update(numbers(sub, f"{where}[{i}]"))
    elif isinstance(value, bool) or value is None:
        found[where] = str(value)
    elif isinstance(value, int | float):
        found[where] = float(value)
    else:
        found[where] = str(value)
    return found


def compare(before: Path, after: Path) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    bad = 0
    for name in sorted(set(a) | set(b)):
        na, nb = numbers(a.get(name)), numbers(b.get(name))
        floats = [abs(v) for v in na.values() if isinstance(v, float) and math.isfinite(v)]
        scale = max(floats, default=1.0) or 1.0
        diffs, worst = [], 0.0
        for key in sorted(set(na) | set(nb)):
            x, y = na.get(key), nb.get(key)
            if isinstance(x, float) and isinstance(y, float):
                gap = abs(x - y) / max(scale, 1e-12)
                worst = max(worst, gap)
                if gap > 1e-5 and not (math.isnan(x) and math.isnan(y)):
                    diffs.append(f"{key}: {x} -> {y}")
            elif x != y:
                diffs.append(f"{key}: {x!r} -> {y!r}")
        n = sum(isinstance(v, float) for v in na.values())
        status = "equal" if not diffs else f"{len(diffs)} differ"
        print(f"{name}: {n} numbers, {status}, largest relative gap {worst:.2e}")
        for line in diffs[:10]:
            print("   ", line)
        bad += bool(diffs)
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path)
    parser.add_argument("--only", help="comma-separated command names, merged into an existing --out")
    args = parser.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    if not args.out:
        parser.error("--out or --compare")
    run_all(args.out, args.only.split(",") if args.only else None)


if __name__ == "__main__":
    main()
