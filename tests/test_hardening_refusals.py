"""The last bad inputs of issue 52: each refused in one line that names the cause and what the user typed,
exit 2, nothing written (and, where no model is needed, nothing loaded)."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import assert_bad, run_cli

TOY = "ioi-attn-1l2h"
ROW = {"prompt": "N1 and N2 then N2", "target": "N1", "foil": "N2"}


@pytest.fixture
def no_model(monkeypatch, tmp_path):
    """Loading a model is a test failure: these refusals need none. Works in tmp_path."""
    import core.models.zoo as zoo
    import workbench

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(zoo, "load", boom)
    monkeypatch.setattr(workbench, "load", boom)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _runs_left() -> list[str]:
    root = Path(os.environ["WORKBENCH_RUNS"])
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


# -- a prompt, dataset or task file nested 100,000 deep: the one JSON depth check ------------------------------
DEEP_COMMANDS = [
    ["attribute-set", "--model", TOY, "--prompts", "deep.jsonl"],
    ["faithfulness", "--model", TOY, "--prompts", "deep.jsonl", "--methods", "dpa"],
    ["probe", "--model", TOY, "--dataset", "deep.jsonl"],
    ["concepts", "--model", TOY, "--dataset", "deep.jsonl"],
    ["bench", "circuits", "--model", TOY, "--tasks", "deep.jsonl"],
]


@pytest.mark.parametrize("args", DEEP_COMMANDS, ids=lambda a: a[0] if a[0] != "bench" else "bench circuits")
@pytest.mark.parametrize("line", [
    "[" * 100_000,  # json.loads' own RecursionError
    json.dumps({**ROW, "text": "a b", "label": "x", "x": 0})[:-2] + "[" * 150 + "]" * 150 + "}",  # parses: too deep
], ids=["100000-open", "150-in-a-row"])
def test_a_deeply_nested_line_is_one_line(no_model, monkeypatch, capsys, args, line):
    (no_model / "deep.jsonl").write_text(line + "\n")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert_bad(code, err, "deep.jsonl", "nested more than 100 levels")
    assert str(no_model) not in err  # named as typed, not by an absolute path
    assert out == "" and _runs_left() == []


def test_the_depth_check_is_the_one_in_core_checks(monkeypatch):
    """The prompt reader goes through core.checks.loads_bounded (one depth check for every JSON read)."""
    import core.checks
    from core.errors import PromptError
    from core.prompt_files import parse_prompts

    monkeypatch.setattr(core.checks, "MAX_JSON_DEPTH", 2)
    with pytest.raises(PromptError, match="nested more than 2 levels"):
        parse_prompts(json.dumps({**ROW, "x": [[1]]}), "p.jsonl")
    assert parse_prompts(json.dumps({**ROW, "x": [1]}), "p.jsonl")[0]["x"] == [1]


# -- a pipe, a device or a directory given as a file ---------------------------------------------------------
FILE_COMMANDS = [
    ["attribute-set", "--model", TOY, "--prompts"],
    ["faithfulness", "--model", TOY, "--methods", "dpa", "--prompts"],
    ["probe", "--model", TOY, "--dataset"],
    ["bench", "circuits", "--model", TOY, "--tasks"],
]


@pytest.mark.parametrize("args", FILE_COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/null", "directory"])
def test_a_file_that_is_not_a_regular_file_says_so(no_model, monkeypatch, capsys, args, kind):
    if kind == "fifo":
        path = "pipe.jsonl"
        os.mkfifo(no_model / path)  # reading it would block: it must not be opened at all
    elif kind == "directory":
        path = "folder.jsonl"
        (no_model / path).mkdir()
    else:
        if args[0] == "bench":
            pytest.skip("bench takes a task file by its .jsonl name")
        path = kind
    code, out, err = run_cli(monkeypatch, capsys, *args, path)
    words = ("is a directory",) if kind == "directory" else ("not a regular file",)
    assert_bad(code, err, f"'{path}'", *words)
    assert "does not exist" not in err and out == ""


def test_a_missing_file_still_does_not_exist(no_model, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "attribute-set", "--model", TOY, "--prompts", "gone.jsonl")
    assert_bad(code, err, "'gone.jsonl'", "does not exist")


# -- probe --pooling marked on examples without a word ----------------------------------------------------------
@pytest.mark.parametrize("command", ["probe", "concepts"])
def test_marked_pooling_needs_every_word(no_model, monkeypatch, capsys, command):
    rows = [{"text": f"N1 and N2 then N{i % 2 + 1}", "label": "ab"[i % 2]} for i in range(8)]
    rows[0]["word"] = "N1"  # one marked, seven not: the seven would silently pool their last token
    (no_model / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run_cli(monkeypatch, capsys, command, "--model", TOY, "--dataset", "d.jsonl",
                             "--pooling", "marked")
    assert_bad(code, err, "--pooling marked", "7 of the 8 examples in d.jsonl", "example 2")
    assert out == "" and _runs_left() == []


def test_a_word_that_is_not_a_string_is_refused(tmp_path):
    from attribution.probes.activations import load_dataset
    from core.errors import DatasetError

    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"text": "a b", "label": "x", "word": 3}) + "\n")
    with pytest.raises(DatasetError, match='line 1: "word" must be a non-empty string'):
        load_dataset(f)


def test_the_engine_refuses_marked_pooling_without_words_too():
    """The check sits in pooled_activations as well: a job or notebook reaches it without the CLI."""
    from attribution.probes.activations import LabeledSet, check_pooling
    from core.errors import DatasetError

    data = LabeledSet(["a b", "c d"], ["x", "y"], ["b", "d"], [None, "d"])
    with pytest.raises(DatasetError, match="1 of the 2 examples"):
        check_pooling(data, "marked")
    check_pooling(data, "last")
    check_pooling(LabeledSet(["a b"], ["x"], ["b"], ["b"]), "marked")


# -- faithfulness --param for a method that is not run ----------------------------------------------------------
@pytest.mark.parametrize("param, methods, words", [
    ("ig.steps=3", "dpa", ("'ig.steps=3'", "--methods (dpa)", "does not run")),
    ("integrated_gradients.steps=3", "dpa,gradient", ("integrated_gradients", "does not run")),
    ("nosuch.steps=3", "dpa", ("unknown method 'nosuch'",)),
])
def test_a_parameter_for_a_method_not_run_is_refused(no_model, monkeypatch, capsys, param, methods, words):
    (no_model / "p.jsonl").write_text(json.dumps(ROW) + "\n")
    code, out, err = run_cli(monkeypatch, capsys, "faithfulness", "--model", TOY, "--prompts", "p.jsonl",
                             "--methods", methods, "--param", param)
    assert_bad(code, err, *words)
    assert out == "" and _runs_left() == []


def test_a_parameter_by_alias_or_full_name_for_a_method_run_is_kept():
    from workbench.commands.faithfulness import parse_params

    assert parse_params(["ig.steps=3"], ["integrated_gradients"]) == {"integrated_gradients": {"steps": 3}}
    assert parse_params(["integrated_gradients.steps=3"], ["ig"]) == {"integrated_gradients": {"steps": 3}}


# -- sae features on neurons a model does not have; info on a path with '..' -----------------------------------
def test_neurons_of_a_model_without_mlp_give_the_real_reason(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "sae", "features", "--sae", "neurons:0", "--model", TOY,
                             "--feature", "0")
    assert_bad(code, err, "--sae neurons:0", "no MLP neurons")
    assert "workbench sae dashboards" not in err  # no advice to run a command that would fail


def test_neurons_without_dashboards_advise_the_command_that_builds_them(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "sae", "features", "--sae", "neurons:0", "--model",
                             "modadd-dense", "--feature", "0")
    assert_bad(code, err, "`workbench sae dashboards --sae neurons:0 --model modadd-dense`")


def test_info_names_the_path_as_typed(no_model, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "info", "org/../../nowhere-52")
    assert_bad(code, err, "'org/../../nowhere-52'", "does not exist", "read as '../nowhere-52'")
    code, out, err = run_cli(monkeypatch, capsys, "info", "./nowhere-52")
    assert_bad(code, err, "'./nowhere-52'", "does not exist")
    assert "read as" not in err


# -- a full disk ---------------------------------------------------------------------------------------------
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("args", [["runs", "list"], ["runs", "list", "--json"], ["models"]])
def test_output_to_a_full_disk_names_standard_output(monkeypatch, capsys, args):
    """`workbench runs list > FILE` on a full disk (or > /dev/full): the write of the output fails."""
    monkeypatch.setattr(sys.stdout, "write", _no_space)
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert_bad(code, err, "no space left on device at standard output", "not written")


def test_the_store_marker_on_a_full_disk_lets_the_board_name_its_path(monkeypatch, capsys, tmp_path):
    """A job's board on a full disk: the marker's close used to raise a bare ENOSPC ("no space left on
    device", no path); now the record's own write fails and names the folder, as the README says."""
    import core.store as S

    real = os.fdopen

    class Full:
        """The store marker's file on a full disk; every other os.fdopen as it is."""

        def __new__(cls, fd, *a, **k):
            if not os.readlink(f"/proc/self/fd/{fd}").endswith(S.MARKER):
                return real(fd, *a, **k)
            return super().__new__(cls)

        def __init__(self, fd, *a, **k):
            self.fh = real(fd, *a, **k)

        def write(self, text):
            return len(text)  # buffered, as a real file: the close is what fails

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()
            _no_space()

    jobs = tmp_path / "jobs"
    monkeypatch.setenv("WORKBENCH_JOBS", str(jobs))
    (tmp_path / "p.jsonl").write_text(json.dumps(ROW) + "\n")
    monkeypatch.setattr(S.os, "fdopen", Full)
    monkeypatch.setattr(S.os, "replace", _no_space)
    code, out, err = run_cli(monkeypatch, capsys, "attribute-set", "--model", TOY, "--prompts",
                             str(tmp_path / "p.jsonl"))
    assert_bad(code, err, "no space left on device at", str(jobs))


# -- warnings: one line each, once, in the CLI's words; --json keeps them --------------------------------------
@pytest.fixture
def unconverged(tmp_path):
    """A tiny random model and three prompts on which IG with one step does not converge: one warning a prompt."""
    from core.models.tiny import save_tiny

    model = save_tiny(tmp_path / "tiny")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "target": "good", "foil": "bad"}) + "\n"
                               for p in ("the movie was good", "the meal was awful", "a book is really nice")))
    return str(model), str(prompts)


@pytest.mark.parametrize("command", [["faithfulness", "--methods", "ig", "--param", "ig.steps=1"],
                                     ["attribute-set", "--method", "ig", "--param", "steps=1"]])
def test_a_warning_per_prompt_is_one_line_once(unconverged, monkeypatch, capsys, command):
    model, prompts = unconverged
    args = [command[0], "--model", model, "--prompts", prompts, *command[1:], "--no-save"]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "converge" in line]
    assert len(lines) == 1, err  # three prompts, one line
    assert lines[0].startswith("warning: integrated gradients did not converge"), lines[0]
    assert ".py" not in err and "ConvergenceWarning" not in err and "fn(" not in err, err  # no source, no code
    code, out, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    [kept] = json.loads(out)["warnings"]
    assert kept["count"] == 3 and kept["category"] == "ConvergenceWarning"
    assert kept["warning"].startswith("integrated gradients did not converge")
    assert sum("warning:" in line for line in err.splitlines()) == 1


def test_warnings_as_lines_kinds_and_developer_warnings(capsys):
    import warnings

    from workbench.commands.common import WARNINGS, warnings_as_lines

    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        with warnings_as_lines():
            for x in (1, 2.5, 1e-3):
                warnings.warn(f"gap {x} too large\nsecond line", UserWarning, stacklevel=1)
            warnings.warn("another", RuntimeWarning, stacklevel=1)
            warnings.warn("old API", DeprecationWarning, stacklevel=1)  # the developer's, left as it was
            assert [(w["warning"], w["count"]) for w in WARNINGS] == [("gap 1 too large", 3), ("another", 1)]
        assert WARNINGS == []
    err = capsys.readouterr().err
    assert err.splitlines() == ["warning: gap 1 too large", "warning: another"], err
    assert [str(w.message) for w in outside] == ["old API"]


# -- refusals before anything heavy loads (issue 52 item 2) -------------------------------------------------------
P = "N1 and N2 then N2"
LIGHT_REFUSALS = [
    (["ablate", TOY, "-c", ""], "bad component ''"),
    (["ablate", TOY, "-c", "head:0"], "needs 2 indices"),
    (["ablate", TOY, "--method", "nosuch"], "unknown ablation method 'nosuch'"),
    (["ablate", TOY, "-c", "head:0.0", "--method", "resample", "--prompt", P, "--target", "N1"], "reference set"),
    (["attribute", TOY, P, "--target", "N1", "--foil", ""], "'--foil': is empty"),
    (["attribute", TOY, P, "--target", ""], "'--target': is empty"),
    (["dla", TOY, P, "--target", "N1", "--foil", ""], "'--foil': is empty"),
    (["patch", TOY, P, "N2 and N1 then N1", "--target", ""], "'--target': is empty"),
    (["lens", TOY, P, "--target", ""], "'--target': is empty"),
    (["attribute-set", "--model", TOY, "--prompts", "/dev/null"], "not a regular file"),
    (["attribute", "nosuch-model", P, "--target", "N1"], "unknown model 'nosuch-model'"),
    (["attribute", "vit-synth", P, "--target", "N1"], "vit-synth is a vision model"),
    (["dla", "vit-synth", P, "--target", "N1"], "vit-synth is a vision model"),
    (["generate", "vit-synth", P], "vit-synth is a vision model"),
    (["flow", "vit-synth", P], "vit-synth is a vision model: information flow needs a language model"),
    (["lens", "vit-synth", P, "--no-save"], "not for vision models"),
    (["lens-train", "vit-synth"], "not for vision models"),
    (["lens-train", TOY], "is a toy model"),
    (["patch", TOY, P, P, "--target", "N1", "--foil", "N2"], "the same text as the clean one"),
    (["concepts", "--model", TOY, "--dataset", "d.jsonl", "--sae", "~nosuchuser/x"], "not an SAE directory"),
    (["attribute", TOY, P, "--target", "N1", "--method", "ig", "--param", "steps=abc"],
     "steps=abc: must be a whole number"),  # was internal error (int('abc') inside IG)
    (["attribute", TOY, P, "--target", "N1", "--param", "nosuch=1"], "dpa has no parameter nosuch"),
    (["attribute", TOY, P, "--target", "N1", "--method", "gradient", "--param", "x=1"],
     "gradient has no parameter x; it takes no parameters"),  # was internal error (an unexpected keyword)
    (["attribute", TOY, P, "--target", "N1", "--method", "ig", "--param", "step=3"],
     "integrated_gradients has no parameter step; parameters: steps"),
    (["attribute-set", "--model", TOY, "--prompts", "d.jsonl", "--method", "rollout", "--param", "alpha=1"],
     "rollout has no parameter alpha; parameters: residual"),
    (["faithfulness", "--model", TOY, "--prompts", "d.jsonl", "--methods", "ig", "--param",
      "ig.steps=" + "[" * 150 + "]" * 150], "--param ig.steps: the value is nested more than 100"),
    (["train", "ioi", "--out", "o", "--task-param", "n=" + "[" * 150 + "]" * 150],
     "--task-param n: the value is nested more than 100"),
]
DATASET = "".join(json.dumps({"text": f"N1 and N2 then N{i % 2 + 1}", "label": "ab"[i % 2]}) + "\n" for i in range(8))


@pytest.mark.parametrize("args, words", LIGHT_REFUSALS, ids=[" ".join(a[:1] + a[-2:]) for a, _ in LIGHT_REFUSALS])
def test_syntax_is_refused_before_the_model_loads(no_model, monkeypatch, capsys, args, words):
    (no_model / "d.jsonl").write_text(DATASET)
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert_bad(code, err, words)


def test_syntax_refusals_import_neither_torch_nor_transformer_lens(tmp_path):
    """In a fresh interpreter, as a user runs the command: each refusal above is one line and exit 2 with torch
    and TransformerLens never imported (they cost seconds; `workbench ablate M -c ''` took 8.8 s)."""
    import subprocess

    script = (
        "import json, sys\n"
        "from workbench.cli import main\n"
        "codes = []\n"
        f"for args in {json.dumps([a for a, _ in LIGHT_REFUSALS])}:\n"
        "    sys.argv = ['workbench', *args]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        "print(json.dumps({'codes': codes, 'heavy': sorted(m for m in ('torch', 'transformer_lens') "
        "if m in sys.modules)}))\n")
    (tmp_path / "d.jsonl").write_text(DATASET)
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, WORKBENCH_RUNS=str(tmp_path / "runs"), PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"codes": [2] * len(LIGHT_REFUSALS), "heavy": []}, (got, proc.stderr[-2000:])
    assert len([x for x in proc.stderr.splitlines() if x.startswith("error:")]) == len(LIGHT_REFUSALS)


def test_a_model_config_nested_too_deep_is_one_line(tmp_path, monkeypatch, capsys):
    """A model folder's config.json (a user's, or a hub snapshot) read through the same depth check."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("[" * 100_000)
    code, out, err = run_cli(monkeypatch, capsys, "info", str(tmp_path / "m"))
    assert_bad(code, err, "config.json", "nested more than 100 levels deep")
    assert "'nested" not in err  # the cause, not its repr


def test_each_prompt_method_names_the_parameters_its_implementation_takes():
    """The parameters read from the implementation's source (before torch loads) are the ones its function
    takes: every one of them is accepted by the engine on a tiny model, and an unknown one is a MethodError."""
    import inspect

    from attribution import METHODS, get_method
    from attribution.methods import check_prompt_params, prompt_params
    from core.errors import MethodError

    for name, spec in METHODS.items():
        _spec, fn = get_method(name, spec.levels[0])
        taken = {p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY
                 or (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)} - {"on_step", "items"}
        assert taken <= set(prompt_params(name)), name
        with pytest.raises(MethodError, match=f"{name} has no parameter zzz"):
            check_prompt_params(name, {"zzz": 1})
    assert set(prompt_params("dpa")) >= {"w_q", "w_v", "act_mode", "norm"}


def test_the_api_refuses_an_unknown_parameter_in_one_line(tiny_llama):
    """The engine's own call (the facade checks its arguments before it)."""
    from attribution import attribute, attribute_levels
    from core.errors import MethodError

    for method in ("gradient", "dpa"):
        with pytest.raises(MethodError, match=f"{method} has no parameter nosuch"):
            attribute(tiny_llama, "a b c", target=" d", method=method, nosuch=1)
    with pytest.raises(MethodError, match="gradient has no parameter nosuch"):
        attribute_levels(tiny_llama, "a b c", target=" d", method="gradient", levels=("token", "head"), nosuch=1)
