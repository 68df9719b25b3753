"""Issue 41, classes 2, 3, 9 and 13: the bounds table (core/options.py BOUNDS), the one output-path check
(check_output) and comma lists (split_list), unit-tested; plus a few CLI refusals that answer before anything
loads. The whole catalogue runs in scripts/bad_inputs.py, not here."""

from __future__ import annotations

import inspect
import os
from types import SimpleNamespace

import pytest

from core.errors import CostError, OutputError, WorkbenchError
from core.options import (
    BOUNDS,
    INT_CAP,
    bound_problem,
    check_bound,
    check_long,
    check_memory,
    check_output,
    cpu_cores,
    dash_name_hint,
    split_list,
)
from tests.cli_helpers import assert_bad, run_cli


def ctx(command: str, **params) -> SimpleNamespace:
    """A typer context for ``workbench COMMAND`` ('sae train'): its names up to the root, the options given."""
    c = SimpleNamespace(info_name="workbench", parent=None, params={}, command=SimpleNamespace(params=[]))
    for name in command.split():
        c = SimpleNamespace(info_name=name, parent=c, params={}, command=SimpleNamespace(params=[]))
    c.params = params
    c.command = SimpleNamespace(params=[SimpleNamespace(name="allow_long")])
    return c


def flag(name: str) -> SimpleNamespace:
    return SimpleNamespace(opts=[name])


def test_every_whole_number_has_a_cap_and_the_table_overrides_it():
    assert bound_problem(ctx("attribute"), flag("--top"), 10**30, integer=True)
    assert bound_problem(ctx("attribute"), flag("--top"), INT_CAP, integer=True) is None
    assert bound_problem(ctx("probe"), flag("--seed"), 10**9, integer=True) is None  # a 32-bit seed is fine
    assert "32-bit" in bound_problem(ctx("probe"), flag("--seed"), 2**32, integer=True)
    assert bound_problem(ctx("sae corpus"), flag("--chars"), 2_000_000, integer=True) is None  # its default
    assert bound_problem(ctx("attribute"), flag("--lr"), 1e30) is None  # floats: only where the table says


def test_threads_follow_the_machine():
    assert bound_problem(ctx("faithfulness"), flag("--threads"), cpu_cores(), integer=True) is None
    assert "CPU cores" in bound_problem(ctx("faithfulness"), flag("--threads"), cpu_cores() + 1, integer=True)


def test_command_entries_come_first():
    # --steps is an optimizer step count for train, a perturbation grid for vit-eval
    assert "1000" in bound_problem(ctx("vit-eval"), flag("--steps"), 5000, integer=True)
    assert "--allow-long" in bound_problem(ctx("train"), flag("--steps"), 5000_000, integer=True)


def test_hours_need_allow_long_with_an_estimate():
    why = bound_problem(ctx("train"), flag("--steps"), 1_000_000, integer=True)
    assert "h on this machine" in why and "--allow-long" in why
    assert bound_problem(ctx("train", allow_long=True), flag("--steps"), 1_000_000, integer=True) is None
    assert bound_problem(ctx("train", allow_long=True), flag("--steps"), 10**8, integer=True)  # the hard cap stays
    with pytest.raises(CostError, match="allow-long"):
        check_long("this", 7200, allow_long=False)
    check_long("this", 7200, allow_long=True)
    check_long("this", 60, allow_long=False)


def _commands():
    from workbench.cli import app

    def walk(t, path):
        for ci in t.registered_commands:
            yield " ".join(path + [ci.name or ci.callback.__name__.replace("_", "-")]), ci.callback
        for gi in t.registered_groups:
            yield from walk(gi.typer_instance, path + [gi.name])

    return dict(walk(app, []))


def test_the_table_names_real_options_and_every_soft_limit_has_its_flag():
    commands = _commands()
    flags = {c: {d for p in inspect.signature(fn).parameters.values() for d in getattr(p.default, "param_decls", ())
                 or ()} for c, fn in commands.items()}
    for key, bound in BOUNDS.items():
        command, _, name = key.rpartition(" ")
        where = [command] if command else list(commands)
        assert any(name in flags[c] for c in where if c in flags), f"BOUNDS[{key!r}] names no option"
        if bound.long is not None:  # a soft limit must be passable: the command takes --allow-long
            for c in where:
                if name in flags.get(c, ()):
                    assert "--allow-long" in flags[c], f"{c} has a soft limit on {name} but no --allow-long"


@pytest.mark.parametrize("path, kind, words", [
    ("/proc/x.md", "file", "/proc"),
    ("/sys/kernel/x", "dir", "/sys"),
    ("/dev/x", "file", "/dev"),
    ("/nonexistent/dir/x.md", "file", "does not exist"),
    ("", "file", "empty"),
    ("~nosuchuser/x", "dir", "home folder"),
    ("/tmp/" + "a" * 300, "file", "too long"),
])
def test_output_check_refuses(path, kind, words):
    with pytest.raises(OutputError, match="--out") as err:
        check_output("--out", path, kind=kind)
    assert words in str(err.value)


def test_output_check_kinds(tmp_path):
    afile = tmp_path / "f.txt"
    afile.write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        check_output("--out", afile / "x.md")
    with pytest.raises(OutputError, match="is a directory"):
        check_output("--out", tmp_path)
    with pytest.raises(OutputError, match="exists and is not a directory"):
        check_output("--out", afile, kind="dir")
    assert check_output("--out", tmp_path / "new.md") == tmp_path / "new.md"
    assert check_output("--out", tmp_path, kind="dir") == tmp_path
    assert check_output("--out", None) is None
    link = tmp_path / "proc-link"
    link.symlink_to("/proc")  # resolved: a link into /proc is /proc
    with pytest.raises(OutputError, match="/proc"):
        check_output("--out", link / "x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_output_check_refuses_a_folder_without_write_permission(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(OutputError, match="permission"):
        check_output("--out", ro / "x.md")


def test_lists():
    assert split_list("--tasks", None, ["ioi"]) == ["ioi"]
    assert split_list("--tasks", " ioi , add ") == ["ioi", "add"]
    for bad, words in (("", "empty"), (" ", "empty"), (",", "empty"), ("ioi,", "empty item"),
                       ("ioi,,add", "empty item"), ("ioi,ioi", "more than once")):
        with pytest.raises(WorkbenchError, match=words) as err:
            split_list("--tasks", bad, ["ioi"])
        assert "--tasks" in str(err.value)


def test_memory_and_dash_names():
    with pytest.raises(CostError, match="memory"):
        check_memory("a dictionary", 10**18)
    check_memory("a little", 1024)
    assert "--" in dash_name_hint(["vit-explain", "-dash.png"])
    assert dash_name_hint(["vit-explain", "-x"]) == ""
    assert dash_name_hint(["vit-explain", "--", "-dash.png"]) == ""


@pytest.mark.parametrize("args, words", [
    (["bench", "circuits", "--model", "ioi-attn-1l2h", "--tasks", "", "--n-train", "1"], "--tasks"),
    (["bench", "circuits", "--model", "ioi-attn-1l2h", "--methods", "random,random"], "more than once"),
    (["bench", "circuits", "--model", "ioi-attn-1l2h", "--tasks", "ioi", "--out", "/proc/x.md"], "/proc"),
    (["bench", "circuits", "--model", "vit-synth", "--tasks", "ioi"], "vision model"),
    (["generate", "ioi-attn-1l2h", "N1", "--max-new-tokens", "1000000000"], "--max-new-tokens"),
    (["recover-heads", "--d", "1000", "--heads", "2"], "--allow-long"),
    (["train", "ioi", "--out", "/nonexistent/x"], "does not exist"),
    (["faithfulness", "--model", "m", "--prompts", "p.jsonl", "--threads", "100000"], "--threads"),
])
def test_cli_refuses_before_any_work(monkeypatch, capsys, args, words):
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert_bad(code, err, words)


def test_check_bound_for_the_app_and_the_notebook():
    assert check_bound("sae train", "--width", 4096) == 4096
    with pytest.raises(CostError, match="--width"):
        check_bound("sae train", "--width", 10**9)
    with pytest.raises(CostError, match="allow-long"):
        check_bound("train", "--steps", 10**6)
    assert check_bound("train", "--steps", 10**6, allow_long=True) == 10**6
