"""Every command in README.md's code blocks, run as written, so the README cannot drift.

How the README marks what is not run in full (the convention; README's "Command line" section says it too):

- a line whose comment starts with ``slow`` (``workbench probe ...   # slow: ...``) is parsed only;
- a block preceded by ``<!-- readme-commands: parse only (WHY) -->`` is parsed only, every line of it;
- ``workbench app`` is started on a free port and must answer Streamlit's health check, then is stopped.

Parsed only means: the subcommand exists, its ``--help`` renders, and click parses the line's arguments
(every option exists and takes the value given); a ``python scripts/X.py`` line: the script exists and
names every option the line gives. Every other ``workbench`` line runs in this process (one import of
torch and TransformerLens for all of them, not one per command) on a fresh run store, in README order,
and must exit 0 with its result on stdout and no progress or log lines there.

Placeholders a run line may hold: ``RUN`` (the newest run in the store), ``JOB`` (the newest job),
``IMAGE.png`` (a 32x32 image of the synthetic set), ``photo.jpg`` (a real photograph, scikit-learn's
china.jpg, 640x427) and paths under ``/tmp/`` (moved under the test's temporary folder).
The README's ```python block (the notebook API) is compiled and its ``wb.*`` names checked to exist.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PARSE_ONLY_BLOCK = re.compile(r"<!--\s*readme-commands:\s*parse only\s*(\((?P<why>[^)]*)\))?\s*-->")
PLACEHOLDERS = ("RUN", "JOB", "IMAGE.png", "photo.jpg")
# Lines of progress or logging that must never reach stdout (where results and --json go).
PROGRESS_ON_STDOUT = re.compile(r"\d+%\|| it/s\]|^estimate: |^loading |^INFO |^WARNING ", re.M)


@dataclass(frozen=True)
class Command:
    line: int  # README line where the command starts
    text: str  # as written, continuations joined
    args: tuple[str, ...]  # shell words, the comment left out
    comment: str
    parse_only: str  # why it is only parsed ("" when it runs)

    @property
    def id(self) -> str:
        return f"L{self.line}:{' '.join(self.args[:3])}"


def _split_comment(text: str) -> tuple[str, str]:
    """(command, comment): the comment starts at the first '#' outside quotes that follows a blank."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i + 1:].strip()
    return text.rstrip(), ""


def readme_commands(text: str | None = None) -> list[Command]:
    """Every ``workbench``/``python`` command line of the README's ```bash blocks."""
    lines = (README.read_text() if text is None else text).splitlines()
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        lang = lines[i][3:].strip()
        before = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
        marker = PARSE_ONLY_BLOCK.search(before)
        block_why = (marker.group("why") or "marked parse only") if marker else ""
        i += 1
        start, joined = 0, ""
        while i < len(lines) and not lines[i].startswith("```"):
            line = lines[i]
            if lang == "bash":
                if not joined:
                    start = i + 1
                if line.rstrip().endswith("\\"):  # a continuation (inside quotes too, as bash reads it)
                    joined += line.rstrip()[:-1].rstrip() + " "
                else:
                    code, comment = _split_comment(joined + line.strip() if joined else line)
                    words = shlex.split(code) if code.strip() else []
                    if words and words[0] in ("workbench", "python"):
                        slow = comment.lower().startswith("slow")
                        why = block_why or (comment if slow else "")
                        commands.append(Command(start, code.strip(), tuple(words), comment, why))
                    joined = ""
            i += 1
        i += 1
    return commands


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


COMMANDS = readme_commands()
RUN = [c for c in COMMANDS if not c.parse_only and c.args[0] == "workbench" and c.args[1] != "app"]
PARSED = [c for c in COMMANDS if c.parse_only]
APP = [c for c in COMMANDS if c.args[:2] == ("workbench", "app") and not c.parse_only]


# ---- the convention itself (no command runs) ------------------------------------------------------


def test_the_convention_reads_slow_lines_blocks_and_continuations():
    text = "\n".join([
        "```bash",
        'workbench attribute m "a # b" --target " x"   # the comment',
        "workbench probe --model m \\",
        "  --dataset d.jsonl   # slow: a minute",
        "ray stop",
        "```",
        "<!-- readme-commands: parse only (Ray) -->",
        "```bash",
        "workbench jobs list",
        "```",
    ])
    a, b, c = readme_commands(text)
    assert a.args == ("workbench", "attribute", "m", "a # b", "--target", " x") and not a.parse_only
    assert b.args[-2:] == ("--dataset", "d.jsonl") and b.parse_only == "slow: a minute" and b.line == 3
    assert c.args == ("workbench", "jobs", "list") and c.parse_only == "Ray"


def test_the_readme_runs_most_of_its_commands():
    assert len(RUN) >= 20, [c.text for c in RUN]
    assert len(APP) == 1
    for c in RUN:  # a line that runs holds no placeholder but those the test fills in
        words = [w for w in c.args if re.fullmatch(r"[A-Z][A-Z_]*|\.\.\.|\[.*", w) and w not in PLACEHOLDERS]
        assert not words, f"README line {c.line} runs with placeholders {words}: mark it slow or fill them in"


# ---- parse only: the subcommand, its --help and its options ---------------------------------------


def _click_command(args: tuple[str, ...]):
    """(click command, its path, the arguments left) for ``workbench ...`` words."""
    import typer.main

    from workbench.cli import app

    cmd = typer.main.get_command(app)
    path = []
    rest = list(args[1:])
    while rest and hasattr(cmd, "commands") and rest[0] in cmd.commands:
        path.append(rest[0])
        cmd = cmd.commands[rest.pop(0)]
    return cmd, path, rest


@pytest.mark.parametrize("cmd", PARSED, ids=lambda c: c.id)
def test_parse_only_lines_parse(cmd: Command, monkeypatch, capsys):
    if cmd.args[0] == "python":
        script = ROOT / cmd.args[1]
        assert script.is_file(), f"README line {cmd.line}: no {cmd.args[1]}"
        source = script.read_text()
        for opt in (w.strip("[]").split("=")[0] for w in cmd.args[2:] if w.strip("[]").startswith("--")):
            assert f'"{opt}"' in source, f"README line {cmd.line}: {cmd.args[1]} has no option {opt}"
        return
    click_cmd, path, rest = _click_command(cmd.args)
    assert path, f"README line {cmd.line}: no command {cmd.args[1]!r}"
    assert not hasattr(click_cmd, "commands"), f"README line {cmd.line}: {' '.join(path)} needs a subcommand"
    code, out, err = run_cli(monkeypatch, capsys, *path, "--help")
    assert code == 0 and "Usage" in out, err
    click_cmd.make_context(" ".join(["workbench", *path]), list(rest))  # raises on an unknown option or value


def test_inline_commands_in_the_prose_exist():
    """`workbench ...` spans in the README's sentences: the command exists and takes the options named."""
    import typer.main

    from workbench.cli import app

    spans = set(re.findall(r"`(workbench [^`]*)`", README.read_text()))
    assert spans
    root = typer.main.get_command(app)
    for span in spans:
        words = [w.strip("[]") for w in shlex.split(span)]
        cmd, path, _rest = _click_command(tuple(words))
        assert path or words[1:2] == ["--version"], f"README: `{span}` names no command"
        known = {o for param in cmd.params + root.params for o in param.opts + param.secondary_opts}
        for opt in (w.split("=")[0] for w in words if w.startswith("--")):
            assert opt in known, f"README: `{span}`: {' '.join(path)} has no option {opt}"


# ---- the commands that run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def readme_env(tmp_path_factory):
    """One run store for the whole README, in order; the user's model caches are read, never rebuilt."""
    tmp = tmp_path_factory.mktemp("readme")
    from PIL import Image

    from attribution.vit import data

    batch = data.sample_images("synthetic", 1)
    pixels = (batch.images[0].permute(1, 2, 0).clamp(0, 1) * 255).round().byte().numpy()
    Image.fromarray(pixels).save(tmp / "IMAGE.png")
    import sklearn

    photo = Path(sklearn.__file__).parent / "datasets" / "images" / "china.jpg"
    return {"tmp": tmp, "runs": tmp / "runs", "IMAGE.png": str(tmp / "IMAGE.png"), "photo.jpg": str(photo)}


def _filled(args: tuple[str, ...], env: dict) -> list[str]:
    from core.store import RunStore
    from workbench.scheduler import JobBoard

    out = []
    for w in args[1:]:
        if w == "RUN":
            runs = RunStore().list()
            assert runs, "RUN: no run stored yet"
            w = runs[0]["id"]
        elif w == "JOB":
            jobs = JobBoard().list()
            assert jobs, "JOB: no job recorded yet"
            w = jobs[0].id
        elif w in ("IMAGE.png", "photo.jpg"):
            w = env[w]
        elif w.startswith("/tmp/"):
            w = str(env["tmp"] / w[len("/tmp/"):])
        out.append(w)
    return out


@pytest.mark.parametrize("cmd", RUN, ids=lambda c: c.id)
def test_readme_command_runs(cmd: Command, readme_env, monkeypatch, capsys, one_thread):
    monkeypatch.setenv("WORKBENCH_RUNS", str(readme_env["runs"]))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(monkeypatch, capsys, *_filled(cmd.args, readme_env))
    assert code == 0, f"README line {cmd.line}: `{cmd.text}` exited {code}: {err[-2000:]}"
    assert out.strip(), f"README line {cmd.line}: `{cmd.text}` printed no result on stdout (stderr: {err[-500:]})"
    assert not PROGRESS_ON_STDOUT.search(out), f"README line {cmd.line}: progress on stdout: {out[:1000]}"
    assert "Traceback" not in out + err
    # tables fit 80 columns (a line with a run of blanks is a table's); a sentence may run on, as prose does
    wide = [line for line in out.splitlines() if len(line) > 80 and "  " in line.strip()]
    assert not wide, f"README line {cmd.line}: a table wider than 80 columns: {wide[:3]}"


JSON_RUN = [c for c in RUN if "--out" not in c.args and c.args[1:3] != ("runs", "rm")]  # no second file or removal


@pytest.mark.parametrize("cmd", JSON_RUN, ids=lambda c: c.id)
def test_readme_command_json(cmd: Command, readme_env, monkeypatch, capsys, one_thread):
    """The same line with --json: one JSON document alone on stdout (after the lines above ran: RUN exists)."""
    import json

    monkeypatch.setenv("WORKBENCH_RUNS", str(readme_env["runs"]))
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(monkeypatch, capsys, *_filled(cmd.args, readme_env), "--json")
    assert code == 0, f"README line {cmd.line} with --json exited {code}: {err[-2000:]}"
    json.loads(out)  # nothing but the JSON


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("cmd", APP, ids=lambda c: c.id)
def test_readme_app_answers(cmd: Command, tmp_path):
    """`workbench app` as written (its port swapped for a free one) serves Streamlit's health check."""
    args = list(cmd.args[1:])
    port = _free_port()
    if "--port" in args:
        args[args.index("--port") + 1] = str(port)
    else:
        args += ["--port", str(port)]
    exe = Path(sys.executable).parent / "workbench"  # the installed entry point, else the same main()
    command = [str(exe)] if exe.exists() else [sys.executable, "-c", "from workbench.cli import main; main()"]
    env = dict(os.environ, WORKBENCH_RUNS=str(tmp_path))
    proc = subprocess.Popen([*command, *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        answer = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    answer = r.read().decode()
                    break
            except OSError:
                time.sleep(0.3)
        assert answer == "ok", f"README line {cmd.line}: the app did not answer (exit {proc.poll()})"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the notebook block ---------------------------------------------------------------------------


def test_readme_python_block_names_exist():
    import workbench as wb

    blocks = python_blocks()
    assert blocks
    for block in blocks:
        compile(block, "README.md", "exec")
        for name in set(re.findall(r"\bwb\.(\w+)", block)):
            assert hasattr(wb, name), f"README's python block calls wb.{name}, which does not exist"


# ---- vit-explain without --model: the model that fits the image -----------------------------------


def test_vit_explain_picks_the_model_that_fits_the_image(readme_env, capsys):
    from workbench.commands.vit import pick_vit

    assert pick_vit(readme_env["IMAGE.png"], None, None) == "vit-synth"
    assert capsys.readouterr().err == ""
    assert pick_vit(readme_env["photo.jpg"], None, None) == "dinov2-small"  # a real photograph, 640x427
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dinov2-small" in err and "640x427" in err and "32x32" in err
    assert pick_vit(readme_env["IMAGE.png"], None, "0,0,8,8") == "dinov2-small"  # a region is dinov2's
