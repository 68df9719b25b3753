"""Sharding over items and corpus shards (issue 16): activation patching computed in item ranges, and SAE
activation caching computed shard by shard, give exactly the single-process numbers and files; one Ray test
checks two local workers against one process for both."""

from __future__ import annotations

import pytest

PROMPT = "the cat sat on a mat and the dog ran to"


def _enc(model):
    top = model.logits(model.to_tokens(PROMPT))[0, -1].topk(2).indices.tolist()
    return model.encode(PROMPT, model.decode([top[0]]), model.decode([top[1]]))


@pytest.mark.parametrize("level,per_position", [("head", False), ("neuron", False), ("head", True)])
def test_patching_ranges_add_up_to_the_whole(tiny_llama, one_thread, level, per_position):
    import math

    import torch

    from attribution.baselines.patching import item_shape, patching_scores
    from workbench.jobs.kinds import split

    enc = _enc(tiny_llama)
    args = dict(level=level, per_position=per_position, batch_size=2)
    whole = patching_scores(tiny_llama, enc, **args)
    n = math.prod(item_shape(tiny_llama, enc.seq_len, level, per_position))
    ranges = split(n, 3, 2)
    assert len(ranges) == 3 and all(a % 2 == 0 for a, _ in ranges)
    parts = [patching_scores(tiny_llama, enc, items=r, **args) for r in ranges]
    total = sum(p.scores for p in parts[1:]) + parts[0].scores
    assert torch.equal(total, whole.scores) and whole.scores.abs().sum() > 0
    assert all(p.target_logit == whole.target_logit for p in parts)
    with pytest.raises(Exception, match="out of range"):
        patching_scores(tiny_llama, enc, items=(0, n + 1), **args)


def test_attribute_job_parts_merge_to_the_single_run(tiny_llama_dir, one_thread):
    """The attribute kind's shards (k of K), run here one after another, finish into the one-shard result."""
    import torch

    import workbench as wb
    from workbench.jobs.kinds import get_kind
    from workbench.jobs.runner import Report

    model = wb.load(str(tiny_llama_dir))
    enc = _enc(model)
    spec = {"kind": "attribute", "model": str(tiny_llama_dir), "prompt": PROMPT, "target": enc.target,
            "foil": enc.foil, "method": "activation_patching", "level": "neuron", "position": None,
            "params": {"batch_size": 16}}
    kind = get_kind("attribute")
    steps = []
    report = Report(lambda n: None, steps.append)

    def run(workers):
        shards = kind.shards(spec, workers)
        return kind.finish(spec, [kind.run_shard(spec, s, report) for s in shards])

    one, three = run(1), run(3)
    assert torch.equal(one.scores, three.scores) and one.scores.abs().sum() > 0
    assert sum(steps) == 2 * kind.items(spec) == 2 * 2 * 64
    assert kind.cost_key(spec).startswith(f"{tiny_llama_dir}|activation_patching|neuron|0|")
    assert kind.measure(spec) > 0
    dpa = {**spec, "method": "dpa", "level": "head"}
    assert kind.shards(dpa, 4) == [(0, 1)] and kind.items(dpa) == 1
