"""The run store: atomic runs, SQLite index, killed writers leave nothing half-written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
import torch

from core.errors import RunStoreError
from core.store import RunDraft, RunStore


def _draft(i: int) -> RunDraft:
    return RunDraft(kind="attribute", model="m", method="dpa", args={"i": i},
                    result={"value": i}, tensors={"scores": torch.arange(4.0) * i},
                    tables={"t": pd.DataFrame({"a": [i]})})


def test_save_list_show_rm(tmp_path):
    store = RunStore(tmp_path)
    runs = [store.save(_draft(i)) for i in range(3)]
    listed = store.list()
    assert {r["id"] for r in listed} == {r.id for r in runs}
    back = store.get(runs[1].id)
    assert back.meta["args"] == {"i": 1} and back.meta["versions"]["torch"].startswith("2.13")
    assert torch.equal(back.tensors()["scores"], torch.arange(4.0))
    assert back.table("t")["a"].tolist() == [1]
    store.remove(runs[0].id)
    assert runs[0].id not in {r["id"] for r in store.list()}
    with pytest.raises(RunStoreError):
        store.get(runs[0].id)
    with pytest.raises(RunStoreError):
        store.get("../etc")
    assert (tmp_path / "index.sqlite").exists()


def test_runs_never_overwrite(tmp_path):
    store = RunStore(tmp_path)
    ids = {store.save(_draft(0)).id for _ in range(5)}
    assert len(ids) == 5


def test_failed_write_leaves_nothing(tmp_path):
    store = RunStore(tmp_path)
    good = store.save(_draft(1))

    class Boom:
        def to_csv(self, *a, **k):
            raise RuntimeError("disk on fire")

    draft = _draft(2)
    draft.tables["bad"] = Boom()
    with pytest.raises(RuntimeError):
        store.save(draft)
    assert [r["id"] for r in store.list()] == [good.id]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_killed_writer_leaves_no_partial_run(tmp_path):
    store = RunStore(tmp_path)
    earlier = store.save(_draft(7))
    # A writer that stalls in the middle of writing a big tensor, then gets SIGKILLed.
    script = textwrap.dedent(f"""
        import time, torch, pandas as pd
        from core.store import RunStore, RunDraft
        class Slow:
            def to_csv(self, path, index=False):
                open(path, "w").write("a\\n1\\n")
                print("writing", flush=True)
                time.sleep(60)
        RunStore({str(tmp_path)!r}).save(RunDraft(kind="attribute", tensors={{"x": torch.ones(1000, 1000)}},
                                         tables={{"slow": Slow()}}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.1)
    rows = store.list()
    assert [r["id"] for r in rows] == [earlier.id]
    assert torch.equal(store.get(earlier.id).tensors()["scores"], torch.arange(4.0) * 7)
    # the stalled temporary directory is hidden from every listing
    assert all(p.name.startswith(".") for p in tmp_path.iterdir() if p.is_dir() and p.name != earlier.id)


def test_index_rebuilt_from_directories(tmp_path):
    store = RunStore(tmp_path)
    run = store.save(_draft(3))
    (tmp_path / "index.sqlite").unlink()
    for extra in ("index.sqlite-wal", "index.sqlite-shm"):
        (tmp_path / extra).unlink(missing_ok=True)
    assert [r["id"] for r in RunStore(tmp_path).list()] == [run.id]
