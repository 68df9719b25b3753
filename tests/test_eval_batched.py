"""The benchmark's batched evaluation (circuits/bench/forward.py TaskForwards, runner.evaluate_draws): the test
prompts' counterfactual runs and shared prefixes made once per task, every grid size of a method (and every
random draw) stacked along the batch of one forward. Every stored figure of one task's cells, all methods,
all grid sizes, both levels, equals the unbatched evaluation's to float rounding."""

from __future__ import annotations

import json
import math

import pytest
import torch

from circuits.bench.runner import BenchConfig, run_task

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ["Mary", "John", "Anna", "Tom", "Kate", "Paul"]


def _rows():
    rows = []
    for i in range(12):
        a, b = NAMES[i % 6], NAMES[(i + 1) % 6]
        rows.append({"prompt": f"When {a} and {b} went to the store, {b} gave a drink to",
                     "corrupt": f"When {a} and {b} went to the store, {a} gave a drink to",
                     "target": f" {a}", "foil": f" {b}", "split": "train" if i < 5 else "test"})
    return rows


def _close(a, b, path=""):
    """Every number of two results equal to float rounding (ints exactly), the same keys and lengths."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            if k not in ("eval_seconds", "seconds", "ends_seconds"):  # timings differ by design
                _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_batched_evaluation_equals_the_unbatched_one(tiny_llama, tmp_path):
    path = tmp_path / "ioi_like.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    cfg = BenchConfig(model="tiny", tasks=[str(path)], n_train=4, n_test=7, n_patch=4, batch_size=4,
                      methods=["random", "eap", "eap_ig", "dpa", "dpa_path:steps=3", "activation_patching"],
                      levels=["edge", "node"], patch_sample=4, random_seeds=3, n_boot=50, filter_rows=False)
    old = run_task(tiny_llama, str(path), cfg, batched=False)
    new = run_task(tiny_llama, str(path), cfg, batched=True)
    _close(old, new)
    eap = new["methods"]["eap"]["levels"]["edge"]
    assert eap["n_forwards"] > 5 and len(eap["curves"]["cpr"]["faithfulness"]) == len(cfg.grid)
    assert len(new["methods"]["random"]["levels"]["edge"]["seeds"]) == 3
    # the figures vary with the circuits: not every size gives the whole model's or the empty circuit's metric
    f = eap["curves"]["cpr"]["faithfulness"]
    assert len({round(x, 6) for x in f}) > 2


def test_stacked_forwards_equal_one_mask_at_a_time(tiny_llama):
    from circuits.bench.forward import TaskForwards, prompt_metrics
    from circuits.bench.prompts import task_prompts
    from circuits.graph import CircuitGraph
    from circuits.intervene import References

    g = CircuitGraph.of(tiny_llama)
    ps = task_prompts(tiny_llama, _rows()[5:], "logit_diff", 3)
    refs = References(tiny_llama, g, ps)
    gen = torch.Generator().manual_seed(1)
    fractions = torch.tensor([[0.001], [0.01], [0.1], [0.3], [0.6], [0.9]])
    keep = torch.rand(6, g.n_edges, generator=gen) < fractions
    one = prompt_metrics(tiny_llama, g, ps, refs, keep, reuse_prefix=False)
    forwards = TaskForwards(tiny_llama, g, ps, refs, budget_mb=0.05)  # a small budget: several chunks
    assert forwards.copies(len(forwards.parts[0][3][0])) < 6
    assert torch.allclose(forwards.metrics(keep), one, atol=1e-5, rtol=1e-5)
    assert torch.allclose(TaskForwards(tiny_llama, g, ps, refs).metrics(keep), one, atol=1e-5, rtol=1e-5)
