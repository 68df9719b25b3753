"""scripts/report_dpa_variants.py ranks the variants over every model's validation run: runs with different
variants are refused in one line (README line 333 once ran four of the six, and the report died on a KeyError)."""

from __future__ import annotations

import subprocess
import sys

from scripts.report_dpa_variants import ROOT, variants_differ
from tests.test_readme_commands import readme_commands

SIX = ["dpa", "dpa_norm", "dpa_cf", "dpa:w_q=0:w_k=0:w_v=1", "dpa:w_q=1:w_k=1:w_v=1:w_gate=1:w_up=1",
       "dpa_norm:w_q=0:w_k=0:w_v=1"]


def run(methods: list[str]) -> dict:
    return {"config": {"methods": methods}}


def test_the_same_variants_in_any_order_pass():
    assert variants_differ({"smollm2-135m": run(SIX), "gemma3-270m": run(SIX[::-1])}) is None


def test_a_run_with_fewer_variants_is_named_with_what_it_lacks():
    why = variants_differ({"smollm2-135m": run(SIX), "gemma3-270m": run(SIX[:4])})
    assert why == ("validation_gemma3-270m.json lacks dpa:w_q=1:w_k=1:w_v=1:w_gate=1:w_up=1, "
                   "dpa_norm:w_q=0:w_k=0:w_v=1, which validation_smollm2-135m.json ran: "
                   "rerun it with the same --methods")
    why = variants_differ({"smollm2-135m": run(SIX[:5]), "gemma3-270m": run(SIX)})
    assert why.startswith("validation_smollm2-135m.json lacks dpa_norm:w_q=0:w_k=0:w_v=1, which validation_gemma3")


def test_the_committed_runs_hold_the_variants_the_readme_line_runs(tmp_path):
    """The README's validation line runs the variants the committed documents hold, and the report reads them."""
    [line] = [c for c in readme_commands() if "--eval-split" in c.args and "validation" in c.args]
    assert line.args[line.args.index("--methods") + 1] == ",".join(SIX)
    done = subprocess.run([sys.executable, "scripts/report_dpa_variants.py", "--out", str(tmp_path / "r.md")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Chosen on validation" in (tmp_path / "r.md").read_text()
