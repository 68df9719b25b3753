"""Hardening of inputs: JSONL prompt files read line by line at "\\n" only, with a BOM tolerated."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.errors import PromptError
from core.prompt_files import parse_prompts, read_prompts

ODD = "a\u2028b\u2029c\u0085d"  # separators str.splitlines() splits at, legal inside a JSON string


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def test_unicode_line_separators_inside_strings(tmp_path):
    rows = [{"prompt": f"x {ODD} y", "target": " y"}, {"prompt": "second", "target": " z"}]
    f = tmp_path / "p.jsonl"
    f.write_text(_jsonl(rows), encoding="utf-8")
    assert read_prompts(str(f)) == rows
    assert parse_prompts(_jsonl(rows), "p.jsonl") == rows


def test_bom_and_crlf(tmp_path):
    rows = [{"prompt": "one", "target": " a"}, {"prompt": "two", "target": " b", "foil": " c"}]
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + _jsonl(rows).replace("\n", "\r\n").encode())
    assert read_prompts(str(f)) == rows
    # Text already decoded with a plain "utf-8" (the app's upload path) still carries the BOM.
    assert parse_prompts("\ufeff" + _jsonl(rows), "up.jsonl") == rows


def test_bad_line_still_named(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a", "target": " b"}\n\nnot json\n', encoding="utf-8")
    with pytest.raises(PromptError, match=r"p.jsonl:3"):
        read_prompts(str(f))


def test_probe_dataset_unicode_separators(tmp_path):
    from attribution.probes.activations import load_dataset

    rows = [{"text": f"t{i} {ODD}", "label": "ab"[i % 2]} for i in range(4)]
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + _jsonl(rows).encode())
    ds = load_dataset(f)
    assert ds.texts == [r["text"] for r in rows]


# -- a model folder's config.json names a loader from the registry; it never picks code ---------------

def _evil_module(tmp_path, monkeypatch):
    """A module on sys.path whose import leaves a marker file: importing it is the failure."""
    marker = tmp_path / "imported"
    (tmp_path / "evil_loader_mod.py").write_text(
        f"open({str(marker)!r}, 'w').write('x')\ndef load(entry, device='cpu'):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return marker


def test_model_dir_cannot_choose_a_module(tmp_path, monkeypatch, capsys):
    from tests.cli_helpers import assert_bad, run_cli

    marker = _evil_module(tmp_path, monkeypatch)
    for loader in ("evil_loader_mod:load", "this:nothing"):
        d = tmp_path / f"m-{loader.split(':')[0]}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"workbench": {"loader": loader}}))
        code, out, err = run_cli(monkeypatch, capsys, "info", str(d), "--json")
        assert_bad(code, err, "unknown loader", loader)
        assert "Beautiful is better" not in out + err
    assert not marker.exists()


def test_data_models_entry_cannot_choose_a_module(tmp_path, monkeypatch):
    import workbench as wb
    from core.errors import ModelFileError
    from core.models import zoo

    marker = _evil_module(tmp_path, monkeypatch)
    models = tmp_path / "data" / "models"
    for name, info in {"evil": {"loader": "evil_loader_mod:load", "params": 1},
                       "bad-params": {"loader": "circuits.checkpoints:load", "params": "many"},
                       "fine": {"loader": "circuits.checkpoints:load", "params": 3}}.items():
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps({"workbench": info}))
    monkeypatch.setattr(zoo, "DATA_DIR", tmp_path / "data")
    names = {e.name for e in zoo.list_models()}
    assert {"evil", "fine"} <= names and "bad-params" not in names  # one bad config hides nothing else
    with pytest.raises(ModelFileError, match="unknown loader 'evil_loader_mod:load'"):
        wb.load("evil")
    assert not marker.exists()
    # code (not data) may still register a loader, and then a data file may name it
    zoo.register_loader("evil_loader_mod:load", "evil_loader_mod:load")
    try:
        assert wb.load("evil") is None and marker.exists()
    finally:
        zoo.LOADERS.pop("evil_loader_mod:load")
        sys.modules.pop("evil_loader_mod", None)


def test_every_shipped_checkpoint_names_a_registered_loader():
    from core.models import zoo

    for e in zoo.list_models():
        assert e.loader in zoo.LOADERS, e


def test_old_loader_names_load_with_the_grounds_code(tmp_path):
    """A checkpoint written before its loader moved into core.models (the shipped toys say
    circuits.checkpoints:load; workbench train wrote circuits.toy.checkpoints:load, save_tiny
    attribution.probes.tiny:load) loads through the new target: the old name is a name only."""
    import workbench as wb
    from core.models import zoo
    from core.models.tiny import save_tiny

    # the table as the code declares it, read in a fresh interpreter: tests earlier in this worker may have
    # registered loaders of their own (zoo.register_loader), which are not the ground's
    declared = json.loads(subprocess.run([sys.executable, "-c", "import json; from core.models import zoo; "
                                          "print(json.dumps(zoo.LOADERS))"], capture_output=True, text=True,
                                         check=True).stdout)
    assert declared and all(target.startswith("core.models.") for target in declared.values()), declared
    for old, new in {"circuits.toy.checkpoints:load": "core.models.toy_checkpoint:load",
                     "circuits.checkpoints:load": "core.models.toy_checkpoint:load",
                     "attribution.probes.tiny:load": "core.models.tiny:load"}.items():
        assert zoo.LOADERS[old] == new
    from core.models.toy_tasks import Task

    shipped = next(e for e in zoo.list_models() if e.loader == "circuits.checkpoints:load")
    model = wb.load(shipped.name)
    assert isinstance(model.info["task_source"], Task)  # the toy model comes with its own task
    tiny = save_tiny(tmp_path / "tiny", name="tiny-old-name")
    config = json.loads((tiny / "config.json").read_text())
    config["workbench"]["loader"] = "attribution.probes.tiny:load"
    (tiny / "config.json").write_text(json.dumps(config))
    assert wb.load(str(tiny)).n_params() == config["workbench"]["params"]


def test_oracle_help_says_it_runs_code(monkeypatch, capsys):
    from tests.cli_helpers import run_cli

    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(monkeypatch, capsys, "recover-heads", "--help")
    assert code == 0 and "runs that Python code" in " ".join(out.split())


# -- activation patching: an undefined normalization is an error, not +-11,444 ----------------------

IOI = "N1 and N2 then N2"


def test_patch_identical_prompts_is_an_error(monkeypatch, capsys):
    from tests.cli_helpers import assert_bad, run_cli

    for site in ("resid", "heads", "mlps"):
        code, out, err = run_cli(monkeypatch, capsys, "patch", "ioi-attn-1l2h", IOI, IOI, "--target", "N1",
                                 "--foil", "N2", "--site", site, "--json")
        # refused before the model loads, so before the attention-only toy's "no MLPs" too
        assert_bad(code, err, "same text")
        assert out == ""


def test_patch_api_identical_prompts():
    import workbench as wb
    from circuits.tools import patching

    m = wb.load("ioi-attn-2l1h")
    with pytest.raises(patching.UndefinedEffectError, match="undefined"):
        patching.patch_heads(m, IOI, IOI, "N1", "N2")
    with pytest.raises(patching.UndefinedEffectError):
        patching.path_patch(m, IOI, IOI, "N1", "N2", sender=(0, 0))
    ok = patching.patch_heads(m, IOI, "N2 and N1 then N1", "N1", "N2")  # a real pair still works
    assert abs(ok.effect).max() < 100
