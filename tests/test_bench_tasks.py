"""Task builders (circuits/bench/tasks.py): every builder's rows satisfy its invariants (same token length
clean vs counterfactual, single-token answers, the counterfactual changes the answer), the filter keeps
exactly the rows the model answers and the counterfactual flips, and the committed smollm2 sets hold up."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from circuits.bench.tasks import SPLITS, TASKS, build, check_row, get_task, keep_rows
from core.errors import MethodError

DATA = Path(__file__).resolve().parent.parent / "data" / "bench" / "smollm2-135m"


def _answer_changes(model, row) -> bool:
    if "good" in row:  # greater-than: the counterfactual's start decade 0 moves the threshold
        return row["corrupt"] != row["prompt"] and set(row["good"]) != set(str(d) for d in range(1, 10))
    return model.token_id(row["target"]) != model.token_id(row["foil"])


@pytest.mark.parametrize("task", list(TASKS))
def test_candidates_satisfy_their_invariants(tiny_llama, task):
    rows = get_task(task).candidates(random.Random(0), 40)
    assert rows
    ok = [r for r in rows if check_row(tiny_llama, r) is not None]
    # facts draws two subjects of one table at random; with 40-70 subjects a table, many pairs differ in
    # token length (the filter drops them), so a quarter is the floor there, half elsewhere
    floor = len(rows) // 4 if task == "facts" else len(rows) // 2
    assert len(ok) >= floor, f"{task}: {len(ok)} of {len(rows)} candidates are well formed"
    for r in ok:
        clean, bad = check_row(tiny_llama, r)
        assert len(clean) == len(bad) and clean != bad
        assert _answer_changes(tiny_llama, r)


class _Oracle:
    """A stand-in model whose top-1 answer is chosen per prompt: tests the filter, not a network."""

    def __init__(self, model, answers: dict[tuple[int, ...], int]) -> None:
        self.m, self.answers = model, answers
        self.device, self.tokenizer, self.arch = model.device, model.tokenizer, model.arch

    def to_tokens(self, text):
        return self.m.to_tokens(text)

    def token_id(self, text):
        return self.m.token_id(text)

    def logits(self, tokens):
        out = torch.zeros(tokens.shape[0], tokens.shape[1], self.arch.d_vocab)
        for i, row in enumerate(tokens.tolist()):
            out[i, -1, self.answers.get(tuple(row), 0)] = 1.0
        return out


def test_filter_keeps_rows_answered_and_flipped(tiny_llama):
    rows = get_task("add").candidates(random.Random(1), 12)
    rows = [r for r in rows if check_row(tiny_llama, r)]
    answers = {}
    for i, r in enumerate(rows):
        clean, bad = check_row(tiny_llama, r)
        answers[tuple(clean)] = tiny_llama.token_id(r["target"])
        # every other row: the counterfactual leaves the model's answer unchanged -> dropped
        answers[tuple(bad)] = tiny_llama.token_id(r["target"] if i % 2 else r["foil"])
    kept = keep_rows(_Oracle(tiny_llama, answers), rows)
    assert [r["prompt"] for r in kept] == [r["prompt"] for i, r in enumerate(rows) if i % 2 == 0]


def test_build_splits_and_greater_than_takes_the_models_answers(tiny_llama):
    oracle_rows = get_task("greater_than").candidates(random.Random("greater_than-0"), 64)
    answers = {}
    for r in oracle_rows:
        clean, bad = check_row(tiny_llama, r)
        answers[tuple(clean)] = tiny_llama.token_id(r["good"][0])
        answers[tuple(bad)] = tiny_llama.token_id("0")
    rows = build(_Oracle(tiny_llama, answers), "greater_than", n=16)
    assert len(rows) == 16 and {r["split"] for r in rows} == set(SPLITS)
    assert all(r["target"] in r["good"] and r["foil"] == "0" for r in rows)
    with pytest.raises(MethodError, match="unknown task"):
        get_task("nope")


@pytest.mark.parametrize("path", sorted(DATA.glob("*.jsonl")), ids=lambda p: p.stem)
def test_committed_smollm2_sets_hold_their_invariants(smollm2, path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= 8 and {r["split"] for r in rows} <= set(SPLITS)
    for r in rows:
        assert check_row(smollm2, r) is not None, r
        assert _answer_changes(smollm2, r)
