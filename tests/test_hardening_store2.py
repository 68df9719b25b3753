"""Hardening of the run store and the job board, third round (issue 41, classes 1, 8, 12, 13): the store removes
only what it provably wrote, never in a folder that is not a store; WORKBENCH_RUNS empty, relative or a file is
one line; a full disk is one line and leaves nothing partial; hostile store contents (JSON nested deeply, a
3 GB meta.json, a symlinked index) and job records (pid 1 without a start time) are contained; Ctrl-C in a job
command exits 130; wb.jobs() works every time."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from core import store as S
from core.errors import DiskFullError, RunStoreError
from core.store import RunDraft, RunStore
from tests.cli_helpers import assert_bad, run_cli
from workbench.scheduler import JobBoard

ROOT = Path(__file__).resolve().parents[1]
TOY_ATTRIBUTE = ("attribute", "ioi-attn-1l2h", "N1 and N2 then N2", "--target", "N1")
DAY = 24 * 3600


def _save(store: RunStore, i: int = 0):
    import torch

    return store.save(RunDraft(kind="attribute", model="m", method="dpa", args={"i": i}, result={"v": i},
                               tensors={"s": torch.arange(3.0)}))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _plant_foreign(folder: Path) -> dict[str, float]:
    """A user's own entries that look like leftovers (and two that are named like ours but are not in a store):
    {name: mtime}, made two days old."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [".rm-my-notes", ".tmp-old-build", ".tmp-q1w2e3r4", ".rm-20250101-120000-x-abcdef",
             f".tmp-{S._host()}-{_dead_pid()}-abcdefgh"]
    old = time.time() - 2 * DAY
    for name in names:
        (folder / name).mkdir()
        (folder / name / "notes.txt").write_text("mine")
        os.utime(folder / name, (old, old))
    (folder / ".tmp-file").write_text("mine")
    os.utime(folder / ".tmp-file", (old, old))
    return {p.name: p.stat().st_mtime for p in folder.iterdir()}


def _no_model_load(monkeypatch) -> None:
    """Loading a model from here on is a test failure (what a timing bound used to say, without the clock)."""
    import core.models.zoo as zoo
    import workbench

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the setting was checked")

    monkeypatch.setattr(zoo, "load", boom)
    monkeypatch.setattr(workbench, "load", boom)


def _same(folder: Path, planted: dict[str, float]) -> None:
    for name in planted:
        assert (folder / name).exists(), f"{name} was deleted"
    for name in planted:
        if (folder / name).is_dir():
            assert (folder / name / "notes.txt").read_text() == "mine"


# -- class 1: WORKBENCH_RUNS and what the store may delete ------------------------------------------------------
@pytest.mark.parametrize("value, words", [("", ("WORKBENCH_RUNS", "empty")), ("   ", ("WORKBENCH_RUNS", "empty")),
                                          ("runs", ("WORKBENCH_RUNS", "relative")),
                                          ("./", ("WORKBENCH_RUNS", "relative"))])
def test_empty_or_relative_setting_is_refused_and_the_cwd_untouched(tmp_path, monkeypatch, capsys, value, words):
    cwd = tmp_path / "home"
    planted = _plant_foreign(cwd)
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("WORKBENCH_RUNS", value)
    with pytest.raises(RunStoreError, match="WORKBENCH_RUNS"):
        RunStore()
    with pytest.raises(RunStoreError, match="WORKBENCH_RUNS"):
        JobBoard()
    _no_model_load(monkeypatch)  # said before any work: checked by what runs, not by the clock
    for args in (("runs", "list"), ("runs", "list", "--json"), ("jobs", "list"), ("runs", "show", "x"),
                 TOY_ATTRIBUTE + ("--json",), ("models",)):
        code, out, err = run_cli(monkeypatch, capsys, *args)
        assert_bad(code, err, *words)
        assert out == ""
    _same(cwd, planted)
    assert not (cwd / S.MARKER).exists() and not (cwd / "index.sqlite").exists()


def test_tilde_is_expanded_and_a_relative_jobs_setting_refused(monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_RUNS", "~/some-runs")
    assert S.default_root() == Path.home() / "some-runs"
    monkeypatch.setenv("WORKBENCH_RUNS", "/tmp/x")
    monkeypatch.setenv("WORKBENCH_JOBS", "jobs")
    assert_bad(*run_cli(monkeypatch, capsys, "jobs", "list")[::2], "WORKBENCH_JOBS", "relative")
    monkeypatch.setenv("WORKBENCH_JOBS", "")  # set but empty: the default, inside the store (documented)
    assert JobBoard().root == Path("/tmp/x/.jobs")


def test_a_file_is_not_a_store(tmp_path, monkeypatch, capsys):
    file = tmp_path / "runs.txt"
    file.write_text("my notes")
    monkeypatch.setenv("WORKBENCH_RUNS", str(file))
    with pytest.raises(RunStoreError, match="not a directory"):
        RunStore().list()
    assert_bad(*run_cli(monkeypatch, capsys, "runs", "list")[::2], str(file), "not a directory")
    _no_model_load(monkeypatch)  # refused before the model is loaded
    assert_bad(*run_cli(monkeypatch, capsys, *TOY_ATTRIBUTE, "--json")[::2], "not a directory")
    assert file.read_text() == "my notes"


def test_foreign_entries_survive_listing_and_saving(tmp_path, monkeypatch, capsys):
    """A folder of the user's named by WORKBENCH_RUNS: listing it sweeps nothing (it is no store: no marker).
    Once a run is saved there it is a store, and from then on only the exact names the store gives its own
    leftovers are swept: a dead writer's .tmp-HOST-PID-xxxxxxxx and a .rm-RUN-xxxxxx; never the user's."""
    folder = tmp_path / "mine"
    planted = _plant_foreign(folder)
    monkeypatch.setenv("WORKBENCH_RUNS", str(folder))
    store = RunStore()
    assert store.list() == [] and store.damaged() == []
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--json")
    assert code == 0 and json.loads(out) == [], err
    _same(folder, planted)
    assert not (folder / S.MARKER).exists()
    run = _save(store, 1)  # the folder becomes a store
    assert S.is_marked(folder)
    ours_tmp = folder / f".tmp-{S._host()}-{_dead_pid()}-zyxw9876"
    ours_trash = folder / f".rm-{run.id}-0a1b2c"
    for d in (ours_tmp, ours_trash):
        d.mkdir()
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [run.id], err
    assert not ours_tmp.exists() and not ours_trash.exists()
    # planted names that only look like ours: kept. (The dead writer's .tmp- planted before the folder was a
    # store is named exactly as ours are, so it goes too: in a store, that name is the store's.)
    planted.pop(next(n for n in planted if n.startswith(f".tmp-{S._host()}-")))
    planted.pop(".rm-20250101-120000-x-abcdef")
    _same(folder, planted)


def test_a_store_from_before_markers_is_adopted_by_its_index(tmp_path):
    root = tmp_path / "old"
    run = _save(RunStore(root), 1)
    (root / S.MARKER).unlink()  # as a store written before markers existed
    dead = root / f".tmp-{S._host()}-{_dead_pid()}-abcdefgh"
    dead.mkdir()
    assert [r["id"] for r in RunStore(root).list()] == [run.id]
    assert S.is_marked(root) and not dead.exists()


def test_a_symlinked_marker_does_not_make_a_store(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    (tmp_path / "elsewhere").write_text("{}")
    (root / S.MARKER).symlink_to(tmp_path / "elsewhere")
    dead = root / f".tmp-{S._host()}-{_dead_pid()}-abcdefgh"
    dead.mkdir()
    RunStore(root).list()
    assert dead.exists()


# -- class 12: a full disk -------------------------------------------------------------------------------------
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _only_marker(root: Path) -> None:
    left = sorted(p.name for p in root.iterdir()) if root.exists() else []
    assert left in ([], [S.MARKER], [S.MARKER, ".jobs"]), left


@pytest.fixture
def _real_save_file_after(monkeypatch):
    """A module first imported while save_file is patched binds the fake (``from safetensors.torch import
    save_file``: transformers' modeling_utils, for one): put the real one back in every module afterwards, or
    later tests that save weights fail with 'No space left on device' depending on test order."""
    import safetensors.torch

    real = safetensors.torch.save_file
    yield
    monkeypatch.undo()  # the test's own patches first
    for module in list(sys.modules.values()):
        names = vars(module) if isinstance(module, types.ModuleType) else {}
        for name, value in list(names.items()):
            if type(value) is types.FunctionType and value.__qualname__ in ("_no_space", FULL_QUALNAME) \
                    and module is not sys.modules[__name__] and "save" in name:
                setattr(module, name, real)


FULL_QUALNAME = "test_full_disk_during_attribute_is_one_line_and_saves_nothing.<locals>.full"


@pytest.mark.parametrize("where", ["tensors", "meta", "rename", "safetensors-message"])
def test_full_disk_during_attribute_is_one_line_and_saves_nothing(monkeypatch, capsys, where, _real_save_file_after):
    import safetensors.torch

    root = Path(os.environ["WORKBENCH_RUNS"])
    if where == "tensors":
        monkeypatch.setattr(safetensors.torch, "save_file", _no_space)
    elif where == "safetensors-message":  # what safetensors itself raises on a full disk
        from safetensors import SafetensorError

        def full(*a, **k):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

        monkeypatch.setattr(safetensors.torch, "save_file", full)
    elif where == "meta":
        real = Path.write_text

        def write_text(self, *a, **k):
            if self.name == "meta.json":
                _no_space()
            return real(self, *a, **k)

        monkeypatch.setattr(Path, "write_text", write_text)
    else:
        monkeypatch.setattr(S.os, "rename", _no_space)
    code, out, err = run_cli(monkeypatch, capsys, *TOY_ATTRIBUTE, "--json")
    assert_bad(code, err, "no space left on device at", str(root))
    assert out == ""
    _only_marker(root)
    with pytest.raises(DiskFullError):
        _save(RunStore(), 1)


def test_full_disk_on_a_job_record_leaves_no_temporary(tmp_path, monkeypatch):
    board = JobBoard(tmp_path / ".jobs")
    job = board.create({"kind": "sleep"}, "sleep")
    monkeypatch.setattr(S.os, "replace", _no_space)
    with pytest.raises(DiskFullError, match="no space left on device at"):
        board.write(job)
    monkeypatch.undo()
    assert sorted(p.name for p in board.root.iterdir()) == sorted([S.MARKER, f"{job.id}.json"])


def test_the_board_sweeps_only_its_own_abandoned_temporaries(tmp_path, monkeypatch):
    board = JobBoard(tmp_path / ".jobs")
    job = board.create({"kind": "sleep"}, "sleep")
    old = time.time() - 2 * DAY
    ours = [f".tmp-{S._host()}-{_dead_pid()}-abcdefgh.tmp", f".{job.id}-abcdefgh.tmp", ".costs-abcdefgh.tmp"]
    live = f".tmp-{S._host()}-{os.getpid()}-abcdefgh.tmp"
    foreign = [".notes.tmp", ".tmp-old-build", "draft.tmp"]
    for name in ours + foreign + [live]:
        (board.root / name).write_text("x")
        if name != live:  # (a live pid's temporary a day old is a reused pid's: swept too)
            os.utime(board.root / name, (old, old))
    assert [j.id for j in board.list()] == [job.id]
    left = {p.name for p in board.root.iterdir()}
    assert left == {S.MARKER, f"{job.id}.json", live, *foreign}
    # a folder that is no board (no marker, no records): nothing swept
    other = JobBoard(tmp_path / "other")
    other.root.mkdir()
    (other.root / ours[0]).write_text("x")
    assert other.list() == [] and (other.root / ours[0]).exists()


def test_full_disk_on_a_tiny_filesystem(tmp_path, monkeypatch, capsys):
    """The real thing where this machine lets us mount a 16 kB tmpfs (root): attribute, train and sae train end
    in one line naming the folder and leave nothing there. Skipped where mounting is not allowed."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        monkeypatch.setenv("WORKBENCH_RUNS", str(disk / "runs"))
        code, out, err = run_cli(monkeypatch, capsys, *TOY_ATTRIBUTE, "--json")
        assert_bad(code, err, "no space left on device at", str(disk / "runs"))
        _only_marker(disk / "runs")
        code, out, err = run_cli(monkeypatch, capsys, "train", "ioi", "--out", str(disk / "ck"), "--steps", "5",
                                 "--threads", "1", "--json")
        assert_bad(code, err, "no space left on device at", str(disk / "ck"))
        assert not (disk / "ck").exists()
        code, out, err = run_cli(monkeypatch, capsys, "sae", "train", "--model", "ioi-attn-1l2h", "--hook",
                                 "blocks.0.hook_resid_post", "--tokens", "512", "--epochs", "1", "--json")
        assert_bad(code, err, "no space left on device at")
        assert not (disk / "runs" / "saes").exists()
        _only_marker(disk / "runs")
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=10)


# -- class 12: hostile store contents ---------------------------------------------------------------------
def _nested(depth: int) -> str:
    return '{"kind": "attribute", "x": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [150, 100_000])
def test_deeply_nested_meta_is_one_damaged_run(monkeypatch, capsys, depth):
    store = RunStore()
    good, bad = _save(store, 1), _save(store, 2)
    (bad.path / "meta.json").write_text(_nested(depth))
    assert [r["id"] for r in store.list()] == [good.id]
    [entry] = store.damaged()
    assert entry["id"] == bad.id and "nested" in entry["reason"]
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [good.id], err
    assert_bad(*run_cli(monkeypatch, capsys, "runs", "show", bad.id)[::2], bad.id, "nested")
    code, out, err = run_cli(monkeypatch, capsys, "runs", "show", good.id, "--json")
    assert code == 0, err


def test_a_summary_that_is_not_flat_is_damage():
    store = RunStore()
    run = _save(store, 1)
    meta = json.loads((run.path / "meta.json").read_text())
    (run.path / "meta.json").write_text(json.dumps({**meta, "summary": {"a": {"b": 1}}}))
    assert store.list() == [] and "flat" in store.damaged()[0]["reason"]


def test_a_huge_sparse_meta_is_refused_at_once(monkeypatch, capsys):
    store = RunStore()
    good, bad = _save(store, 1), _save(store, 2)
    with open(bad.path / "meta.json", "r+b") as fh:
        fh.truncate(3 * 2**30)  # sparse: 3 GB that take no space
    # refused by its size, never read: checked by what is read, not by the clock (a busy machine is slow)
    real_text, real_bytes = Path.read_text, Path.read_bytes

    def no_read(real):
        def read(self, *a, **k):
            assert self != bad.path / "meta.json", "meta.json must be refused by its size, not read"
            return real(self, *a, **k)
        return read

    monkeypatch.setattr(Path, "read_text", no_read(real_text))
    monkeypatch.setattr(Path, "read_bytes", no_read(real_bytes))
    started = time.monotonic()
    assert [r["id"] for r in store.list()] == [good.id]
    [entry] = store.damaged()
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--json")
    assert time.monotonic() - started < 120  # no hang (reading 3 GB would take seconds, not this long)
    assert code == 0 and [r["id"] for r in json.loads(out)] == [good.id]
    assert "bytes" in entry["reason"]
    assert_bad(*run_cli(monkeypatch, capsys, "runs", "show", bad.id)[::2], "bytes")


@pytest.mark.parametrize("name", ["index.sqlite", "index.sqlite-wal"])
def test_a_symlinked_index_is_never_written_through(tmp_path_factory, monkeypatch, capsys, name):
    store = RunStore()
    first = _save(store, 1)
    victim = tmp_path_factory.mktemp("outside") / "victim.db"
    victim.write_bytes(b"precious bytes")
    for extra in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (store.root / extra).unlink(missing_ok=True)
    (store.root / name).symlink_to(victim)
    second = _save(store, 2)  # saved; the index is skipped, not written through
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list", "--json")
    assert code == 0 and {r["id"] for r in json.loads(out)} == {first.id, second.id}, err
    assert "damaged" in err
    assert any(d["id"] == name and "symlink" in d["reason"] for d in store.damaged())
    store.remove(first.id)
    assert victim.read_bytes() == b"precious bytes"
    assert (store.root / name).is_symlink()  # not ours to delete: the user is told instead


def test_runs_show_of_a_table_bigger_than_the_bound(monkeypatch):
    import pandas as pd

    store = RunStore()
    run = store.save(RunDraft(kind="attribute", tables={"t": pd.DataFrame({"a": [1]})}))
    monkeypatch.setattr(S, "MAX_TABLE_BYTES", 3)
    with pytest.raises(RunStoreError, match="bytes"):
        store.get(run.id).table("t")


# -- job board: hostile records, pid 1 ---------------------------------------------------------------------
def _record(board: JobBoard, job_id: str, **change) -> Path:
    rec = {"id": job_id, "kind": "sleep", "label": "sleep", "spec": {"kind": "sleep"}, "state": "running",
           "created": "2026-01-01T12:00:00.000+00:00", "driver": {"host": socket.gethostname(), "pid": 1}}
    rec.update(change)
    board.root.mkdir(parents=True, exist_ok=True)
    (board.root / f"{job_id}.json").write_text(json.dumps(rec))
    return board.root / f"{job_id}.json"


@pytest.mark.parametrize("driver, why", [
    ({"host": "HOST", "pid": 1}, "no start time"),  # pid 1 runs, but nothing proves it is the driver
    ({"host": "HOST", "pid": 1, "started": 12345.0}, "another process"),
    ({"host": "HOST"}, "no driver process"),
    ({}, "no driver process"),
])
def test_a_record_is_running_only_while_its_driver_provably_is(monkeypatch, capsys, driver, why):
    board = JobBoard()
    driver = {k: (socket.gethostname() if v == "HOST" else v) for k, v in driver.items()}
    _record(board, "20260101-120000-sleep-aaaaaa", driver=driver)
    job = board.get("20260101-120000-sleep-aaaaaa")
    assert job.state == "failed" and why in job.error and "nothing was saved" in job.error
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "list", "--json")
    assert code == 0 and json.loads(out)[0]["state"] == "failed"
    assert json.loads((board.root / "20260101-120000-sleep-aaaaaa.json").read_text())["state"] == "failed"


def test_a_live_driver_with_its_start_time_reads_running():
    from workbench.scheduler.board import process_started

    board = JobBoard()
    me = {"host": socket.gethostname(), "pid": os.getpid(), "started": process_started(os.getpid())}
    _record(board, "20260101-120000-sleep-bbbbbb", driver=me)
    assert board.get("20260101-120000-sleep-bbbbbb").state == "running"
    _record(board, "20260101-120000-sleep-cccccc", driver={"host": "another-host", "pid": 1})
    assert board.get("20260101-120000-sleep-cccccc").state == "running"  # cannot be checked from here


def test_process_start_without_psutil_matches_psutil(monkeypatch):
    from workbench.scheduler import board as B

    with_psutil = B.process_started(os.getpid())
    assert abs(B._proc_started(os.getpid()) - with_psutil) < 0.5


def test_nested_job_record_and_costs_file_are_contained(monkeypatch, capsys):
    board = JobBoard()
    ok = board.create({"kind": "sleep"}, "sleep")
    bad = board.root / "20260101-120000-sleep-dddddd.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    (board.root / "costs.json").write_text(_nested(100_000))
    jobs, damaged = board.scan()
    assert [j.id for j in jobs] == [ok.id] and "nested" in damaged[0]["reason"]
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "list", "--json")
    assert code == 0 and [j["id"] for j in json.loads(out)] == [ok.id], err
    assert_bad(*run_cli(monkeypatch, capsys, "jobs", "show", bad.stem)[::2], "nested")
    from workbench.scheduler import costs
    from workbench.scheduler.kinds import get_kind

    assert costs.per_item(board.root, get_kind("sleep"), {"kind": "sleep", "seconds": 1, "steps": 2}) is None


def test_a_symlinked_jobs_folder_is_not_written_through(tmp_path):
    root = Path(os.environ["WORKBENCH_RUNS"])
    root.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / ".jobs").symlink_to(outside, target_is_directory=True)
    from workbench.scheduler import JobError

    with pytest.raises(JobError, match="symlink"):
        JobBoard().create({"kind": "sleep"}, "sleep")
    assert list(outside.iterdir()) == []


# -- class 13: sessions, signals, Ray settings ----------------------------------------------------------------
def test_wb_jobs_works_every_time():
    code = ("import workbench as wb, workbench.scheduler, inspect\n"
            "a = wb.jobs(); b = wb.jobs(); c = wb.jobs()\n"
            "assert type(a).__name__ == type(c).__name__ == 'JobBoard'\n"
            "assert callable(workbench.scheduler.submit) and str(inspect.signature(wb.jobs)).startswith('(root')\n"
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    import workbench as wb

    assert type(wb.jobs()).__name__ == type(wb.jobs()).__name__ == "JobBoard"


def test_ray_address_in_the_environment_with_workers_is_one_line(monkeypatch, capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "N1 and N2 then N2", "target": "N1", "foil": "N2"}) + "\n")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    started = time.monotonic()
    code, out, err = run_cli(monkeypatch, capsys, "faithfulness", "--model", "ioi-attn-1l2h", "--prompts",
                             str(prompts), "--methods", "random", "--workers", "2", "--json")
    assert_bad(code, err, "RAY_ADDRESS=127.0.0.1:1")
    assert out == "" and time.monotonic() - started < 20
    assert RunStore().list() == []


def _interruptible() -> None:
    """In the child: SIGINT back to its default, so that Python installs its KeyboardInterrupt handler. A suite
    started in the background by a non-interactive shell (CI, nohup) ignores SIGINT, every child inherits that,
    and the command then never sees the signal (the test timed out, or the job ended first: exit 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_job_exits_130_with_a_line(tmp_path):
    """SIGINT to `workbench faithfulness` once its job is running: exit 130, one line on stderr, the job
    recorded cancelled, no run saved, no output on stdout."""
    import random

    rng = random.Random(0)
    rows = []
    for _ in range(4000):  # enough work that it cannot end before the signal, even on a fast machine
        a, b = rng.sample(range(20), 2)
        rows.append({"prompt": f"N{a} and N{b} then N{b}", "target": f"N{a}", "foil": f"N{b}"})
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = tmp_path / "runs"
    env = dict(os.environ, WORKBENCH_RUNS=str(runs), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "faithfulness", "--model", "ioi-attn-1l2h",
                             "--prompts", str(prompts), "--methods", "ig,random", "--param", "ig.steps=512",
                             "--threads", "1", "--json"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible)
    try:
        # a hang guard, not an expectation: on a busy machine the command's imports and model load alone can take
        # a minute before its job is under way
        deadline = time.monotonic() + 300
        board = JobBoard(runs / ".jobs")
        def mid_work() -> bool:  # running, with progress made and more to come: the signal lands in the work
            return any(j.state == "running" and 0 < (j.done or 0) < (j.total or 0) for j in board.list())

        while time.monotonic() < deadline and not mid_work():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert mid_work(), f"the job never got under way: {[(j.state, j.done, j.total) for j in board.list()]}"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    # 130, or (seen once in three full-suite runs) death by the SIGINT itself after 'aborted' (probably CPython
    # 3.11 marking an interrupt that lands inside exec'd string code as unhandled even when caught later); a shell
    # reports both as 130
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert err.strip() == "aborted" and out == ""
    [job] = board.list()
    assert job.state == "cancelled" and "Ctrl-C" in job.error and job.run_id is None
    assert RunStore(runs).list() == []
