"""One CLI contract: human results on stdout (progress and logs on stderr), tables that fit 80 columns
without cutting what a user must type, run ids taken by unique prefix."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import assert_bad, run_cli

IOI = ("N1 and N2 then N2", "N2 and N1 then N1")


def test_patch_result_on_stdout_as_a_table(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, "patch", "ioi-attn-1l2h", *IOI, "--target", "N1", "--foil", "N2")
    assert code == 0, err
    assert "logit diff" in out and "logit diff" not in err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    header = next(line for line in lines if line.startswith("layer"))
    assert header.split()[1:] == ["0:N1", "1:and", "2:N2", "3:then", "4:N2"]  # positions labelled by tokens
    row = next(line for line in lines if line.split()[:1] == ["0"])  # layer 0 is a row of 5 numbers
    assert len([float(v) for v in row.split()[1:]]) == 5


def test_patch_table_splits_into_column_blocks_and_cuts_labels_not_numbers():
    from workbench.commands.circuits import effect_table

    n = 20
    r = {"axes": ["layer", "position"], "effect": [[-12.345 + i + j for j in range(n)] for i in range(3)],
         "labels": {"layer": ["0", "1", "2"], "position": [f"{j}: a-very-long-token" for j in range(n)]}}
    lines = effect_table(r, width=80)
    assert all(len(line) <= 80 for line in lines)
    headers = [line for line in lines if line.startswith("layer")]
    assert len(headers) == 3  # 20 columns in blocks of 8
    assert headers[0].endswith(" 6: a-v… 7: a-v…")  # cut to the 7-character cell
    assert f"{-12.345:.2f}" in lines[1] and f"{-12.345 + 2 + n - 1:.2f}" in lines[-1]


def test_recover_heads_result_on_stdout(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path))
    code, out, err = run_cli(monkeypatch, capsys, "recover-heads", "--d", "2", "--heads", "1")
    assert code == 0, err
    assert "heads: true 1" in out and "heads:" not in err


def _save(store, kind: str, model: str):
    from core.store import RunDraft

    return store.save(RunDraft(kind=kind, model=model, method="integrated-gradients-long-method", args={},
                               result={"v": 1}))


@pytest.fixture()
def store(tmp_path, monkeypatch):
    from core.store import RunStore

    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    return RunStore()


def test_runs_list_ids_whole_at_80_columns(store, monkeypatch, capsys):
    ids = [_save(store, kind, "smollm2-135m-a-long-model-name").id for kind in ("feature-graph", "attribute")]
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, "runs", "list")
    assert code == 0 and err == "", err
    assert all(len(line) <= 80 for line in out.splitlines()), out
    for run_id in ids:
        assert any(run_id in line for line in out.splitlines()), (run_id, out)


def test_sae_list_names_whole_at_80_columns(monkeypatch, capsys):
    from core.paths import data_root

    root = data_root() / "saes"
    if not root.is_dir():
        pytest.skip("no shipped dictionaries")
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, "sae", "list", "--root", str(root))
    assert code == 0, err
    names = [p.name for p in root.iterdir() if (p / "cfg.json").exists() or (p / "sae_weights.safetensors").exists()]
    assert names and all(len(line) <= 80 for line in out.splitlines()), out
    for name in names:
        assert any(name in line.split() for line in out.splitlines()), (name, out)


def test_runs_show_and_rm_take_a_unique_prefix(store, monkeypatch, capsys):
    a, b = _save(store, "attribute", "m"), _save(store, "attribute", "m")
    common = a.id[:9]  # the date: the start of both ids
    code, out, err = run_cli(monkeypatch, capsys, "runs", "show", a.id[:-2], "--json")
    assert code == 0, err
    assert json.loads(out)["path"].endswith(a.id)
    code, out, err = run_cli(monkeypatch, capsys, "runs", "show", common)
    assert_bad(code, err, "start of 2 run ids", a.id, b.id)
    assert out == ""
    assert_bad(*run_cli(monkeypatch, capsys, "runs", "rm", common)[::2], "start of 2 run ids")
    code, out, err = run_cli(monkeypatch, capsys, "runs", "rm", b.id[:-1], "--json")
    assert code == 0 and json.loads(out) == {"removed": b.id}, err
    assert [r["id"] for r in store.list()] == [a.id]
    with pytest.raises(Exception, match="nor one whose id starts"):
        store.resolve("zzz")


def test_jobs_show_takes_a_unique_prefix(monkeypatch, capsys):
    from workbench.scheduler import run

    a, _ = run({"kind": "sleep", "seconds": 0.01, "steps": 1})
    b, _ = run({"kind": "sleep", "seconds": 0.01, "steps": 1})
    code, out, err = run_cli(monkeypatch, capsys, "jobs", "show", a.id[:-2], "--json")
    assert code == 0 and json.loads(out)["id"] == a.id, err
    assert_bad(*run_cli(monkeypatch, capsys, "jobs", "show", a.id[:9])[::2], "start of 2 job ids", a.id, b.id)
    assert_bad(*run_cli(monkeypatch, capsys, "jobs", "cancel", a.id[:-2])[::2], "only a queued or running job")


def test_lens_cells_hold_top_k_tokens(monkeypatch, capsys):
    args = ("lens", "ioi-attn-1l2h", IOI[0], "--top-k", "3", "--no-save")
    code, out, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    topk = json.loads(out)["topk_tokens"]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    first_block = out.split("\n\n")[0]  # positions come in blocks that fit 80 columns
    assert all(len(line) <= 80 for line in out.splitlines()), out
    rows = [line for line in first_block.splitlines() if " | " in line][1:]  # after the header
    assert len(rows) == 3 * len(topk)  # k lines a layer
    for rank in range(3):  # the embed layer's k-th tokens at position 0, one a line
        assert rows[rank].split(" | ")[1].startswith(repr(topk[0][0][rank]))


@pytest.mark.parametrize("args, header", [
    (("attribute", "ioi-attn-1l2h", IOI[0], "--target", "N1"), "dpa"),
    (("lens", "ioi-attn-1l2h", IOI[0]), "logit lens"),
])
def test_whole_result_on_stdout(monkeypatch, capsys, args, header):
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert header in out and "saved run" in out  # the header and the run id, not only the table
    assert header not in err and "saved run" not in err, err


def test_models_names_whole_at_80_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, "models", "--json")
    names = [r["name"] for r in json.loads(out)]
    code, out, err = run_cli(monkeypatch, capsys, "models")
    assert code == 0 and all(len(line) <= 80 for line in out.splitlines()), out
    firsts = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert set(names) <= set(firsts), (names, out)
