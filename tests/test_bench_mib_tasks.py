"""MIB's IOI counterfactual kinds as a task parameter (``ioi:counterfactual=s2_io|abc|names``): the builders'
invariants (same token length, S2 -> IO changes one name and flips the answer, ABC changes all three), the
kind each row claims is checked word by word, and bad input (an unknown kind, a file whose counterfactual is
not the kind it claims) is one line, exit 2, nothing saved. Custom task files: shuffled by the seed, split by
their own ``split`` field when every row has one, labelled by their stem."""

from __future__ import annotations

import json
import random

import pytest
from cli_helpers import assert_bad, run_cli

from circuits.bench.runner import BenchConfig, check_config, load_rows, task_label
from circuits.bench.tasks import (
    IOI_KINDS,
    build,
    check_claimed_kinds,
    check_counterfactual,
    check_row,
    ioi_candidates,
    parse_task,
    task_file_stem,
)
from core.errors import MethodError, PromptError


def _names(text: str) -> list[str]:
    from circuits.bench.tasks import NAMES, _words

    return [w for w in _words(text) if w in NAMES]


def test_s2_io_changes_one_name_and_flips_the_answer(tiny_llama):
    rows = ioi_candidates(random.Random(0), 60, "s2_io")
    ok = 0
    for r in rows:
        p, c = _names(r["prompt"]), _names(r["corrupt"])
        a, b = r["target"].strip(), r["foil"].strip()
        assert p == [a, b, b] and c == [a, b, a]  # only the subject's second mention changed, into the IO
        # the answer flips: in the counterfactual the name mentioned once (the IO) is the subject, the foil
        assert c.count(b) == 1 and c.count(a) == 2
        assert check_counterfactual(r, "s2_io") and not check_counterfactual(r, "abc")
        assert not check_counterfactual(r, "names") and r["counterfactual"] == "s2_io"
        ids = check_row(tiny_llama, r)  # smollm2's tokenizer: same token length, one token differs
        if ids is not None:
            ok += 1
            assert len(ids[0]) == len(ids[1]) and sum(x != y for x, y in zip(*ids, strict=True)) == 1
    assert ok >= len(rows) // 2


def test_abc_and_names_change_every_mention(tiny_llama):
    for kind in ("abc", "names"):
        for r in ioi_candidates(random.Random(1), 40, kind):
            p, c = _names(r["prompt"]), _names(r["corrupt"])
            assert not set(c) & set(p)  # no name of the prompt survives
            assert len(set(c)) == (3 if kind == "abc" else 2)
            assert [check_counterfactual(r, k) for k in IOI_KINDS] == [k == kind for k in IOI_KINDS]
            ids = check_row(tiny_llama, r)
            if ids is not None:
                assert len(ids[0]) == len(ids[1])


def test_task_specs_and_their_files():
    assert parse_task("ioi") == ("ioi", {"counterfactual": "s2_io"})
    assert parse_task("ioi:counterfactual=abc") == ("ioi", {"counterfactual": "abc"})
    assert [task_file_stem(s) for s in ("ioi", "ioi:counterfactual=s2_io", "ioi:counterfactual=names", "facts")] \
        == ["ioi", "ioi", "ioi.names", "facts"]
    for bad, says in (("ioi:counterfactual=bac", "unknown ioi counterfactual 'bac'"),
                      ("ioi:kind=abc", "no parameter"), ("facts:counterfactual=abc", "no parameter")):
        with pytest.raises(MethodError, match=says):
            parse_task(bad)
        with pytest.raises(MethodError, match=says):
            check_config(BenchConfig(model="smollm2-135m", tasks=[bad], methods=["eap"]))


def test_shipped_ioi_files_are_the_kind_their_name_says():
    """data/bench/<model>/ioi.jsonl is MIB's S2 -> IO flip, ioi.names.jsonl the pre-issue-39 counterfactual."""
    for model in ("smollm2-135m", "gemma3-270m"):
        for spec, kind in (("ioi", "s2_io"), ("ioi:counterfactual=names", "names")):
            rows, metric, source = load_rows(model, spec)
            assert source.endswith(f"{task_file_stem(spec)}.jsonl") and metric == "logit_diff"
            assert len(rows) >= 24 and all(r["counterfactual"] == kind for r in rows)
            check_claimed_kinds(rows, source, kind)


def test_shipped_task_files_hold_mib_sized_splits():
    """Issue 39's split sizes: every built-in task of both models ships at least 64 test and 16 validation
    prompts (rows the model answers top-1 and whose counterfactual flips), with train, validation and test
    disjoint."""
    from circuits.bench.tasks import TASKS, split_rows

    for model in ("smollm2-135m", "gemma3-270m"):
        for task in TASKS:
            rows, _, source = load_rows(model, task)
            test, validation, train = (split_rows(rows, s) for s in ("test", "validation", "train"))
            assert len(test) >= 64 and len(validation) >= 16 and len(train) >= 16, (source, len(rows))
            prompts = [r["prompt"] for r in train + validation + test]
            assert len(set(prompts)) == len(prompts), source


def test_a_row_that_is_not_its_claimed_kind_is_refused(tmp_path):
    row = ioi_candidates(random.Random(2), 1, "names")[0]
    with pytest.raises(PromptError, match="row 1's counterfactual is not the s2_io kind it claims"):
        check_claimed_kinds([dict(row, counterfactual="s2_io")], "f.jsonl")
    with pytest.raises(PromptError, match="row 1 is a names counterfactual, not the s2_io asked for"):
        check_claimed_kinds([row], "f.jsonl", "s2_io")
    with pytest.raises(PromptError, match="unknown counterfactual kind 'xyz'"):
        check_claimed_kinds([dict(row, counterfactual="xyz")], "f.jsonl")


def test_custom_files_shuffled_by_seed_or_split_by_field_and_labelled_by_stem(tmp_path):
    rows = [{"prompt": f"p{i}", "corrupt": f"q{i}", "target": " a", "foil": " b"} for i in range(16)]
    path = tmp_path / "my_task.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, _, _ = load_rows("m", str(path), seed=0)
    again, _, _ = load_rows("m", str(path), seed=0)
    other, _, _ = load_rows("m", str(path), seed=1)
    assert first == again and first != other
    assert [r["split"] for r in first].count("train") == 6
    assert [r["prompt"] for r in first if r["split"] == "train"] != [f"p{i}" for i in range(6)]  # not file order
    split = [dict(r, split="test" if i % 2 else "train") for i, r in enumerate(rows)]
    path.write_text("".join(json.dumps(r) + "\n" for r in split))
    assert load_rows("m", str(path), seed=3)[0] == split
    assert task_label(str(path)) == "my_task" and task_label("ioi:counterfactual=abc") == "ioi:counterfactual=abc"


def test_build_keeps_the_kind(tiny_llama):
    rows = build(tiny_llama, "ioi:counterfactual=abc", n=200, max_candidates=64)
    assert all(r["counterfactual"] == "abc" and check_counterfactual(r, "abc") for r in rows)


@pytest.mark.parametrize("case", ["unknown_kind", "wrong_kind_file"])
def test_cli_bad_kind_is_one_line_exit_2_nothing_saved(monkeypatch, capsys, tmp_path, case):
    out = tmp_path / "doc.md"
    args = ["bench", "circuits", "--model", "smollm2-135m", "--out", str(out), "--methods", "eap"]
    if case == "unknown_kind":
        code, _, err = run_cli(monkeypatch, capsys, *args, "--tasks", "ioi:counterfactual=flip")
        assert_bad(code, err, "unknown ioi counterfactual", "flip")
    else:
        rows = [dict(r, counterfactual="s2_io") for r in ioi_candidates(random.Random(3), 12, "abc")]
        path = tmp_path / "claims.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code, _, err = run_cli(monkeypatch, capsys, *args, "--tasks", str(path))
        assert_bad(code, err, "not the s2_io kind it claims")
    from core.store import RunStore

    assert not out.exists() and not [r for r in RunStore().list() if r.kind == "bench"]


CUSTOM = [{"prompt": f"The cat number {i} sat on the mat", "corrupt": f"The dog number {i} sat on the mat",
           "target": " and", "foil": " or", "split": "train" if i < 5 else "test"} for i in range(10)]


def test_random_baseline_is_the_mean_of_its_draws_and_empty_sizes_are_said(tiny_llama, tmp_path):
    import torch

    from circuits.bench.report import _cell, markdown
    from circuits.bench.runner import run

    torch.set_num_threads(1)
    path = tmp_path / "cats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CUSTOM))
    cfg = BenchConfig(model="tiny", tasks=[str(path)], methods=["random"], levels=["edge", "node"], n_train=4,
                      n_test=4, n_boot=20, batch_size=4, random_seeds=3, filter_rows=False)
    result = run(cfg, model=tiny_llama)
    assert result["tasks"][0]["label"] == "cats"
    for level in ("edge", "node"):
        lv = result["tasks"][0]["methods"]["random"]["levels"][level]
        assert len(lv["seeds"]) == 3 and len({s["cpr"] for s in lv["seeds"]}) > 1  # three different draws
        assert lv["cpr"] == pytest.approx(sum(s["cpr"] for s in lv["seeds"]) / 3)
        assert lv["cmd"] == pytest.approx(sum(s["cmd"] for s in lv["seeds"]) / 3)
        assert lv["cpr_ci"][0] <= lv["cpr_ci"][1] and lv["cmd_ci"][0] <= lv["cmd_ci"][1]
    text = markdown(result)
    assert "| cats |" in text and "## Tasks and MIB" in text and "a custom task file" in text
    lv = result["tasks"][0]["methods"]["random"]["levels"]["edge"]  # the document gives the interval widths
    assert "## Interval widths" in text and f"| edge CPR | {lv['cpr_ci'][1] - lv['cpr_ci'][0]:.3f} (" in text
    # a curve whose every size below the full one pruned to nothing is said, not scored as 0
    curve = {"fractions": [0.1, 0.5, 1.0], "edges_kept": [0, 0, 80], "faithfulness": [0.0, 0.0, 1.0]}
    lv = {"cpr": 0.25, "cmd": 0.75, "cpr_ci": [0.25, 0.25], "cmd_ci": [0.75, 0.75],
          "curves": {"cpr": curve, "cmd": curve}, "empty": {"cpr": 2, "cmd": 2}}
    assert _cell(lv, "cpr") == "empty (2/2 sizes)"
    assert _cell(dict(lv, empty={"cpr": 1, "cmd": 1}), "cmd") == "0.750 [0.75, 0.75] (1 sizes empty)"
    with pytest.raises(MethodError, match="random-seeds"):
        check_config(BenchConfig(model="m", tasks=["ioi"], random_seeds=0))


def test_custom_file_filtered_unless_no_filter(tiny_llama, tmp_path):
    from circuits.bench.runner import prepare_task

    path = tmp_path / "cats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CUSTOM))
    cfg = BenchConfig(model="tiny", tasks=[str(path)], methods=["random"], n_train=4, n_test=4)
    with pytest.raises(PromptError, match="the filter kept 0 of 10 rows.*--no-filter"):
        prepare_task(tiny_llama, str(path), cfg)  # a random model answers none of them top-1
    cfg.filter_rows = False
    assert prepare_task(tiny_llama, str(path), cfg).header["label"] == "cats"


def test_help_says_how_custom_files_are_read(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "bench", "circuits", "--help")
    text = " ".join(out.split()).replace("│ ", "").replace(" │", "")
    assert code == 0
    for words in ("shuffled with --seed", "`split` field", "--no-filter", "stem", "ioi:counterfactual=abc",
                  "--random-seeds"):
        assert words in text, words


def test_last_logits_are_the_forwards_last_position(tiny_llama):
    """The filter's last-position logits (blocks, then the head on one position) equal the full forward's."""
    import torch

    from circuits.bench.tasks import last_logits

    tokens = tiny_llama.to_tokens("When Mary and John went to the store, John gave a drink to")
    tokens = torch.cat([tokens, tokens.flip(-1)])
    assert torch.allclose(last_logits(tiny_llama, tokens), tiny_llama.logits(tokens)[:, -1], atol=1e-5)
