"""Run folders and files follow the user's umask: a store a group shares is readable by the group where the
umask allows (mkdtemp / mkstemp alone would make every run 0700 and its files 0600), private where it does not."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pandas as pd
import pytest
import torch

from core.store import RunDraft, RunStore, umask, write_atomic


@pytest.fixture
def with_umask():
    """Set the process umask for one test, then put the old one back."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def _modes(run_dir: Path) -> tuple[int, dict[str, int]]:
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in run_dir.iterdir()}
    return stat.S_IMODE(run_dir.stat().st_mode), files


def _save(root: Path):
    draft = RunDraft(kind="attribute", model="m", method="dpa", result={"value": 1.0},
                     tensors={"scores": torch.arange(4.0)}, tables={"t": pd.DataFrame({"a": [1]})},
                     files={"notes.txt": "x", "blob.bin": b"\x00\x01"})
    return RunStore(root).save(draft)


@pytest.mark.parametrize("mask, want_dir, want_file", [(0o022, 0o755, 0o644), (0o002, 0o775, 0o664),
                                                      (0o077, 0o700, 0o600)])
def test_saved_run_follows_umask(tmp_path, with_umask, mask, want_dir, want_file):
    with_umask(mask)
    assert umask() == mask  # read without setting it
    run = _save(tmp_path / "runs")
    dir_mode, files = _modes(run.path)
    assert dir_mode == want_dir
    # tensors (safetensors), tables, plain files, result.json and meta.json alike
    assert {"tensors.safetensors", "t.csv", "notes.txt", "blob.bin", "result.json", "meta.json"} <= set(files)
    assert set(files.values()) == {want_file}, files
    assert RunStore(tmp_path / "runs").get(run.id).result()["value"] == 1.0  # still a complete, readable run


def test_write_atomic_follows_umask(tmp_path, with_umask):
    from core.errors import RunStoreError

    for mask, want in ((0o022, 0o644), (0o077, 0o600)):
        with_umask(mask)
        path = tmp_path / f"record-{mask:o}.json"
        write_atomic(path, "{}", "a record", RunStoreError)
        assert stat.S_IMODE(path.stat().st_mode) == want and path.read_text() == "{}"
