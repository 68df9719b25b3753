"""What the backend tests share: the IOI pair the real-model tests run on, the closeness rule (largest difference
within 1e-4 of the reference values' own scale, an all-zero result failing), the engine calls they compare, and the
CLI's refusals run in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

import workbench as wb

CLEAN = "When Mary and John went out, John gave it to"
CORRUPTED = "When Mary and John went out, Mary gave it to"
REL_TOL = 1e-4


def close(got: Any, ref: Any, what: str) -> None:
    """``got`` equals ``ref`` within REL_TOL of ref's largest magnitude; both non-zero, same shape."""
    got, ref = torch.as_tensor(got).float(), torch.as_tensor(ref).float()
    assert got.shape == ref.shape
    scale = float(ref.abs().max())
    assert scale > 0 and float(got.abs().max()) > 0, what
    rel = float((got - ref).abs().max()) / scale
    print(f"{what}: against TransformerLens, max difference / scale = {rel:.1e}")
    assert rel < REL_TOL, (what, rel)


def attribute_scores(model: Any, method: str, level: str, **params: Any) -> torch.Tensor:
    return wb.attribute(model, CLEAN, target=" Mary", foil=" John", method=method, level=level, **params).scores


def head_patching(model: Any) -> torch.Tensor:
    return wb.patch(model, CLEAN, CORRUPTED, " Mary", " John", site="heads").effect


def eap_scores(model: Any) -> torch.Tensor:
    rows = [{"prompt": CLEAN, "target": " Mary", "foil": " John", "corrupt": CORRUPTED}]
    return wb.circuit(model, rows, method="eap", edges=20, evaluate=False).scores


HEAVY = ("torch", "nnsight", "transformer_lens")


def fresh_cli_refusals(cases: list[list[str]], cwd: Path, **env: str) -> tuple[dict, list[str], str]:
    """``workbench.cli.main`` over each argument list in one fresh interpreter, as a user runs the command (the repo
    on PYTHONPATH, runs under ``cwd``, ``env`` added to the environment): ({'codes': each exit code, 'heavy': which
    of HEAVY got imported}, the stderr lines that start with ``error:``, the stderr's last 2000 characters)."""
    script = (
        "import json, sys\n"
        "from workbench.cli import main\n"
        "codes = []\n"
        f"for args in {json.dumps(cases)}:\n"
        "    sys.argv = ['workbench', *args]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        f"print(json.dumps({{'codes': codes, 'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules)}}))\n")
    root = Path(__file__).resolve().parents[1]
    full_env = dict(os.environ, WORKBENCH_RUNS=str(cwd / "runs"), PYTHONPATH=str(root), **env)
    proc = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=300)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return got, [x for x in proc.stderr.splitlines() if x.startswith("error:")], proc.stderr[-2000:]
