"""Edge scores from Dual Path Attribution: one clean forward, one reference forward, one top-down pass.

DPA's top-down pass (shared/specs/dpa.md, ``attribution.dpa.engine``) carries a target vector t down the
residual stream: below each sublayer, t grows by that sublayer's update, which is a sum of terms, one per
*receiver input*: for head h of layer l

- value input:  T_v[j] = w_v  N_j^T W_V^h  sum_i A_ij m_i,   m_i = W_O^h t_i (t above layer l's attention)
- query input:  T_q[i] = w_q  N_i^T W_Q^h  R_i^T sum_j delta_ij k_j / sqrt(d_head)
- key input:    T_k[j] = w_k  N_j^T W_K^h  R_j^T sum_i delta_ij q_i / sqrt(d_head),  delta_ij = A_ij (m_i.v_j - m_i.z_i)

(N^T: the frozen norm transposed, R^T: RoPE undone), and for the MLP of layer l its up and gate paths
(T_mlp), for the logits the unembedding row(s) through the final norm (T_logits). The engine sums these
terms into one update; here each is kept apart. The target vector *at receiver R's input* is T_R, so
the DPA score of edge S -> R is

    score(S -> R) = sum over positions p of (out_S[p] - ref_S[p]) . T_R[p],

the sender's output (its change from the reference) carried to the prediction along the paths that go
through R only. Because t above a sender is exactly T_logits plus every T_R of the receivers above it,
a sender's edges sum to its DPA node score: sum over R of out_S . T_R = out_S . t(above S), which is the
DPA head score for a head (tests check this and a brute-force autograd reference per edge).
Cost: one forward for each of the clean and reference prompts and one top-down pass, the same for any
number of edges; the dot products with the sender outputs are one matmul per receiver group.

Variants (lines of the edge-method table): ``dpa_norm`` is this scorer with ``norm="aware"`` (each norm's
scale carried, ``attribution.dpa.linear.norm_back``); ``dpa_cf`` (``score_cf``) averages each receiver's
target over the clean and the counterfactual run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import torch
from jaxtyping import Float, Int

from attribution.dpa.linear import check_supported
from attribution.dpa.params import DPAParams
from attribution.dpa.steps import OFFSET_KEYS, Cache, Update, hook_names, init_target, top_down, without_grad
from circuits.counterfactual import PromptBatch, PromptSet
from circuits.graph import CircuitGraph
from circuits.intervene import EdgeProducts, References, head_slot, put_output, receiver_cols, sender_hooks
from core.errors import MethodError


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None, **params: Any) -> Float[torch.Tensor, " edge"]:
    return _score(model, graph, prompts, refs, on_step, cf=False, **params)


def score_cf(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
             on_step: Callable[[int], None] | None = None, **params: Any) -> Float[torch.Tensor, " edge"]:
    """Counterfactual-aware DPA: each receiver's target is the mean of DPA's targets on the clean run and on
    the counterfactual run (a two-point path integral, as EAP-IG's steps are a many-point one), the sender
    difference as in ``score``. Same explained metric (the clean prompt's target and foil) on both runs;
    one more top-down pass per batch. Needs counterfactuals."""
    if prompts.ablation != "corrupt":
        raise MethodError(f"dpa_cf needs counterfactual prompts (this prompt set uses {prompts.ablation} "
                          "ablation)")
    return _score(model, graph, prompts, refs, on_step, cf=True, **params)


def _score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
           on_step: Callable[[int], None] | None, cf: bool, **params: Any) -> Float[torch.Tensor, " edge"]:
    p = DPAParams.from_kwargs(**params)
    check_supported(model)
    total = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    for batch in prompts.batches:
        if prompts.ablation == "corrupt":  # DPA needs no gradient: clean and counterfactual share one forward
            out, cache = edge_forward(model, graph, torch.cat([batch.tokens, batch.corrupt]), p,
                                  2 * batch.size if cf else batch.size)
            diff = out[:, :batch.size].sub_(out[:, batch.size:])
        else:
            out, cache = edge_forward(model, graph, batch.tokens, p, batch.size)
            diff = out.sub_(refs.of(batch))  # in place: the buffer is ours
        diff.mul_(batch.real()[None, :, :, None])
        acc = EdgeProducts(graph, diff, out=total)
        del out, diff
        if cf:
            caches = [_rows(cache, 2 * batch.size, half) for half in (slice(0, batch.size), slice(batch.size, None))]
            targets = mean_targets(model, graph, batch, caches, p)
        else:
            targets = receiver_targets(model, graph, batch, cache, p)
        for n_up, cols, T in targets:
            acc.add(n_up, cols, T)
        acc.flush()
        if on_step:
            on_step(batch.size)
    return (graph.flat(total) / prompts.n_prompts).float()


def _take(x: torch.Tensor, n: int, rows: slice) -> torch.Tensor:
    """Rows of a cached tensor; per-head q/k norm scales come flattened: [batch * pos * heads, 1]."""
    if x.shape[0] != n:
        return x.reshape(n, -1, *x.shape[1:])[rows].reshape(-1, *x.shape[1:])
    return x[rows]


def _rows(cache: Cache, n: int, rows: slice) -> Cache:
    return {k: _take(v, n, rows) for k, v in cache.items()}


def edge_forward(model: Any, graph: CircuitGraph, tokens: Int[torch.Tensor, "batch pos"], p: DPAParams,
                 rows: int) -> tuple[Float[torch.Tensor, "sender batch pos d_model"], Cache]:
    """One forward: the sender outputs of every row, and DPA's cache (patterns, norm scales, MLP
    pre-activations) of the first ``rows`` (the clean prompts, then for dpa_cf their counterfactuals)."""
    n, seq = tokens.shape
    out = torch.zeros(len(graph.senders), n, seq, model.arch.d_model, device=model.device)
    cache: Cache = {}

    def keep(x, hook):
        cache[hook.name] = _take(x, n, slice(0, rows)).float()

    hooks = [(name, keep) for name in hook_names(model, p, ("head",))]
    hooks += sender_hooks(model, graph, lambda slot, x: put_output(out, slot, x))
    with torch.no_grad():
        model.run_with_hooks(tokens, fwd_hooks=hooks, return_type=None)
    return out, cache


def mean_targets(model: Any, graph: CircuitGraph, batch: PromptBatch, caches: list[Cache],
                 p: DPAParams) -> Iterator[tuple[int, slice, Float[torch.Tensor, "receiver batch pos d_model"]]]:
    """``receiver_targets`` averaged over several runs' caches (dpa_cf: the clean and the counterfactual
    run), the explained metric the batch's own on each; same layout, receiver by receiver."""
    for parts in zip(*(receiver_targets(model, graph, batch, c, p) for c in caches), strict=True):
        n_up, cols, T = parts[0]
        yield n_up, cols, sum((q[2] for q in parts[1:]), T) / len(parts)


def receiver_targets(model: Any, graph: CircuitGraph, batch: PromptBatch, cache: Cache,
                     p: DPAParams) -> Iterator[tuple[int, slice, Float[torch.Tensor, "receiver batch pos d_model"]]]:
    """Yield (n_upstream, receiver slice, T [receiver, batch, pos, d_model]) from the top of the model down:
    the logits first, then per layer its MLP input and its heads' q/k/v inputs (DPA's top-down loop,
    ``steps.top_down``, with the attention's update kept per receiver); each step under no_grad
    (``steps.without_grad``)."""
    return without_grad(_receiver_targets(model, graph, batch, cache, p))


def _receiver_targets(model: Any, graph: CircuitGraph, batch: PromptBatch, cache: Cache,
                      p: DPAParams) -> Iterator[tuple[int, slice, Float[torch.Tensor, "receiver batch pos d_model"]]]:
    encs = [SimpleNamespace(seq_len=int(last) + 1, query=int(last), target_id=int(t),
                            foil_id=None if batch.foil is None else int(f))
            for last, t, f in zip(batch.last, batch.target,
                                  batch.foil if batch.foil is not None else batch.target, strict=True)]
    offsets = {k: torch.zeros(batch.size, dtype=torch.float64) for k in OFFSET_KEYS}  # bias terms: not edges
    n_recv = len(graph.receivers)
    t, _ = init_target(model, encs, cache, offsets, p.norm_aware)
    yield len(graph.senders), slice(n_recv - 1, n_recv), t[None]
    for step in top_down(model, cache, t, p, offsets=offsets, per_head=True):
        if not isinstance(step, Update):
            continue
        cols = receiver_cols(graph, step.layer)
        if step.sublayer == "mlp":
            mlp = cols["mlp"]
            yield graph.upstream(graph.receivers[mlp]), slice(mlp, mlp + 1), step.update[None]
        else:
            base = int(cols["q"][0])
            yield head_slot(graph, step.layer), slice(base, base + step.update.shape[0]), step.update
