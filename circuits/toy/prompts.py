"""Prompt sets with counterfactuals for the toy zoo, built from each model's own task.

- ioi (``ioi-attn-*``): the test prompts "A and B then B"; counterfactual: IO and S swapped everywhere,
  which leaves the first clause as it was and changes only the repeated name (the query), so the answer
  flips; metric: logit(IO) - logit(S).
- markov (``markov-3h``): test sequences; counterfactual: the sequence with its last four positions drawn
  afresh (the symbols the lags 1, 2 and 4 read); target: the true chain's most likely next symbol, foil:
  the counterfactual's (rows where they agree are left out), so the answer flips.
- modadd (``modadd-*``): "a b =" test pairs; counterfactual: another test pair, foil: its answer.
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Int

from core.errors import MethodError
from core.models.toy_tasks import get_task

TASKS = ("ioi", "markov", "modadd")


def task_rows(model: Any, n: int | None = None, seed: int = 0) -> list[dict]:
    """Rows {"prompt": ids, "target": id, "foil": id, "corrupt": ids} for a toy model's task."""
    info = (model.info or {}).get("task")
    if not info or info.get("task") not in TASKS:
        raise MethodError(f"{model.name} has no task with built-in counterfactuals (toy tasks: {', '.join(TASKS)}); "
                          "give a prompt file with \"corrupt\" rows")
    task = get_task(info["task"], **info["params"])
    build = {"ioi": _ioi, "markov": _markov, "modadd": _modadd}[info["task"]]
    rows = build(task, seed)
    return rows[:n] if n else rows


def _ioi(task: Any, seed: int) -> list[dict]:
    b = task.batch("test")
    bad = task.corrupt(b)
    return [{"prompt": b.tokens[i].tolist(), "target": int(b.meta["io"][i]), "foil": int(b.meta["s"][i]),
             "corrupt": bad.tokens[i].tolist()} for i in range(len(b.tokens))]


def _markov(task: Any, seed: int, n: int = 200, resample: int = 4) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    tokens = task.batch("test", n, seed=seed).tokens
    seq = tokens.shape[1]
    corrupt = tokens.clone()
    corrupt[:, seq - resample:] = torch.randint(0, task.n_symbols, (tokens.shape[0], resample), generator=gen)

    # the chain's most likely next symbol (reads x[:, seq - lag])
    def best(x: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, " batch"]:
        return task.next_logits(torch.cat([x, x[:, -1:]], 1), seq).argmax(-1)

    target, foil = best(tokens), best(corrupt)
    return [{"prompt": tokens[i].tolist(), "target": int(target[i]), "foil": int(foil[i]),
             "corrupt": corrupt[i].tolist()} for i in range(tokens.shape[0]) if int(target[i]) != int(foil[i])]


def _modadd(task: Any, seed: int) -> list[dict]:
    b = task.batch("test", 300, seed=seed)
    perm = torch.randperm(len(b.tokens), generator=torch.Generator().manual_seed(seed + 1))
    rows = []
    for i, j in enumerate(perm.tolist()):
        target, foil = int(b.targets[i, 2]), int(b.targets[j, 2])
        if target != foil:
            rows.append({"prompt": b.tokens[i].tolist(), "target": target, "foil": foil,
                         "corrupt": b.tokens[j].tolist()})
    return rows
