"""Benchmark the foundation's speed goals in fresh processes: import costs, cold conversion,
warm load of smollm2-135m (imports excluded), and CLI start-up for commands that need no model.

    python scripts/bench_foundation.py [--cold]   (--cold re-converts the GGUF into a temp cache)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

PY = sys.executable


def timed(code: str, env: dict | None = None) -> dict:
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def import_time(module: str) -> float:
    return timed(f"import time; t=time.perf_counter(); import {module}; "
                 f"import json; print(json.dumps({{'s': time.perf_counter()-t}}))")["s"]


LOAD = ("import time, json, torch, transformer_lens, transformers; import workbench as wb; "
        "t=time.perf_counter(); m=wb.load('smollm2-135m'); s=time.perf_counter()-t; "
        "print(json.dumps({'s': s, 'paris': m.generate('The capital of France is', 1)}))")


def cli_time(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([os.path.join(os.path.dirname(PY), "workbench"), *args], capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> None:
    report = {f"import_{m}": round(import_time(m), 2)
              for m in ("torch", "transformers", "transformer_lens", "nnsight", "sae_lens", "workbench")}
    if "--cold" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            env = {"WORKBENCH_CACHE": tmp}
            started = time.perf_counter()
            subprocess.run([PY, "-c", "from core.models.llm import prepare_smollm2; prepare_smollm2()"],
                           env={**os.environ, **env}, check=True, capture_output=True)
            report["cold_convert_s"] = round(time.perf_counter() - started, 1)
            report["first_load_after_convert_s"] = round(timed(LOAD, env)["s"], 2)
    warm = [timed(LOAD) for _ in range(3)]
    report["warm_load_s"] = [round(w["s"], 2) for w in warm]
    report["warm_load_paris"] = warm[0]["paris"]
    for args in (["--help"], ["models"], ["runs", "list"]):
        report["cli_" + "_".join(a.strip("-") for a in args) + "_s"] = round(min(cli_time(*args) for _ in range(3)), 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
