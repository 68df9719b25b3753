"""Hardening of the run store: damaged runs, a corrupt index, leftovers of killed writers, symlinks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from core.errors import RunStoreError
from core.store import RunDraft, RunStore
from tests.cli_helpers import assert_bad, run_cli


def _save(store: RunStore, i: int = 0):
    return store.save(RunDraft(kind="attribute", model="m", method="dpa", args={"i": i}, result={"v": i},
                               tensors={"s": torch.arange(3.0)}))


@pytest.fixture
def store(tmp_path, monkeypatch) -> RunStore:
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path))
    return RunStore(tmp_path)


def _break(run, text: str) -> None:
    (run.path / "meta.json").write_text(text)


@pytest.mark.parametrize("text, why", [
    ("[1, 2]", "not a JSON object"),
    (None, "'created'"),  # "created": {"x": 1} was a sqlite ProgrammingError
    ("{not json", "not valid JSON"),
    ('{"kind": 3}', "'kind'"),
])
def test_bad_meta_is_damaged_not_fatal(store, monkeypatch, capsys, text, why):
    good, bad = _save(store, 1), _save(store, 2)
    if text is None:
        meta = json.loads((bad.path / "meta.json").read_text())
        text = json.dumps({**meta, "created": {"x": 1}})
    _break(bad, text)
    assert [r["id"] for r in store.list()] == [good.id]
    [entry] = store.damaged()
    assert entry["id"] == bad.id and why in entry["reason"]
    with pytest.raises(RunStoreError, match="damaged"):
        store.get(bad.id)
    # the CLI: --json keeps its shape, damaged entries come with --damaged; show refuses; rm removes
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [good.id] and "damaged" in err
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps the table's ids in a narrow terminal
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list")
    assert code == 0 and good.id in out and "damaged" in out and bad.id in out
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--damaged", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [bad.id]
    assert_bad(*run_cli(monkeypatch, capsys, "runs", "show", bad.id, "--json")[::2], bad.id, "damaged")
    code, out, err = run_cli(monkeypatch, capsys, "runs", "rm", bad.id, "--json")
    assert code == 0 and json.loads(out) == {"removed": bad.id}
    assert store.damaged() == [] and [r["id"] for r in store.list()] == [good.id]
    assert sorted(p.name for p in store.root.iterdir() if p.is_dir()) == [good.id]


def test_non_utf8_meta_and_missing_meta(store):
    good, bad = _save(store, 1), _save(store, 2)
    (bad.path / "meta.json").write_bytes(b"\xff\xfe{")
    gone = _save(store, 3)
    (gone.path / "meta.json").unlink()
    other = store.root / "notes"  # not named like a run: not ours, left alone
    other.mkdir()
    assert [r["id"] for r in store.list()] == [good.id]
    assert {d["id"]: d["reason"] for d in store.damaged()}.keys() == {bad.id, gone.id}
    with pytest.raises(RunStoreError, match="no run"):
        store.remove("notes")
    with pytest.raises(RunStoreError, match="no run"):
        store.remove("index.sqlite")
    store.remove(gone.id)
    assert other.is_dir() and (store.root / "index.sqlite").is_file()


@pytest.mark.parametrize("garbage", [b"garbage\n", b"SQLite format 3\x00" + b"\xff" * 200])
def test_corrupt_index_is_rebuilt(store, monkeypatch, capsys, garbage):
    a = _save(store, 1)
    for extra in ("index.sqlite-wal", "index.sqlite-shm"):
        (store.root / extra).unlink(missing_ok=True)
    (store.root / "index.sqlite").write_bytes(garbage)
    b = _save(store, 2)  # saving still works (and does not fail after writing the run)
    assert {r["id"] for r in RunStore(store.root).list()} == {a.id, b.id}
    (store.root / "index.sqlite").write_bytes(garbage)
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--json")
    assert code == 0 and {r["id"] for r in json.loads(out)} == {a.id, b.id}, err
    (store.root / "index.sqlite").write_bytes(garbage)
    code, out, err = run_cli(monkeypatch, capsys, "runs", "rm", a.id, "--json")
    assert code == 0, err
    assert not [p for p in store.root.iterdir() if p.name.startswith(".rm-")]
    import sqlite3

    assert [r["id"] for r in store.list()] == [b.id]
    con = sqlite3.connect(store.root / "index.sqlite")
    assert [r[0] for r in con.execute("SELECT id FROM runs")] == [b.id]  # rebuilt, not just bypassed
    con.close()


def test_rm_leaves_no_trash_when_index_fails(store, monkeypatch):
    a = _save(store, 1)

    def broken(self):
        raise RunStoreError("index unavailable")

    monkeypatch.setattr(RunStore, "_connect", broken)
    store.remove(a.id)
    assert list(store.root.glob(".rm-*")) == [] and not a.path.exists()


def test_leftovers_are_swept(store):
    run = _save(store, 1)
    from core import store as S

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    killed = store.root / f".tmp-{S._host()}-{dead}-abc12345"  # this host, writer gone
    live = store.root / f".tmp-{S._host()}-{os.getpid()}-abc12345"  # this host, writer alive
    old = store.root / ".tmp-otherhost-1234-abc12345"  # another host: by age only
    young = store.root / ".tmp-otherhost-1235-abc12345"
    legacy_old = store.root / ".tmp-q1w2e3r4"  # not the name save() gives: not provably ours, left alone
    trash = store.root / f".rm-{run.id}-abcdef"
    for d in (killed, live, old, young, legacy_old, trash):
        d.mkdir()
        (d / "x").write_text("x")
    hour_ago = time.time() - 2 * 3600
    for d in (old, legacy_old):
        os.utime(d, (hour_ago, hour_ago))
    store.list()
    left = {p.name for p in store.root.iterdir() if p.name.startswith(".")}
    assert left == {live.name, young.name, legacy_old.name, S.MARKER}


def test_save_names_tmp_with_host_and_pid(store, monkeypatch):
    from core import store as S

    seen = []
    real = S.tempfile.mkdtemp

    def spy(prefix, dir):
        seen.append(prefix)
        return real(prefix=prefix, dir=dir)

    monkeypatch.setattr(S.tempfile, "mkdtemp", spy)
    _save(store)
    assert seen == [f".tmp-{S._host()}-{os.getpid()}-"]


def test_symlinked_run_dir(store, tmp_path_factory, monkeypatch, capsys):
    good = _save(store, 1)
    outside = tmp_path_factory.mktemp("outside")
    real = _save(RunStore(outside), 2)
    link = store.root / real.id
    link.symlink_to(real.path, target_is_directory=True)
    assert [r["id"] for r in store.list()] == [good.id]
    [entry] = store.damaged()
    assert entry["id"] == real.id and "symlink" in entry["reason"]
    assert_bad(*run_cli(monkeypatch, capsys, "runs", "show", real.id)[::2], "symlink")
    store.remove(real.id)
    assert not link.is_symlink() and (real.path / "meta.json").is_file()  # the target is untouched


@pytest.mark.parametrize("name", ["meta.json", "result.json", "tensors.safetensors"])
def test_symlinked_file_in_run(store, tmp_path_factory, monkeypatch, capsys, name):
    run = _save(store, 1)
    secret = tmp_path_factory.mktemp("outside") / "secret"
    secret.write_bytes((run.path / name).read_bytes())
    (run.path / name).unlink()
    (run.path / name).symlink_to(secret)
    assert store.list() == []
    [entry] = store.damaged()
    assert name in entry["reason"] and "symlink" in entry["reason"]
    with pytest.raises(RunStoreError, match="symlink"):
        store.get(run.id)
    assert_bad(*run_cli(monkeypatch, capsys, "runs", "show", run.id, "--json")[::2], "symlink")
    if name != "meta.json":  # a Run object made before the link appeared refuses to follow it too
        run2 = _save(store, 2)
        (run2.path / name).unlink()
        (run2.path / name).symlink_to(secret)
        with pytest.raises(RunStoreError, match="symlink"):
            run2.result() if name == "result.json" else run2.tensors()
        store.remove(run2.id)
    store.remove(run.id)
    assert secret.exists()


def test_app_runs_page_names_damaged_runs(store):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root
    from app.testing import open_page, problems

    good, bad = _save(store, 1), _save(store, 2)
    _break(bad, "[1, 2]")
    at = open_page("runs")
    assert not problems(at)
    assert list(at.dataframe[0].value["id"]) == [good.id]
    assert any("damaged" in w.value for w in at.warning)
    assert any(bad.id in list(d.value.get("id", [])) for d in at.dataframe[1:])
