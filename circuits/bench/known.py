"""Known-circuit recovery on the toy zoo (MIB's InterpBench part): each method's AUROC at finding the edges
of a circuit whose answer is known.

MIB (MIB_circuit_track/evaluation.py lines 121-148, ``evaluate_area_under_roc``): for every fraction of the
grid the hypothesis is ``apply_greedy(pct * n_edges)`` (absolute scores, pruned; the greedy loop takes
ceil(pct * n) edges, EAP-IG graph.py lines 531-564), compared with the reference circuit edge by edge
(TPR, FPR); the AUROC is print_results.py's ``area_under_curve(FPR, TPR)`` (lines 19-25): trapezoids over
FPR divided by the last FPR, from the first grid point on. ``rank_auroc`` adds the threshold-free ROC AUC
of |score| (the probability that a known edge outranks an unknown one), which a tiny graph's coarse grid
resolves better.

Known circuits (from the toy zoo's tests, tests/test_circuits_edges.py):
- ioi-attn-2l1h: L1.H0 -> logits; L0.H0 -> L1.H0.q (query composition); embed -> L1.H0.q, L0.H0.q, L0.H0.v.
- markov-3h (order-4 chain, lags 1, 2, 4): embed -> logits (the current token); the lag heads H1 and H2
  read earlier tokens by value, attending by position: embed -> L0.H{1,2}.{q,k,v} and L0.H{1,2} -> logits.
- modadd-dense (the FFN toy: one layer, four heads, a ReLU MLP; "a b =" mod 41): Nanda et al. (2023)'s
  modular-addition circuit. The heads move a and b to "=" (embed -> L0.H*.k, which place the attention, and
  embed -> L0.H*.v, which carry the operands), the MLP combines them (L0.H* -> L0.mlp), and the MLP writes the
  answer (L0.mlp -> logits); the heads' direct path to the logits is not used. Checked here under the toy's
  counterfactual (another a b pair) with circuits.bench.forward.prompt_metrics on 80 test prompts: these 13
  of 23 edges alone keep 0.948 of the logit difference, the other 10 alone keep 0.000 (the q, embed -> MLP and
  embed -> logits edges carry no difference: "=" is the same token in both runs).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from jaxtyping import Bool, Float

from circuits.bench.metrics import GRID
from circuits.bench.select import greedy
from circuits.graph import CircuitGraph

KNOWN = {
    "ioi-attn-2l1h": [("L1.H0", "logits"), ("L0.H0", "L1.H0.q"), ("embed", "L1.H0.q"), ("embed", "L0.H0.q"),
                      ("embed", "L0.H0.v")],
    "markov-3h": [("embed", "logits")] + [(f"L0.H{h}", "logits") for h in (1, 2)]
    + [("embed", f"L0.H{h}.{r}") for h in (1, 2) for r in "qkv"],
    "modadd-dense": [("L0.mlp", "logits")] + [(f"L0.H{h}", "L0.mlp") for h in range(4)]
    + [("embed", f"L0.H{h}.{r}") for h in range(4) for r in "kv"],
}


def known_mask(graph: CircuitGraph, model: str) -> Bool[torch.Tensor, " edge"]:
    mask = torch.zeros(graph.n_edges, dtype=torch.bool)
    for src, dst in KNOWN[model]:
        mask[graph.edge_id(src, dst)] = True
    return mask


def mib_auroc(graph: CircuitGraph, scores: Float[torch.Tensor, " edge"],
              known: Bool[torch.Tensor, " edge"]) -> dict[str, Any]:
    tpr, fpr = [], []
    for pct in GRID:
        hyp = graph.prune_connected(greedy(graph, scores, math.ceil(pct * graph.n_edges), absolute=True))
        tp, fp = int((hyp & known).sum()), int((hyp & ~known).sum())
        tpr.append(tp / int(known.sum()))
        fpr.append(fp / int((~known).sum()))
    area = sum((fpr[i + 1] - fpr[i]) / fpr[-1] * (tpr[i] + tpr[i + 1]) / 2 for i in range(len(fpr) - 1))
    return {"auroc": float(area), "tpr": tpr, "fpr": fpr}


def rank_auroc(scores: Float[torch.Tensor, " edge"], known: Bool[torch.Tensor, " edge"]) -> float:
    """P(|score| of a known edge > that of an unknown one), ties counting half."""
    s = scores.abs().double()
    pos, neg = s[known], s[~known]
    greater = (pos[:, None] > neg[None]).double().mean()
    ties = (pos[:, None] == neg[None]).double().mean()
    return float(greater + ties / 2)
