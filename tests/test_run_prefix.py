"""Run ids by unique prefix, as git takes commits: a prefix that starts two ids is one typed line naming
them (exit 2 from the CLI), never the first match."""

from __future__ import annotations

import pytest
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from core.errors import WorkbenchError
from core.store import RunDraft, RunStore


def test_a_prefix_of_two_runs_is_refused_by_name(monkeypatch, capsys):
    store = RunStore()
    ids = [store.save(RunDraft(kind="note", model="m", method=f"x{i}", args={"prompt": f"p{i}"})).id
           for i in range(2)]
    shared = ids[0][: next(i for i, (a, b) in enumerate(zip(*ids, strict=False)) if a != b)]
    for command in (("runs", "show", shared), ("runs", "rm", shared), ("export", shared, "--format",
                                                                               "csv", "--out", "x.csv")):
        code, out, err = cli(monkeypatch, capsys, *command)
        assert_bad(code, err, "is the start of 2")
        assert out == ""
    assert sorted(r["id"] for r in store.list()) == sorted(ids)  # nothing removed
    with pytest.raises(WorkbenchError):  # the API's get takes whole ids only
        store.get(shared)
    code, out, _ = cli(monkeypatch, capsys, "runs", "show", ids[1][: len(shared) + 1], "--json")
    assert code == 0 and ids[1] in out  # one more character picks one
