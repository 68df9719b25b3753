"""Every command line in README.md's ```bash blocks runs as written, so the README cannot drift; the README's
```python block runs too.

Where each line runs (the convention; README's "Command line" section says it too):

- a ``workbench`` line runs here, in CI, in this process (one import of torch and TransformerLens for all of them),
  on a fresh run store, in README order; it must exit 0 with its result on stdout and no progress or log lines
  there, and again with ``--json`` print one JSON document alone;
- ``workbench app`` and ``./dev app`` are started on a free port and must answer Streamlit's health check (``./dev
  app`` in the slow suite: its set-up may install); ``./dev test`` is the run this test is part of (CI's
  ``.ci/run``): it counts as run when ./dev started the suite;
- the ```python block runs in the slow suite (smollm2, a prompt set and a circuit: minutes);
- a line whose comment starts with ``slow`` (``workbench probe ...   # slow: ...``), and every line of a block
  preceded by ``<!-- readme-commands: slow (WHY) -->``, runs in the slow suite (``./dev test --slow``), in its own
  process, in README order, from a copy of the checkout (what it writes into results/ or data/ lands in the copy);
- the block with ``ray start`` runs whole in the slow suite: a two-node cluster on 127.0.0.1 in a PID namespace of
  its own (so its ``ray stop`` stops that cluster only), with M, FILE, PROMPT, T a tiny random Llama and its rows.

A line that is none of these fails ``test_every_line_runs_in_ci_or_the_slow_suite``: no line is only parsed.
Placeholders a line may hold: ``RUN`` (the newest run in the store), ``JOB`` (the newest job), ``IMAGE.png``
(a 32x32 image of the synthetic set), ``photo.jpg`` (a real photograph, scikit-learn's china.jpg, 640x427) and
paths under ``/tmp/`` (moved under the test's temporary folder); in the cluster block also HEAD_IP, NODE_IP, the
ports (6379, P1..P6, ``...``: a node's own ports), M, FILE, PROMPT and T.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SLOW_BLOCK = re.compile(r"<!--\s*readme-commands:\s*slow\s*(\((?P<why>[^)]*)\))?\s*-->")
RUNNERS = ("workbench", "python", "./dev", "ray")  # what a README line may start with
PLACEHOLDERS = ("RUN", "JOB", "IMAGE.png", "photo.jpg")
# Lines of progress or logging that must never reach stdout (where results and --json go).
PROGRESS_ON_STDOUT = re.compile(r"\d+%\|| it/s\]|^estimate: |^loading |^INFO |^WARNING ", re.M)


@dataclass(frozen=True)
class Command:
    line: int  # README line where the command starts
    text: str  # as written, continuations joined
    args: tuple[str, ...]  # shell words, the comment left out
    comment: str
    slow: str  # why it runs in the slow suite ("" when it runs in CI)
    block: int  # README line of its block's opening fence

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
    """Every command line of the README's ```bash blocks (a line that is only a comment is none)."""
    lines = (README.read_text() if text is None else text).splitlines()
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        lang, fence = lines[i][3:].strip(), i + 1
        before = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
        marker = SLOW_BLOCK.search(before)
        block_why = (marker.group("why") or "marked slow") if marker else ""
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
                    if words:
                        slow = comment.lower().startswith("slow")
                        why = block_why or (comment if slow else "")
                        commands.append(Command(start, code.strip(), tuple(words), comment, why, fence))
                    joined = ""
            i += 1
        i += 1
    return commands


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


COMMANDS = readme_commands()
CLUSTER_BLOCKS = {c.block for c in COMMANDS if c.args[:2] == ("ray", "start")}
CLUSTER = [c for c in COMMANDS if c.block in CLUSTER_BLOCKS]
APP = [c for c in COMMANDS if c.args[:2] in (("workbench", "app"), ("./dev", "app")) and c.block not in CLUSTER_BLOCKS]
DEV_TEST = [c for c in COMMANDS if c.args[:2] == ("./dev", "test")]
RUN = [c for c in COMMANDS if not c.slow and c.args[0] == "workbench" and c not in APP + CLUSTER]
SLOW = [c for c in COMMANDS if c.slow and c.args[0] in ("workbench", "python") and c not in APP + CLUSTER]


# ---- the convention itself (no command runs) ------------------------------------------------------


def test_the_convention_reads_slow_lines_blocks_and_continuations():
    text = "\n".join([
        "```bash",
        'workbench attribute m "a # b" --target " x"   # the comment',
        "workbench probe --model m \\",
        "  --dataset d.jsonl   # slow: a minute",
        "  # a comment line is no command",
        "ray stop",
        "```",
        "<!-- readme-commands: slow (Ray) -->",
        "```bash",
        "workbench jobs list",
        "```",
    ])
    a, b, c, d = readme_commands(text)
    assert a.args == ("workbench", "attribute", "m", "a # b", "--target", " x") and not a.slow
    assert b.args[-2:] == ("--dataset", "d.jsonl") and b.slow == "slow: a minute" and b.line == 3
    assert c.args == ("ray", "stop") and not c.slow
    assert d.args == ("workbench", "jobs", "list") and d.slow == "Ray"


def test_every_line_runs_in_ci_or_the_slow_suite():
    """Each command line has exactly one place where it runs; none is only parsed, none is left out."""
    places = [RUN, SLOW, APP, DEV_TEST, CLUSTER]
    for c in COMMANDS:
        where = [i for i, place in enumerate(places) if c in place]
        assert len(where) == 1, f"README line {c.line}: `{c.text}` runs in {len(where)} places (none: start it " \
                                f"with one of {RUNNERS}, or put it in a block with `ray start`)"
    assert "readme-commands: parse only" not in README.read_text(), "a block is parse only: mark it slow"
    dev_app = sum(c.args[0] == "./dev" for c in APP)
    ci = len(RUN) + len(APP) - dev_app + len(DEV_TEST)
    print(f"README: {len(COMMANDS)} of {len(COMMANDS)} command lines run: {ci} in CI, "
          f"{len(SLOW) + len(CLUSTER) + dev_app} in the slow suite")
    for c in RUN + APP + SLOW:  # a line holds no placeholder but those the tests fill in
        words = [w for w in c.args if re.fullmatch(r"[A-Z][A-Z_]*|\.\.\.|\[.*", w) and w not in PLACEHOLDERS]
        assert not words, f"README line {c.line} runs with placeholders {words}: write a value the test can run"


# ---- ./dev test: this run -------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", DEV_TEST, ids=lambda c: c.id)
def test_dev_test_line_is_this_run(cmd: Command):
    """`./dev test` is what CI runs (.ci/run): under it this very test runs (./dev sets WORKBENCH_DEV_TEST)."""
    assert cmd.args == ("./dev", "test") and (ROOT / "dev").stat().st_mode & 0o111
    assert "exec ./dev test" in (ROOT / ".ci" / "run").read_text()
    if os.environ.get("WORKBENCH_DEV_TEST") != "1":
        pytest.skip("run by ./dev test (CI's .ci/run), not by a plain pytest")


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


@pytest.mark.parametrize("cmd", [pytest.param(c, marks=pytest.mark.slow_suite) if c.args[0] == "./dev" else c
                                 for c in APP], ids=lambda c: c.id)
def test_readme_app_answers(cmd: Command, tmp_path):
    """`workbench app` and `./dev app` as written (the port swapped for a free one) serve Streamlit's health check
    (./dev first checks its set-up, which CI's ./dev test has just done: seconds; see the wait below)."""
    args = list(cmd.args[1:])
    port = _free_port()
    if "--port" in args:
        args[args.index("--port") + 1] = str(port)
    else:
        args += ["--port", str(port)]
    exe = Path(sys.executable).parent / "workbench"  # the installed entry point, else the same main()
    command = [str(exe)] if exe.exists() else [sys.executable, "-c", "from workbench.cli import main; main()"]
    if cmd.args[0] == "./dev":
        command = [str(ROOT / "dev")]
    env = dict(os.environ, WORKBENCH_RUNS=str(tmp_path))
    proc = subprocess.Popen([*command, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # ./dev checks its set-up first: seconds after CI's ./dev test; the whole set-up (minutes: pip, the model
        # cache) in a checkout that has none yet, as a clone run with another venv's pytest
        wait = 60 if cmd.args[0] != "./dev" else 300 if (ROOT / ".venv" / ".workbench-deps").exists() else 2400
        deadline = time.monotonic() + wait
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


@pytest.mark.slow_suite
def test_readme_python_block_runs(tmp_path, monkeypatch, one_thread):
    """The README's ```python block, executed as written from the checkout's root (its runs in a temp store):
    smollm2, a 50-prompt set and a 32-prompt circuit (451 s at a load of 16-19 on 2 cores: the slow suite)."""
    blocks = python_blocks()
    assert blocks
    monkeypatch.chdir(ROOT)
    for block in blocks:
        scope: dict = {"__name__": "readme"}
        exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - the README's own code
        assert scope.get("m") is not None


# ---- vit-explain without --model: the model that fits the image -----------------------------------


def test_vit_explain_picks_the_model_that_fits_the_image(readme_env, capsys):
    from workbench.commands.vit import pick_vit

    assert pick_vit(readme_env["IMAGE.png"], None, None) == "vit-synth"
    assert capsys.readouterr().err == ""
    assert pick_vit(readme_env["photo.jpg"], None, None) == "dinov2-small"  # a real photograph, 640x427
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dinov2-small" in err and "640x427" in err and "32x32" in err
    assert pick_vit(readme_env["IMAGE.png"], None, "0,0,8,8") == "dinov2-small"  # a region is dinov2's


# ---- the slow suite: the long lines, in README order, in processes of their own --------------------------------


def _checkout_copy(dst: Path) -> Path:
    """A copy of the checkout's files (tracked and new, never ignored ones): a line that writes results/ or data/
    (a leaderboard, a rebuilt lens) writes the copy."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    for rel in (f for f in out.split("\0") if f and (ROOT / f).is_file()):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst / rel)
    return dst


@pytest.fixture(scope="module")
def slow_env(tmp_path_factory, readme_env):
    tmp = tmp_path_factory.mktemp("readme-slow")
    copy = _checkout_copy(tmp / "checkout")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(WORKBENCH_RUNS=str(tmp / "runs"), WORKBENCH_DATA=str(copy / "data"), PYTHONPATH=str(copy),
               COLUMNS="80")
    return {**readme_env, "tmp": tmp, "checkout": copy, "env": env}


def _run_as_group(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run` in a session of its own: on a timeout or Ctrl-C the whole group is killed (a line's Ray
    monitor or job workers too), not only the direct child that `subprocess.run` would kill."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kwargs) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)  # also what the command left behind when it finished
            except ProcessLookupError:
                pass
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


@pytest.mark.slow_suite
@pytest.mark.parametrize("cmd", SLOW, ids=lambda c: c.id)
def test_readme_slow_line_runs(cmd: Command, slow_env, monkeypatch):
    """A slow line as written (placeholders filled), `workbench` as the installed command or `python` this venv's,
    from the checkout's copy; it must exit 0 and print its result (a script its figures) on stdout."""
    monkeypatch.setenv("WORKBENCH_RUNS", slow_env["env"]["WORKBENCH_RUNS"])  # RUN / JOB: this suite's store
    args = _filled(cmd.args, slow_env)
    exe = Path(sys.executable).parent / "workbench"
    program = [str(exe)] if cmd.args[0] == "workbench" else [sys.executable]
    load, started = os.getloadavg()[0], time.monotonic()
    done = _run_as_group([*program, *args], cwd=slow_env["checkout"], env=slow_env["env"], timeout=4 * 3600)
    seconds = time.monotonic() - started
    # the figures for results/cli/slow_suite.md (./dev test --slow -s): a time means little without the load
    print(f"README line {cmd.line}: {seconds:.0f} s (load {load:.2f} -> {os.getloadavg()[0]:.2f}): {cmd.text}")
    assert done.returncode == 0, f"README line {cmd.line}: `{cmd.text}` exited {done.returncode}: " \
                                 f"{done.stderr[-2000:]}"
    assert done.stdout.strip() or cmd.args[0] == "python", f"README line {cmd.line}: no result on stdout"
    assert "Traceback" not in done.stdout + done.stderr


def _cluster_script(block: list[Command], fill: dict[str, str], node_ports: dict[str, list[str]]) -> str:
    """The block's lines, placeholders filled: HEAD_IP/NODE_IP 127.0.0.1, each node its own free ports."""
    lines = []
    for c in block:
        words = list(c.args)
        if tuple(words[:2]) == ("ray", "start") and "--head" not in words:
            words = [w for w in words if w != "..."] + node_ports["b"]
        words = [fill.get(w, w) for w in words]
        words = [re.sub(r"\b(HEAD_IP|NODE_IP)\b", "127.0.0.1", w).replace(":6379", ":" + fill["6379"]) for w in words]
        if words[0] == "workbench":
            words[0] = str(Path(sys.executable).parent / "workbench")
        elif words[0] == "ray":
            words[0] = str(Path(sys.executable).parent / "ray")
        lines.append(f"echo '>>> README line {c.line}' >&2; " + shlex.join(words))
    return "set -e\n" + "\n".join(lines) + "\n"


def test_a_slow_line_stopped_takes_what_it_started_with_it(tmp_path):
    """The runner the slow lines use: on a timeout, the line's own children (as Ray's monitor) go too."""
    from app.serving import process_running, wait_until
    pid_file = tmp_path / "pid"
    script = f"sleep 300 & echo $! > {pid_file}; wait"
    with pytest.raises(subprocess.TimeoutExpired):
        _run_as_group(["bash", "-c", script], timeout=2)
    grandchild = int(pid_file.read_text())
    # the kill is sent; the kernel ends it a moment later (a TimeoutError here: it outlived the stopped line)
    wait_until(lambda: not process_running(grandchild), 5, f"the line's child {grandchild} to end")
    assert _run_as_group(["bash", "-c", "echo out; echo err >&2; exit 3"], timeout=30).returncode == 3


@pytest.mark.slow_suite
@pytest.mark.skipif(not CLUSTER, reason="no cluster block")
def test_readme_cluster_block_runs(tiny_llama_dir, tmp_path):
    """The cluster block whole, as one script, in a PID namespace of its own (its `ray stop` stops this cluster
    and nothing else on the machine): two nodes on 127.0.0.1, the two jobs on them, then the nodes stopped."""
    import json

    import workbench as wb
    from tests.test_jobs import _rows

    if shutil.which("unshare") is None or subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                                                         capture_output=True).returncode != 0:
        pytest.fail("the cluster block needs `unshare --pid` (root or user namespaces) so `ray stop` stops it alone")
    rows = _rows(wb.load(str(tiny_llama_dir)), 4)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    head_port, *ports = [str(_free_port()) for _ in range(7)]
    fill = {"6379": head_port, "M": str(tiny_llama_dir), "FILE": str(tmp_path / "rows.jsonl"),
            "PROMPT": rows[0]["prompt"], "T": rows[0]["target"], **{f"P{i + 1}": p for i, p in enumerate(ports)}}
    names = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")
    node_b = [w for name in names for w in (name, str(_free_port()))]
    for block in sorted(CLUSTER_BLOCKS):
        script = _cluster_script([c for c in CLUSTER if c.block == block], fill, {"b": node_b})
        temp = tempfile.mkdtemp(prefix="wbray", dir="/tmp")  # Ray's socket paths must fit 107 bytes
        # no token (the README: the test's cluster listens on 127.0.0.1 only, RAY_AUTH_MODE=disabled)
        env = {**os.environ, "RAY_TMPDIR": temp, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
               "WORKBENCH_RUNS": str(tmp_path / "runs")}
        env.pop("RAY_ADDRESS", None)
        try:
            done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", script], env=env,
                                  cwd=ROOT, capture_output=True, text=True, timeout=1800)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        assert done.returncode == 0, f"{script}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert "Stopped" in done.stdout + done.stderr or "stopped" in done.stdout + done.stderr
