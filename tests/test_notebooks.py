"""The notebooks: the quickstart runs end to end in a kernel (toy model, so it stays fast); the tour
(smollm2-135m, executed by scripts/run_tour.py, minutes) is checked as committed: every cell ran, in order,
without an error, and its views are there."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a toy model: one thread is fastest on a shared machine
    nb = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    # the last cell checks the run it saved is the newest in the store
    last = nb.cells[-1].outputs[-1]["data"]["text/plain"]
    assert last == "True"


def test_tour_notebook_is_committed_executed():
    nb = nbformat.read(NOTEBOOKS / "tour.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) >= 20
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), "run scripts/run_tour.py: the tour's outputs are stale"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = json.dumps([c.source for c in code])
    for call in ("wb.load(", "wb.attribute(", "wb.attention(", "wb.lens(", "wb.dla(", "wb.patch(", "path_patch(",
                 "wb.circuit(", ".export(", "wb.feature_graph(", "wb.sae_features(", "wb.sae_steer(", "run_probe(",
                 "wb.vit_explain(", "wb.run_job("):
        assert call in text, call
    shown = json.dumps(outputs)
    assert "wb-colored-tokens" in shown  # the coloured tokens rendered as HTML
    assert "pick a layer" in shown  # the attention grid with its layer menu
    assert sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs) >= 10
