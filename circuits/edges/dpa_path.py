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

Cost per batch: one forward of the clean and reference prompts (as dpa), then the ``steps`` points as one
batch: one forward of the ``steps - 1`` interior points (no gradient; the prompts repeated, one interpolation
per copy), one top-down pass over all ``steps`` copies, their targets summed before one round of edge products.
Points go ``ROWS`` prompt rows at a time, so memory stays bounded (DPA's cache holds each row's patterns, norm
scales and MLP pre-activations: about 8 MB a row on smollm2-135m at 20 positions); at the benchmark's 8
prompts a batch, steps up to 16 are one pass. The work itself (rows x layers) is what it was: a row of a
point costs a no-grad forward and a top-down pass, EAP-IG's a forward and a backward
(results/circuits/time_breakdown.md has the measured share). ``steps`` runs from 1 to ``MAX_STEPS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float

from attribution.dpa.linear import check_supported
from attribution.dpa.params import DPAParams
from attribution.dpa.steps import Cache, hook_names
from circuits.counterfactual import PromptBatch, PromptSet
from circuits.edges.dpa import edge_forward, receiver_targets
from circuits.graph import CircuitGraph
from circuits.intervene import EdgeProducts, References
from core.errors import MethodError

MAX_STEPS = 256  # points on the path: each is a forward and a top-down pass per batch
ROWS = 128  # prompt rows per forward and top-down pass over a group of points (16 points of 8 prompts: one)


def check_steps(steps: Any) -> int:
    """The number of points as a whole number from 1 to MAX_STEPS; MethodError (one line) otherwise."""
    if isinstance(steps, bool) or not isinstance(steps, int | float) or not float(steps).is_integer():
        raise MethodError(f"dpa_path steps must be a whole number from 1 to {MAX_STEPS} (got {steps!r})")
    if not 1 <= int(steps) <= MAX_STEPS:
        raise MethodError(f"dpa_path steps must be a whole number from 1 to {MAX_STEPS} (got {steps!r})")
    return int(steps)


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None, steps: int = 4, **params: Any) -> Float[torch.Tensor, " edge"]:
    steps = check_steps(steps)
    p = DPAParams.from_kwargs(**params)
    check_supported(model)
    total = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    for batch in prompts.batches:
        if prompts.ablation == "corrupt":  # clean and counterfactual in one forward, as dpa
            out, cache = edge_forward(model, graph, torch.cat([batch.tokens, batch.corrupt]), p, batch.size)
            ref_embed = out[0, batch.size:].clone()  # the counterfactual's embedding: the path's start
            diff = out[:, :batch.size].sub_(out[:, batch.size:])
        else:
            out, cache = edge_forward(model, graph, batch.tokens, p, batch.size)
            ref = refs.of(batch)
            ref_embed = ref[0]
            diff = out.sub_(ref)
        diff.mul_(batch.real()[None, :, :, None])
        acc = EdgeProducts(graph, diff, out=total)
        del out, diff
        if steps == 1:  # dpa's own computation, bit for bit
            for n_up, cols, T in receiver_targets(model, graph, batch, cache, p):
                acc.add(n_up, cols, T)
        else:
            _add_path_targets(model, graph, batch, cache, ref_embed, steps, p, acc)
        acc.flush()
        if on_step:
            on_step(batch.size)
    return (graph.flat(total) / prompts.n_prompts).float()


def _add_path_targets(model: Any, graph: CircuitGraph, batch: PromptBatch, clean: Cache,
                      ref_embed: Float[torch.Tensor, "#batch #pos d_model"], steps: int, p: DPAParams,
                      acc: EdgeProducts) -> None:
    """Add the mean over the path's points of every receiver's target to ``acc``: the points in groups of
    ``ROWS // batch`` copies of the batch, each group one forward (the interior points) and one top-down pass,
    its targets summed over the copies; alpha = 1 takes the clean run's cache."""
    alphas = [k / steps for k in range(steps, 0, -1)]  # alpha = 1 first: the clean run
    per = max(1, ROWS // batch.size)
    for start in range(0, steps, per):
        group = alphas[start:start + per]
        interior = [a for a in group if a != 1.0]
        caches = [clean] if len(interior) < len(group) else []
        if interior:
            caches.append(_path_cache(model, batch, ref_embed, interior, p))
        copies = len(group)
        cache = caches[0] if len(caches) == 1 else {k: torch.cat([c[k] for c in caches]) for k in caches[0]}
        big = PromptBatch(tokens=batch.tokens.repeat(copies, 1), last=batch.last.repeat(copies),
                          target=batch.target.repeat(copies),
                          foil=None if batch.foil is None else batch.foil.repeat(copies), corrupt=None, rows=[])
        for n_up, cols, T in receiver_targets(model, graph, big, cache, p):
            T = T.view(T.shape[0], copies, batch.size, *T.shape[2:]).sum(1)
            acc.add(n_up, cols, T / steps)
        acc.flush()  # before the next group: one flush must not name a receiver twice (its += keeps one)
        del cache, caches


def _path_cache(model: Any, batch: PromptBatch, ref_embed: Float[torch.Tensor, "#batch #pos d_model"],
                alphas: list[float], p: DPAParams) -> Cache:
    """DPA's cache (patterns, norm scales, MLP pre-activations) of the runs whose residual stream starts from
    ``ref_embed + alpha (clean embedding - ref_embed)``, one copy of the batch per alpha (copy-major rows)."""
    cache: Cache = {}
    copies = len(alphas)
    alpha = torch.tensor(alphas, device=ref_embed.device).repeat_interleave(batch.size)[:, None, None]
    start = ref_embed if ref_embed.shape[0] == 1 else ref_embed.repeat(copies, 1, 1)

    def interpolate(x, hook):
        return (start + alpha * (x.float() - start)).to(x.dtype)

    def keep(x, hook):
        cache[hook.name] = x.float()

    hooks = [("blocks.0.hook_resid_pre", interpolate)]  # first, so a cached resid_pre is the interpolated one
    hooks += [(name, keep) for name in hook_names(model, p, ("head",))]
    with torch.no_grad():
        model.run_with_hooks(batch.tokens.repeat(copies, 1), fwd_hooks=hooks, return_type=None)
    return cache
