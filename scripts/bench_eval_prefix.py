"""Evaluation before/after prefix reuse: MIB's grid of one task's EAP edge curve, whole forwards vs the shared
prefix run once (circuits/bench/forward.py PrefixReuse), alternated twice; CPR, CMD and curves compared.

    OMP_NUM_THREADS=1 python scripts/bench_eval_prefix.py MODEL TASK N_TEST
"""

from __future__ import annotations

import functools
import sys
import time

import torch


def main() -> None:
    from circuits.bench import forward, runner
    from core.models.zoo import load

    torch.set_num_threads(1)
    name, task, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3])
    m = load(name)
    cfg = runner.BenchConfig(model=name, tasks=[task], methods=["eap"], levels=["edge"], n_test=n_test)
    setup = runner.prepare_task(m, task, cfg)
    edge, chunks = runner.score_edges(m, setup.graph, "eap", setup.p_train, setup.refs_train, 0)
    node = runner.mib.node_scores_of(setup.graph, edge)
    whole_forwards = forward.prompt_metrics
    seen: dict[bool, list] = {}
    for reuse in (False, True, False, True):
        runner.prompt_metrics = functools.partial(whole_forwards, reuse_prefix=reuse)
        started = time.perf_counter()
        r = runner.evaluate_level(m, setup.graph, setup.p_test, setup.refs_test, setup.ends, "edge", edge, node,
                                  chunks, cfg)
        print(task, "reuse" if reuse else "whole", round(time.perf_counter() - started, 1), r["n_forwards"],
              r["cpr"], r["cmd"], flush=True)
        seen.setdefault(reuse, []).append((r["cpr"], r["cmd"], r["curves"]))
    print("identical:", seen[True][0] == seen[False][0])


if __name__ == "__main__":
    main()
