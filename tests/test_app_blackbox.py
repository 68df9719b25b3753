"""Black-box recovery page: run a recovery, read queries vs formula, save it, bad input."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from app.testing import open_page, problems  # noqa: E402
from core.store import RunStore  # noqa: E402


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_recovery_runs_and_follows_d():
    at = open_page("blackbox", {"bb_d": 2, "bb_heads": 1, "bb_noise": 1e-9})
    assert not problems(at)
    assert any("Recover heads" in i.value for i in at.info)  # nothing runs before the button
    at.button[0].click().run()
    assert not problems(at)
    m = metrics(at)
    assert m["queries used"] == m["formula 4Md²−2M+1"] == "15"  # 4*1*2^2 - 2 + 1
    assert m["heads recovered"] == "1 / 1"
    at.number_input(key="bb_d").set_value(3)
    at.button[0].click().run()
    assert metrics(at)["formula 4Md²−2M+1"] == "35"
    at.button(key="bb_save").click().run()
    assert [r["kind"] for r in RunStore().list()] == ["recover-heads"]


def test_bad_sizes_are_a_message():
    at = open_page("blackbox", {"bb_d": 1, "bb_heads": 4, "bb_bound": 1, "bb_noise": 1e-9})
    at.button[0].click().run()
    assert not at.exception
    assert at.error, "a bound below H is refused with a message"
