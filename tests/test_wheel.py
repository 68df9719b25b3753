"""The wheel carries the whole product: built from the checkout's files (what a clean clone has, nothing that git
ignores), it holds the app, every file of data/ (toy checkpoints, ViT heads, dictionaries, dashboards, lenses,
prompt and bench sets) and the results documents; installed into a fresh venv and run from outside the checkout,
``workbench models`` lists every model the editable install lists, ``sae list`` finds the dictionaries, and the
app's first render has no error.

In CI the fresh venv reuses this venv's dependencies through a ``.pth`` line (no download): a plain path line is
added to sys.path without reading that folder's own .pth files, so the checkout's editable finder stays inactive
there. About 40 s: the build (~12 s), the install, three commands and one app render (which loads smollm2 from the
cache). In the slow suite (./dev test --slow) the wheel goes into a venv of its own, nothing borrowed: pip resolves
every dependency from the wheel's metadata alone (torch==2.13.0, the CPU build, from the machine's wheel folder as
./dev installs it; the rest from the package index), ``pip check`` finds them consistent, and the same commands run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RENDER = r"""
import json, sys
import app
from streamlit.testing.v1 import AppTest

main = sys.argv[1]
at = AppTest.from_file(main, default_timeout=180).run()
def problems(at):
    return [str(e.value) + "\n" + "\n".join(e.stack_trace) for e in at.exception] + [str(e.value) for e in at.error]
out = {"problems": problems(at), "titles": [str(t.value) for t in at.title]}
at.switch_page("pages/prompt_sets.py").run()  # a page that lists the shipped prompt sets
out["problems"] += problems(at)
out["prompt_files"] = list(at.selectbox(key="sets_file").options)
print(json.dumps(out))
"""
WHERE = """
import json, app, workbench
from core import paths
print(json.dumps({"workbench": workbench.__file__, "app": list(app.__path__), "data": str(paths.data_root()),
                  "installed": paths.installed(), "version": workbench.__version__}))
"""


def _source_files() -> list[str]:
    """The checkout's files as a clean clone has them (tracked, plus new files not yet committed), never ignored
    ones (.venv, runs/, build/, a locally trained Gemma lens)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the wheel test builds from git's file list: no git checkout here")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def _copy(files: list[str], dst: Path) -> None:
    for rel in files:
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(ROOT / rel, target)  # same file system: no copy
        except OSError:
            shutil.copy2(ROOT / rel, target)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORKBENCH_DATA", "VIRTUAL_ENV")}
    return {**env, **extra}


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, list[str]]:
    """The wheel built from a copy of the checkout's files, and those files."""
    tmp = tmp_path_factory.mktemp("wheel")
    files = _source_files()
    _copy(files, tmp / "src")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(tmp / "src"),
          "-w", str(tmp / "dist")], cwd=tmp, timeout=600)
    (built,) = (tmp / "dist").glob("workbench-*.whl")
    return built, files


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding only the wheel; the dependencies come from this venv by a .pth line."""
    tmp = tmp_path_factory.mktemp("venv")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "zz_workbench_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          str(wheel[0])], cwd=tmp)
    return env


def test_wheel_holds_app_data_and_results(wheel):
    built, files = wheel
    names = set(zipfile.ZipFile(built).namelist())
    shipped = {"app/": "app/", "data/": "workbench_data/", "results/": "workbench_results/"}
    missing = []
    for rel in files:
        for src, dst in shipped.items():
            if rel.startswith(src) and not rel.endswith(".html"):
                if dst + rel[len(src):] not in names:
                    missing.append(rel)
        if rel.endswith(".py") and rel.split("/")[0] in ("workbench", "attribution", "circuits") and rel not in names:
            missing.append(rel)
    assert not missing, f"not in the wheel: {missing[:20]} ({len(missing)} in all)"
    # what the product needs, named (so a change to the list above cannot hide them)
    for needed in ("app/main.py", "app/launch.py", "app/pages/attribution.py", "app/pages/feature_graph.py",
                   "app/static/favicon.png", "workbench_data/models/ioi-attn-1l2h/config.json",
                   "workbench_data/models/vit-synth/config.json", "workbench_data/heads/dinov2-small",
                   "workbench_data/saes/smollm2-135m-L12-transcoder2304/cfg.json",
                   "workbench_data/lenses/smollm2-135m/tuned.safetensors", "workbench_data/prompts/ioi.jsonl",
                   "workbench_data/bench/smollm2-135m/ioi.jsonl", "workbench_data/corpus/english.jsonl.gz",
                   "workbench_results/circuits/bench_smollm2-135m.md"):
        assert needed in names or any(n.startswith(needed + "/") for n in names), needed
    assert not any(n.startswith("workbench_data/lenses/gemma3-270m/") for n in names)  # Gemma terms: never shipped
    assert not any("__pycache__" in n or n.startswith(("tests/", "scripts/", "data/")) for n in names)


@pytest.fixture(scope="module")
def own_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv of its own (no .pth line, no system site-packages) with the wheel and the dependencies its
    metadata names, resolved by pip as a user's `pip install workbench-*.whl` would."""
    tmp = tmp_path_factory.mktemp("own-venv")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    python = str(env / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", str(wheel[0])], cwd=tmp, timeout=1800)
    _run([python, "-m", "pip", "check"], cwd=tmp)
    return env


def test_fresh_venv_runs_the_whole_product(venv, tmp_path):
    _runs_the_whole_product(venv, tmp_path)


@pytest.mark.slow_suite
def test_venv_of_its_own_runs_the_whole_product(own_venv, tmp_path):
    """What the CI test checks, with nothing borrowed from this venv: a dependency missing from the metadata fails."""
    site = Path(_run([str(own_venv / "bin" / "python"), "-c", "import sys; print(sys.prefix)"], tmp_path).strip())
    assert site == own_venv and not (own_venv / "pyvenv.cfg").read_text().count("include-system-site-packages = true")
    pths = [p.name for p in own_venv.rglob("*.pth") if sysconfig.get_paths()["purelib"] in p.read_text()]
    assert not pths, f"the venv reads this venv's packages through {pths}"
    _runs_the_whole_product(own_venv, tmp_path)


def _runs_the_whole_product(venv: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    bin_ = venv / "bin"
    where = json.loads(_run([str(bin_ / "python"), "-c", WHERE], outside))
    site = str(venv)
    assert where["workbench"].startswith(site) and all(p.startswith(site) for p in where["app"]), where
    assert where["installed"] and where["data"].startswith(site) and where["version"] == "0.1.0"
    assert _run([str(bin_ / "workbench"), "--version"], outside).strip() == f"workbench {where['version']}"

    fresh = [m["name"] for m in json.loads(_run([str(bin_ / "workbench"), "models", "--json"], outside))]
    dev = [m["name"] for m in json.loads(_run([sys.executable, "-m", "workbench.cli", "models", "--json"], ROOT))]
    print("workbench models in the fresh venv:", ", ".join(fresh))
    assert fresh == dev and len(fresh) >= 15
    assert {"ioi-attn-1l2h", "modadd-dense", "vit-synth", "vit-synth-hard", "smollm2-135m"} <= set(fresh)

    saes = json.loads(_run([str(bin_ / "workbench"), "sae", "list", "--json"], outside))
    shipped = {p.name for p in (ROOT / "data" / "saes").iterdir() if (p / "cfg.json").is_file()}
    assert {r["name"] for r in saes} == shipped and all(r["path"].startswith(site) for r in saes)

    main = Path(where["app"][0]) / "main.py"
    render = json.loads(_run([str(bin_ / "python"), "-c", RENDER, str(main)], outside).strip().splitlines()[-1])
    assert not render["problems"], render["problems"]
    assert render["titles"] == ["Attribution"]
    assert {"ioi.jsonl", "facts.jsonl"} <= set(render["prompt_files"])
