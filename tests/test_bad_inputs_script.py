"""scripts/bad_inputs.py itself (no case is run here): every error case names the words its error line must hold,
the classes are strict (an error line without those words is unclear, a refused good input is not a pass), the
exit status is 0 only when every case is a clear error or ok, and the shared worker counts what a case writes
to the process's real stdout/stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bad_inputs as bi  # noqa: E402


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    files = bi.make_files(tmp_path_factory.mktemp("bad") / "files")
    files["http"] = "http://127.0.0.1:9"
    return bi.catalogue(files) + bi.generated_numeric_cases()


def test_every_error_case_names_its_words(cases):
    errors = [c for c in cases if c.expect == "error"]
    assert len(errors) > 1000
    assert not [c.name for c in errors if not c.words]
    assert not set(bi.WORDS) - {c.name for c in cases}, "WORDS names a case the catalogue no longer has"


def test_classes_are_strict(tmp_path):
    case = bi.Case("x", ["attribute"], words=("--top",))
    judge = lambda rc, err, c=case: bi.classify(c, c.args, "", err, rc, tmp_path, set(), set())["class"]  # noqa
    assert judge(2, "error: --top must be positive\n") == "clear-error"
    assert judge(2, "error: something is wrong\n") == "unclear-error"  # does not name --top
    assert judge(2, "warning: slow\nerror: --top must be positive\n") == "unclear-error"  # two lines
    progress = "[      0 s] estimate: 1 items x 2 ms\nestimate: 1 items\n[   7 s] x · 1/1\r[   8 s] x · 1/1\n"
    assert judge(2, progress + "error: --top must be positive\n") == "clear-error"  # a job's progress on stderr
    good = bi.Case("y", ["models"], expect="ok")
    assert bi.classify(good, good.args, "", "error: no\n", 2, tmp_path, set(), set())["class"] == "refused-good"


def test_worker_counts_the_real_file_descriptors(tmp_path):
    """A case whose command writes to fd 2 below sys.stderr (as a handler holding the original stream does)."""
    probe = "import os, workbench.cli as c; m = c.main\n" \
            "def main():\n    os.write(2, b'below python\\n'); os.write(1, b'fd one\\n'); m()\nc.main = main\n"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(probe)  # loaded at the worker's start-up
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}"}
    worker = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "bad_inputs.py"), "--worker"], cwd=ROOT,
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    job = {"args": ["--version"], "store": str(tmp_path / "runs"), "cwd": str(tmp_path), "timeout": 120}
    try:
        out, _ = worker.communicate(json.dumps(job) + "\n", timeout=300)
    finally:
        worker.kill()
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["rc"] == 0 and "workbench" in answer["out"]
    assert "below python" in answer["err"] and "fd one" in answer["out"]
