"""DPA integrated along the path from the reference (counterfactual) run to the clean run: ``dpa_path``.

DPA (``circuits.edges.dpa``) freezes the model's nonlinearities (attention patterns, norm scales, MLP
activation ratios) at *one* run, the clean one, and carries the target (the clean prompt's target minus foil
logit) down to every receiver input. ``dpa_cf`` averages the targets of two runs, the clean and the
counterfactual one. ``dpa_path`` averages them over ``steps`` points of the straight path between the two,
as EAP-IG averages gradients:

- **A point on the path** is the forward pass whose residual stream starts (at ``blocks.0.hook_resid_pre``,
  token plus positional embedding) from ``e(alpha) = e_ref + alpha (e_clean - e_ref)``, with
  ``alpha = k / steps`` for k = 1 .. steps (EAP-IG's points, ``circuits.edges.eap_ig``), e_ref the
  counterfactual prompt's embedding (corrupt ablation) or the reference embedding (mean / zero ablation).
  Everything downstream of the embedding is that run's own: its patterns, norm scales and MLP
  pre-activations are the frozen state DPA's decomposition uses there.
- **At each point** DPA's top-down pass gives the target T_R(alpha) at every receiver input, for the same
  explained metric at every point: the clean prompt's target minus foil logit difference (its target logit
  without a foil).
- **The score** of edge S -> R is ``sum over positions of (out_S(clean) - out_S(reference)) . mean_k
  T_R(alpha_k)``: the sender difference is DPA's (clean minus counterfactual outputs), the target the mean
  over the path. Node scores are the edges summed per sender, as for every edge method.

``alpha = 1`` is the clean run itself (its cache comes from the same forward as the sender outputs, no
interpolation), so ``steps=1`` is ``dpa`` exactly, bit for bit. On a model that is linear along the path
(no nonlinearity between the interpolated embedding and the logits, e.g. an attention-only toy whose
patterns do not depend on the input, no norms) with DPA's exact weights (w_v=1, w_q=w_k=0) every point
gives the same targets and the score is the exact effect of patching the edge; with w_q=w_k=w_v=1 on an
attention-only model without norms DPA's target is the gradient, and ``dpa_path`` equals ``eap_ig`` at the
same steps (tests/test_dpa_path.py checks all three).

Cost per batch: one forward of the clean and reference prompts (as dpa), ``steps - 1`` forwards at the
interior points (no gradient), ``steps`` top-down passes and ``steps`` rounds of edge products; the points
are taken one at a time, so memory is dpa's whatever ``steps`` is. ``steps`` runs from 1 to ``MAX_STEPS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attribution.dpa.linear import check_supported
from attribution.dpa.params import DPAParams
from attribution.dpa.steps import hook_names
from circuits.counterfactual import PromptBatch, PromptSet
from circuits.edges.dpa import _forward, receiver_targets
from circuits.graph import CircuitGraph
from circuits.intervene import EdgeProducts, References
from workbench.errors import MethodError

MAX_STEPS = 256  # points on the path: each is a forward and a top-down pass per batch


def check_steps(steps: Any) -> int:
    """The number of points as a whole number from 1 to MAX_STEPS; MethodError (one line) otherwise."""
    if isinstance(steps, bool) or not isinstance(steps, int | float) or not float(steps).is_integer():
        raise MethodError(f"dpa_path steps must be a whole number from 1 to {MAX_STEPS} (got {steps!r})")
    if not 1 <= int(steps) <= MAX_STEPS:
        raise MethodError(f"dpa_path steps must be a whole number from 1 to {MAX_STEPS} (got {steps!r})")
    return int(steps)


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None, steps: int = 4, **params: Any) -> torch.Tensor:
    steps = check_steps(steps)
    p = DPAParams.from_kwargs(**params)
    check_supported(model)
    total = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    for batch in prompts.batches:
        if prompts.ablation == "corrupt":  # clean and counterfactual in one forward, as dpa
            out, cache = _forward(model, graph, torch.cat([batch.tokens, batch.corrupt]), p, batch.size)
            ref_embed = out[0, batch.size:].clone()  # the counterfactual's embedding: the path's start
            diff = out[:, :batch.size].sub_(out[:, batch.size:])
        else:
            out, cache = _forward(model, graph, batch.tokens, p, batch.size)
            ref = refs.of(batch)
            ref_embed = ref[0]
            diff = out.sub_(ref)
        diff.mul_(batch.real()[None, :, :, None])
        acc = EdgeProducts(graph, diff, out=total)
        del out, diff
        for k in range(steps, 0, -1):  # alpha = 1 (the clean cache above) first, then down the path
            point = cache if k == steps else _path_cache(model, batch, ref_embed, k / steps, p)
            for n_up, cols, T in receiver_targets(model, graph, batch, point, p):
                acc.add(n_up, cols, T / steps if steps > 1 else T)
            acc.flush()
            del point
        if on_step:
            on_step(batch.size)
    return (graph.flat(total) / prompts.n_prompts).float()


def _path_cache(model: Any, batch: PromptBatch, ref_embed: torch.Tensor, alpha: float,
                p: DPAParams) -> dict[str, torch.Tensor]:
    """DPA's cache (patterns, norm scales, MLP pre-activations) of the run whose residual stream starts from
    ``ref_embed + alpha (clean embedding - ref_embed)``."""
    cache: dict[str, torch.Tensor] = {}

    def interpolate(x, hook):
        return (ref_embed + alpha * (x.float() - ref_embed)).to(x.dtype)

    def keep(x, hook):
        cache[hook.name] = x.float()

    hooks = [("blocks.0.hook_resid_pre", interpolate)]  # first, so a cached resid_pre is the interpolated one
    hooks += [(name, keep) for name in hook_names(model, p, ("head",))]
    with torch.no_grad():
        model.run_with_hooks(batch.tokens, fwd_hooks=hooks, return_type=None)
    return cache
