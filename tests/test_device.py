"""``--device cuda`` on a machine without CUDA (issue 40's bad input): DeviceError in one line from the notebook
API before anything loads, and ``error: ...`` with exit 2 from every command that takes --device. CUDA is
reported absent by monkeypatching torch, so the test means the same on a machine that has it."""

from __future__ import annotations

import sys

import pytest
import torch

from core.errors import DeviceError, WorkbenchError


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_the_api_says_it_in_one_line(no_cuda):
    """The facade (its argument rules) and the model layer under it (zoo.load, which jobs and the app call)."""
    import workbench as wb
    from core.models.zoo import check_device, load

    for device in ("cuda", "cuda:0"):
        with pytest.raises(WorkbenchError, match="no CUDA device") as info:
            wb.load("smollm2-135m", device=device)
        assert "\n" not in str(info.value)
        with pytest.raises(DeviceError, match=r"^device cuda(:0)? requested but this machine has no CUDA"):
            load("smollm2-135m", device=device)
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        load("ioi-attn-1l2h", device="tpu")
    assert check_device("cpu") == "cpu"


def _device_commands() -> list[list[str]]:
    """The path of every CLI command with a --device option."""
    import typer.main

    from workbench.cli import app

    found: list[list[str]] = []

    def walk(command, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, path + [name])
        if any("--device" in getattr(p, "opts", ()) for p in command.params):
            found.append(path)

    walk(typer.main.get_command(app), [])
    return found


def test_every_command_with_device_exits_2(no_cuda, monkeypatch, capsys):
    from workbench.cli import main

    commands = _device_commands()
    assert len(commands) >= 10 and ["generate"] in commands and ["faithfulness"] in commands
    for path in commands:
        # --device first: click checks options in the order given, so it is read before missing arguments
        monkeypatch.setattr(sys, "argv", ["workbench", *path, "--device", "cuda"])
        with pytest.raises(SystemExit) as exit_info:
            main()
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2, path
        assert err.startswith("error: ") and "no CUDA device" in err and "\n" not in err, (path, err)
        assert "Traceback" not in err
