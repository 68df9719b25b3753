"""Issue 50 finding 5: the faithfulness note advised "try corrupt ablation" on the Circuits page's default
prompt, whose curve is already corrupt-ablated. The advice now follows the ablation the curve was made under."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import open_page, problems  # noqa: E402


def falling(k: list[int] | None = None):
    from circuits.evaluate import Faithfulness

    k = k or [1, 5, 10]
    return Faithfulness(k=k, normalized=[0.5 if i % 2 == 0 else 0.1 for i in range(len(k))],
                        complement=[0.0] * len(k), metric_full=2.0, metric_empty=0.0, auc=0.0)


@pytest.mark.parametrize("ablation,advised", [("corrupt", False), ("mean", True), ("zero", True), (None, True)])
def test_the_note_advises_corrupt_only_where_it_was_not_used(ablation, advised):
    from app.circuit_views import curve_note

    note = curve_note({"dpa": falling()}, ablations=None if ablation is None else {"dpa": ablation})
    assert "non-monotone" in note  # the finding itself is still said
    assert ("try corrupt ablation" in note) is advised
    if ablation == "zero":
        assert "zero ablation" in note and "mean ablation" not in note


def _notes(at) -> list[str]:
    return [str(i.value) for i in at.info if "non-monotone" in str(i.value)]


def test_the_default_prompt_is_not_told_to_use_what_it_uses(monkeypatch, one_thread):
    import circuits.discover as discover

    def curve(model, graph, prompts, refs, scores, grid, selection, on_step=None):
        return falling(list(grid))

    monkeypatch.setattr(discover, "faithfulness", curve)  # a falling curve, whatever the toy model gives
    at = open_page("circuits", {"circ_model": "ioi-attn-2l1h"})
    assert not problems(at)
    assert at.selectbox(key="circ_ablation").value == "corrupt"
    (note,) = _notes(at)
    assert "try corrupt" not in note and "mean ablation" not in note
    at.selectbox(key="circ_eval_ablation").set_value("mean").run()
    at.button(key="circ_evaluate").click().run()  # the curve is now mean-ablated: the advice is due
    assert not problems(at)
    (note,) = _notes(at)
    assert "try corrupt ablation" in note
