"""Cost before you start, and results shared across sessions: a finished job records its measured seconds per
item, the next job of the same shape gets an estimate from it (printed by the CLI before it starts), and the
board finds the newest finished job for exactly a spec while its run is stored."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli as cli

from core.store import RunStore
from workbench.scheduler import JobBoard, run
from workbench.scheduler.board import spec_key
from workbench.scheduler.costs import FILE, record
from workbench.scheduler.kinds import estimate, get_kind


def test_spec_key_is_order_free_and_tells_specs_apart():
    a = {"kind": "sleep", "seconds": 1, "steps": 4}
    assert spec_key(a) == spec_key(dict(reversed(list(a.items()))))
    assert spec_key(a) != spec_key({**a, "steps": 5})


def test_latest_done_finds_the_newest_run_and_skips_deleted_ones():
    board, spec = JobBoard(), {"kind": "sleep", "seconds": 0.05, "steps": 2}
    assert board.latest_done(spec) is None
    first, _ = run(spec)
    second, _ = run(spec)
    run({**spec, "steps": 3})  # another spec: never found for this one
    assert board.latest_done(spec).id == second.id
    RunStore().remove(second.run_id)
    assert board.latest_done(spec).id == first.id
    RunStore().remove(first.run_id)
    assert board.latest_done(spec) is None


class _Counted:
    """A kind with items and a cost key (the sleep kind's work, counted)."""

    def __getattr__(self, name):
        return getattr(get_kind("sleep"), name)

    def items(self, spec):
        return int(spec["steps"])

    def cost_key(self, spec):
        return f"pause={float(spec['seconds']) / int(spec['steps']):.3f}"

    prior = None  # estimated only from what earlier jobs measured (the sleep kind knows its cost)


def test_a_finished_job_gives_the_next_one_its_estimate(monkeypatch):
    from workbench.scheduler import kinds

    monkeypatch.setitem(kinds.KINDS, "counted", _Counted())
    board = JobBoard()
    spec = {"kind": "counted", "seconds": 0.4, "steps": 8}  # 50 ms per step
    assert estimate(spec, root=board.root) is None  # nothing measured yet
    run(spec)
    table = json.loads((board.root / FILE).read_text())
    (per_item,) = table.values()
    assert 0.04 < per_item < 0.2
    bigger = {"kind": "counted", "seconds": 2.0, "steps": 40}  # same per-step cost, 5x the steps
    cost = estimate(bigger, root=board.root)
    assert cost.items == 40 and cost.seconds == pytest.approx(40 * per_item)
    assert "measured on an earlier job" in cost.text() and cost.text().endswith("s")
    assert estimate(bigger, workers=2, root=board.root).seconds == pytest.approx(20 * per_item)  # two shards
    assert estimate({**bigger, "seconds": 20.0}, root=board.root) is None  # another per-item cost: unknown


def test_a_damaged_cost_table_is_ignored(monkeypatch):
    from workbench.scheduler import kinds

    monkeypatch.setitem(kinds.KINDS, "counted", _Counted())
    board = JobBoard()
    board.root.mkdir(parents=True, exist_ok=True)
    (board.root / FILE).write_text("{not json")
    spec = {"kind": "counted", "seconds": 0.1, "steps": 2}
    assert estimate(spec, root=board.root) is None
    record(board.root, _Counted(), spec, seconds=1.0, items=2, parallel=1)  # rewrites it whole
    assert estimate(spec, root=board.root).seconds_per_item == pytest.approx(0.5)


def test_faithfulness_prints_its_estimate_the_second_time(monkeypatch, capsys, tmp_path, tiny_llama_dir):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"a b c {w}", "target": " d", "foil": " e"}) + "\n"
                               for w in ("x", "y", "z")))
    args = ("faithfulness", "--model", str(tiny_llama_dir), "--prompts", str(prompts), "--methods", "random",
            "--no-save")
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "estimate:" not in err
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "estimate: 3 items x" in err and "measured on an earlier job" in err


def test_notebook_estimate_job(monkeypatch):
    import workbench as wb
    from workbench.scheduler import kinds

    monkeypatch.setitem(kinds.KINDS, "counted", _Counted())
    spec = {"kind": "counted", "seconds": 0.1, "steps": 2}
    assert wb.estimate_job(spec) is None
    wb.run_job(spec, save=False)
    assert wb.estimate_job({**spec, "seconds": 0.5, "steps": 10}).items == 10


def test_a_new_job_carries_its_estimate(monkeypatch):
    from workbench.scheduler import kinds
    from workbench.scheduler.runner import create

    monkeypatch.setitem(kinds.KINDS, "counted", _Counted())
    board = JobBoard()
    spec = {"kind": "counted", "seconds": 0.2, "steps": 4}
    assert create(spec, 1, None, board).estimate_s is None
    run(spec)
    job = board.get(create({**spec, "seconds": 0.4, "steps": 8}, 1, None, board).id)
    assert job.estimate_s > 0 and any("estimate: 8 items" in line for line in job.log)
