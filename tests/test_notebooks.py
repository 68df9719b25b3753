"""The notebooks run top to bottom in a kernel (nbclient), and the outputs committed with them are the ones their
own sources produced (scripts/run_tour.py writes them and stamps each code cell with its source's SHA-1).

- quickstart (the toy IOI model, seconds): executed here, in CI; its committed copy must be executed and current;
- tour (smollm2-135m, dinov2-small, a job; about a minute on one thread, more on a loaded machine): executed in the
  slow suite (./dev test --slow); in CI its committed copy is checked: every cell ran, in order, without an error,
  from the source it holds now, and its views are there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
sys.path.insert(0, str(ROOT / "scripts"))
from run_tour import source_sha1  # noqa: E402


def _execute(name: str, cwd: Path, timeout: int = 600):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:  # a clean start, as run_tour.py makes
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def _assert_committed_current(name: str) -> list:
    """The committed notebook: every code cell ran, in order, without an error, from the source it holds now."""
    code = _code(nbformat.read(NOTEBOOKS / name, as_version=4))
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), f"run scripts/run_tour.py --notebook notebooks/{name}"
    stale = [c.source.splitlines()[0] for c in code if c.metadata.get("source_sha1") != source_sha1(c.source)]
    assert not stale, f"{name}: cells edited since their outputs were made (run scripts/run_tour.py): {stale}"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    return code


def _same_shape(fresh, name: str) -> None:
    """A fresh run shows what is committed: per code cell, the same results and views, each of the same kind
    (their numbers, ids and times may differ)."""
    committed = _code(nbformat.read(NOTEBOOKS / name, as_version=4))
    kinds = lambda cells: [[(o.output_type, sorted(o.get("data", {}))) for o in c.outputs  # noqa: E731
                            if o.output_type != "stream"] for c in cells]  # printed lines and progress bars vary
    assert kinds(_code(fresh)) == kinds(committed), f"{name}: a fresh run's outputs differ from the committed ones"


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a toy model: one thread is fastest on a shared machine
    nb = _execute("quickstart.ipynb", tmp_path, timeout=300)
    outputs = [o for c in _code(nb) for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    # the last cell checks the run it saved is the newest in the store
    last = nb.cells[-1].outputs[-1]["data"]["text/plain"]
    assert last == "True"
    _assert_committed_current("quickstart.ipynb")
    _same_shape(nb, "quickstart.ipynb")


def test_an_edited_cell_shows_as_stale(tmp_path, monkeypatch):
    nb = nbformat.read(NOTEBOOKS / "tour.ipynb", as_version=4)
    _code(nb)[3].source += "\n# edited, never re-run"
    nbformat.write(nb, tmp_path / "tour.ipynb")
    monkeypatch.setattr(sys.modules[__name__], "NOTEBOOKS", tmp_path)
    with pytest.raises(AssertionError, match="edited since"):
        _assert_committed_current("tour.ipynb")


def test_tour_notebook_is_committed_executed():
    code = _assert_committed_current("tour.ipynb")
    assert len(code) >= 20
    outputs = [o for c in code for o in c.outputs]
    text = json.dumps([c.source for c in code])
    for call in ("wb.load(", "wb.attribute(", "wb.attention(", "wb.lens(", "wb.dla(", "wb.patch(", "path_patch(",
                 "wb.circuit(", ".export(", "wb.feature_graph(", "wb.sae_features(", "wb.sae_steer(", "run_probe(",
                 "wb.vit_explain(", "wb.run_job("):
        assert call in text, call
    shown = json.dumps(outputs)
    assert "wb-colored-tokens" in shown  # the coloured tokens rendered as HTML
    assert "pick a layer" in shown  # the attention grid with its layer menu
    assert sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs) >= 10


@pytest.mark.slow_suite
def test_tour_notebook_executes(tmp_path, monkeypatch):
    """The tour top to bottom in a fresh kernel from the checkout's root (as run_tour.py runs it), its runs and
    jobs in a temporary store."""
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    # one torch thread (run_tour.py --threads 1): on a loaded machine more threads only spin (12 min against 90 s)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    nb = _execute("tour.ipynb", ROOT)
    assert not [o for c in _code(nb) for o in c.outputs if o.output_type == "error"]
    _same_shape(nb, "tour.ipynb")
