"""Masked forwards for the benchmark: per-prompt metrics of many circuits, and node-level activation patching.

``circuits.intervene.run_masked`` applies a mask as sparse (sender, receiver) lists, which is fast for the
small circuits of a discovery curve (tens to thousands of edges) but slow for MIB's grid, whose circuits
hold 0.1% to 100% of the edges (on smollm2 a random 10% mask took ~60 s per 16 prompts, 50% ~190 s).
Here every receiver group reads ``ablated[:, :n_up, cols]^T @ diff[:, :n_up]`` as one batched matrix
product, whose cost does not depend on how many edges are kept. The semantics are run_masked's (a receiver
reads ``x_R - sum_S (1 - keep[S, R]) (out_S - ref_S)``); a test checks the two agree.

The positions a batch shares with its counterfactuals (IOI up to S2, the arithmetic and MCQA tasks' solved
example and question) carry no ablation, so ``prompt_metrics`` runs them once per batch and every masked
forward only the suffix, against their cached keys and values (``PrefixReuse``; TransformerLens models).
Measured on smollm2-135m, MIB's grid for EAP's edge scores (18 forwards, 8 test prompts): mcqa 215-316 s
-> 46-85 s, the same CPR, CMD and curves to the last digit (tests/test_bench_prefix.py holds it on a GQA model).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Bool, Float, Int

from circuits.counterfactual import PromptBatch, PromptSet
from circuits.graph import CircuitGraph
from circuits.intervene import (
    Reference,
    References,
    head_slot,
    live_reference,
    receiver_hooks,
    run_masked,
    sender_hooks,
)


def run_masked_dense(model: Any, graph: CircuitGraph, batch: PromptBatch, ref: Reference | None,
                     keep: Bool[torch.Tensor, "copy edge"], metric: str,
                     live: tuple[Int[torch.Tensor, " live"], Int[torch.Tensor, " live"],
                                 Float[torch.Tensor, "sender live d_model"]] | None = None,
                     last_only: bool = False) -> Float[torch.Tensor, "copy batch"]:
    """The metric per prompt with only each copy's kept edges intact (one forward for all copies); the
    ablation is applied at the live positions only (identical prefixes, e.g. a task's solved example,
    cost nothing). ``live``: ``live_reference(model, batch, ref)`` when the caller keeps it (then ``ref`` is
    not read). ``last_only``: the final norm and unembedding at each prompt's last position only (the metric
    reads nothing else; on smollm2 the unembedding is a fifth of a position's multiply-adds)."""
    copies = int(keep.shape[0])
    n, seq = batch.tokens.shape
    d = model.arch.d_model
    lb, lp, ref_live = live if live is not None else live_reference(model, batch, ref)
    n_live = len(lb)
    dense = torch.stack([graph.mask_dense(k) for k in keep])  # [copy, S, R]
    ablated = (graph.valid[None] & ~dense).float().to(model.device)
    diff = torch.zeros(copies, len(graph.senders), n_live * d, device=model.device)  # out_S - ref_S, live only

    def write(slot, x):
        if x.dim() == 4:  # heads: [head, copy x b, p, d] -> [copy, head, live*d]
            change = x.float().view(x.shape[0], copies, n, seq, d)[:, :, lb, lp].transpose(0, 1) - ref_live[slot][None]
            diff[:, slot] = change.reshape(copies, x.shape[0], -1)
        else:
            change = x.float().view(copies, n, seq, d)[:, lb, lp] - ref_live[slot][None]
            diff[:, slot] = change.reshape(copies, -1)

    def read(x, cols, n_up):
        cols_t = torch.as_tensor(cols, device=model.device).reshape(-1)
        a = ablated[:, :n_up][:, :, cols_t]  # [copy, n_up, cols]
        delta = torch.bmm(a.transpose(1, 2), diff[:, :n_up]).view(copies, len(cols_t), n_live, d)
        out = x.clone()
        if x.dim() == 4:  # [copy x b, p, head, d]
            view = out.view(copies, n, seq, x.shape[2], d)
            view[:, lb, lp] -= delta.permute(0, 2, 1, 3).to(x.dtype)
        else:
            view = out.view(copies, n, seq, d)
            view[:, lb, lp] -= delta[:, 0].to(x.dtype)
        return out

    hooks = sender_hooks(model, graph, write) + receiver_hooks(graph, read)
    with torch.no_grad(), model.split_inputs():
        if last_only and _takes_cache(getattr(model, "tl", None)):
            return last_metric(model, batch, batch.tokens.repeat(copies, 1), hooks, metric).view(copies, n)
        logits = model.run_with_hooks(batch.tokens.repeat(copies, 1), fwd_hooks=hooks)
    return batch.metric(logits, metric).view(copies, n)


def last_metric(model: Any, batch: PromptBatch, tokens: Int[torch.Tensor, "row pos"], hooks: list[Any],
                 metric: str) -> Float[torch.Tensor, " row"]:
    """The metric of every row (copies of ``batch``) from the residual stream at its last position: the blocks
    run with ``hooks``, then the final norm, unembedding and soft cap (TransformerLens' own modules, as its
    forward applies them) at that position alone."""
    import dataclasses

    resid = model.run_with_hooks(tokens, fwd_hooks=hooks, stop_at_layer=model.arch.n_layers)
    copies = tokens.shape[0] // batch.size
    x = resid[torch.arange(tokens.shape[0]), batch.last.repeat(copies)][:, None]  # [row, 1, d_model]
    logits = model.forward_logits(x)
    at_zero = dataclasses.replace(batch, last=torch.zeros_like(batch.last))
    return at_zero.metric(logits, metric)


def sparse_enough(graph: CircuitGraph, mask: Bool[torch.Tensor, " edge"], limit: float = 0.02) -> bool:
    """Whether run_masked's sparse lists beat the dense product: few edges kept or few ablated."""
    kept = int(mask.sum())
    return min(kept, graph.n_edges - kept) <= limit * graph.n_edges


def shared_prefix(batch: PromptBatch) -> int:
    """How many leading positions every prompt of the batch shares with its counterfactual: no ablation
    reaches them (every sender's output there is its reference), so a masked forward need not recompute them."""
    if batch.corrupt is None:
        return 0
    differs = (batch.tokens != batch.corrupt).cpu()
    if not bool(differs.any(1).all()):
        return 0
    return int(differs.int().argmax(1).min())


class PrefixReuse:
    """The model with a batch's shared prefix run once: its keys and values are kept (TransformerLens'
    key-value cache, frozen) and every later forward of the batch's suffix, in any number of copies, attends
    to them, so a grid of masked forwards pays for the prefix once. Everything else is the model's own.

    Only a TransformerLens ``HookedTransformer`` takes a cache; ``of`` returns None for other backends (and
    for a batch without a shared prefix), whose forwards then run whole as before."""

    def __init__(self, model: Any, prefix: torch.Tensor, cache: Any) -> None:
        self._model, self._prefix, self._cache = model, prefix, cache

    @classmethod
    def of(cls, model: Any, batch: PromptBatch) -> tuple[PrefixReuse, PromptBatch, int] | None:
        """(the model with the prefix cached, the batch's suffix, the prefix length) or None."""
        import dataclasses

        n_prefix = shared_prefix(batch)
        tl = getattr(model, "tl", None)
        if n_prefix < 1 or tl is None or not _takes_cache(tl):
            return None
        prefix = batch.tokens[:, :n_prefix]
        with torch.no_grad(), model.split_inputs():  # the same computation path as the masked forwards
            cfg = tl.cfg
            group = 1 if cfg.n_key_value_heads is None else cfg.n_heads // cfg.n_key_value_heads
            empty = torch.empty(prefix.shape[0], 0, cfg.n_heads, cfg.d_head, device=prefix.device, dtype=cfg.dtype)
            entries = [_PrefixEntry(empty, empty, group) for _ in range(cfg.n_layers)]
            tl(prefix, past_kv_cache=_cache(entries, torch.ones_like(prefix)), attention_mask=torch.ones_like(prefix),
               return_type=None)
            for e in entries:
                e.frozen = True
        cache = [(e.keys, e.values) for e in entries]
        suffix = dataclasses.replace(batch, tokens=batch.tokens[:, n_prefix:],
                                     corrupt=batch.corrupt[:, n_prefix:], last=batch.last - n_prefix)
        return cls(model, prefix, cache), suffix, n_prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def run_with_hooks(self, tokens: Int[torch.Tensor, "row pos"], fwd_hooks=(), bwd_hooks=(), **kwargs: Any) -> Any:
        copies = tokens.shape[0] // self._prefix.shape[0]
        group = self._model.arch.n_heads // self._model.arch.n_kv_heads  # query heads a kv-head serves
        entries = [_PrefixEntry(k.repeat(copies, 1, 1, 1), v.repeat(copies, 1, 1, 1), group, frozen=True)
                   for k, v in self._cache]
        cache = _cache(entries, torch.ones_like(self._prefix).repeat(copies, 1))
        return self._model.run_with_hooks(tokens, fwd_hooks=fwd_hooks, bwd_hooks=bwd_hooks, past_kv_cache=cache,
                                          attention_mask=torch.ones_like(tokens), **kwargs)


class _PrefixEntry:
    """One layer's cached keys and values, held with one head per query head. Split head inputs ungroup
    grouped kv-heads (each query head computes its own key from its own input), which TransformerLens' cache
    entries cannot hold (its offset check wants the kv-head count): ``past_keys`` shows one head per group,
    all that check and the position offset read; ``append`` returns every head."""

    def __init__(self, keys: Float[torch.Tensor, "batch pos head d_head"],
                 values: Float[torch.Tensor, "batch pos head d_head"], group: int, frozen: bool = False) -> None:
        self.keys, self.values, self.group, self.frozen = keys, values, group, frozen

    @property
    def past_keys(self) -> Float[torch.Tensor, "batch pos kv_head d_head"]:
        return self.keys[:, :, ::self.group]

    def append(self, keys: Float[torch.Tensor, "batch new head d_head"],
               values: Float[torch.Tensor, "batch new head d_head"],
               ) -> tuple[Float[torch.Tensor, "batch pos head d_head"], Float[torch.Tensor, "batch pos head d_head"]]:
        k, v = torch.cat([self.keys, keys], dim=1), torch.cat([self.values, values], dim=1)
        if not self.frozen:
            self.keys, self.values = k, v
        return k, v


def _cache(entries: list[_PrefixEntry], mask: torch.Tensor) -> Any:
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    frozen = all(e.frozen for e in entries)
    return TransformerLensKeyValueCache(entries=entries, frozen=frozen,  # type: ignore[arg-type]
                                        previous_attention_mask=mask[:, :0] if not frozen else mask.int())


def _takes_cache(tl: Any) -> bool:
    try:
        from transformer_lens import HookedTransformer
    except ImportError:
        return False
    return isinstance(tl, HookedTransformer)


def suffix_reference(ref: Reference, n_prefix: int) -> Float[torch.Tensor, " sender #batch #suffix d_model"]:
    """A batch's reference outputs [sender, batch, pos, d] from ``n_prefix`` on (a mean reference, one
    position for all, stays as it is)."""
    return ref[:, :, n_prefix:] if ref.dim() == 4 and ref.shape[2] > 1 else ref


def prompt_metrics(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
                   masks: Bool[torch.Tensor, "mask edge"], copies: int = 2,
                   on_step: Callable[[int], None] | None = None,
                   reuse_prefix: bool = True) -> Float[torch.Tensor, "mask prompt"]:
    """The metric of every prompt (in prompt-set order) with only each mask's edges intact. Masks that keep
    or ablate few edges go through ``run_masked``'s sparse lists, the others through the dense product.
    With ``reuse_prefix`` the positions a batch shares with its counterfactuals run once for all masks
    (``PrefixReuse``); the figures are the whole forwards' to float rounding (a test holds it)."""

    out = torch.zeros(masks.shape[0], prompts.n_prompts, dtype=torch.float64)
    sparse = [i for i in range(masks.shape[0]) if sparse_enough(graph, masks[i])]
    dense = [i for i in range(masks.shape[0]) if i not in set(sparse)]
    for batch in prompts.batches:
        ref = refs.of(batch)
        rows = torch.tensor(batch.rows)
        runner, part = model, batch
        reuse = PrefixReuse.of(model, batch) if reuse_prefix and masks.shape[0] else None
        if reuse is not None:
            runner, part, n_prefix = reuse
            ref = suffix_reference(ref, n_prefix)
        for group, run, size in ((sparse, run_masked, 4), (dense, run_masked_dense, copies)):
            for start in range(0, len(group), size):
                ids = group[start:start + size]
                values = run(runner, graph, part, ref, masks[ids], prompts.metric).double().cpu()
                for j, i in enumerate(ids):
                    out[i, rows] = values[j]
                if on_step:
                    on_step(len(ids))
    return out


class TaskForwards:
    """What every masked forward over one task's test prompts shares, computed once per task and kept for every
    method, grid size and random draw: per batch its shared prefix run once (``PrefixReuse``), its suffix,
    and the counterfactual run's sender outputs at the live positions (``live_reference``). ``metrics`` then
    runs any number of masks through the dense product, as many copies stacked along the batch of one
    forward as ``budget_mb`` of sender differences allows."""

    def __init__(self, model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
                 reuse_prefix: bool = True, budget_mb: float = 384.0) -> None:
        self.model, self.graph, self.prompts, self.budget_mb = model, graph, prompts, budget_mb
        self.parts: list[tuple[list[int], Any, PromptBatch, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = []
        for batch in prompts.batches:
            ref = refs.of(batch)  # the counterfactual's forward: once per batch and task, not per call
            runner, part = model, batch
            reuse = PrefixReuse.of(model, batch) if reuse_prefix else None
            if reuse is not None:
                runner, part, n_prefix = reuse
                ref = suffix_reference(ref, n_prefix)
            lb, lp, ref_live = live_reference(model, part, ref)
            self.parts.append((list(batch.rows), runner, part, (lb, lp, ref_live.contiguous())))
            del ref

    def copies(self, live: int) -> int:
        """How many masks one forward stacks: the sender differences [copy, sender, live x d_model] in float32
        within the budget."""
        per = len(self.graph.senders) * live * self.model.arch.d_model * 4
        return max(1, int(self.budget_mb * 2**20 // max(per, 1)))

    def metrics(self, masks: Bool[torch.Tensor, "mask edge"],
                on_step: Callable[[int], None] | None = None) -> Float[torch.Tensor, "mask prompt"]:
        """The metric of every prompt (prompt-set order) with only each mask's edges intact; masks equal to
        the whole model or to nothing run like any other (callers that know m(full), m(empty) skip them)."""
        out = torch.zeros(masks.shape[0], self.prompts.n_prompts, dtype=torch.float64)
        if not masks.shape[0]:
            return out
        for rows, runner, part, live in self.parts:
            size = self.copies(len(live[0]))
            index = torch.tensor(rows)
            for start in range(0, masks.shape[0], size):
                chunk = masks[start:start + size]
                values = run_masked_dense(runner, self.graph, part, None, chunk, self.prompts.metric, live,
                                          last_only=True)
                out[start:start + len(chunk), index] = values.double().cpu()
                if on_step:
                    on_step(len(chunk))
        return out


def node_patching(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
                  on_step: Callable[[int], None] | None = None) -> Float[torch.Tensor, " sender"]:
    """Activation patching at node level (exact): m(clean) - m(sender's output replaced by its reference),
    averaged over prompts, one plain forward per sender and batch (a head is patched at its ``hook_z``, an
    MLP at ``hook_mlp_out``, the embedding at ``blocks.0.hook_resid_pre``). Ablating a node is ablating all
    of its outgoing edges at once, so these are node scores for MIB's node-level curve."""
    total = torch.zeros(len(graph.senders), dtype=torch.float64)
    for batch in prompts.batches:
        ref_z = _reference_z(model, graph, batch, refs)
        with torch.no_grad():
            clean = batch.metric(model.run_with_hooks(batch.tokens, fwd_hooks=[]), prompts.metric)
        for s, node in enumerate(graph.senders):
            hook = _patch_hook(model, graph, node, s, ref_z)
            with torch.no_grad():
                patched = batch.metric(model.run_with_hooks(batch.tokens, fwd_hooks=[hook]), prompts.metric)
            total[s] += float((clean - patched).sum())
        if on_step:
            on_step(batch.size)
    return (total / prompts.n_prompts).float()


def _reference_z(model: Any, graph: CircuitGraph, batch: PromptBatch, refs: References) -> dict[str, torch.Tensor]:
    """Reference activations at the patched hooks: the counterfactual run's (corrupt ablation), otherwise
    the reference outputs refs gives (mean/zero: the MLP and embedding rows; heads get z from the same run
    on the clean prompt scaled to zero, i.e. zero ablation of z, when no counterfactual exists)."""
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.attn.hook_z" for layer in range(graph.n_layers)]
    if graph.has_mlp:
        names += [f"blocks.{layer}.hook_mlp_out" for layer in range(graph.n_layers)]
    tokens = batch.corrupt if batch.corrupt is not None else batch.tokens
    cache: dict[str, torch.Tensor] = {}

    def keep(x, hook):
        cache[hook.name] = x.detach().clone()

    with torch.no_grad():
        model.run_with_hooks(tokens, fwd_hooks=[(name, keep) for name in names], return_type=None)
    if batch.corrupt is None:
        cache = {k: torch.zeros_like(v) for k, v in cache.items()}
    return cache


def _patch_hook(model: Any, graph: CircuitGraph, node: Any, slot: int, ref: dict[str, torch.Tensor]):
    if node.kind == "embed":
        name = "blocks.0.hook_resid_pre"
        return name, lambda x, hook: ref[name]
    if node.kind == "mlp":
        name = f"blocks.{node.layer}.hook_mlp_out"
        return name, lambda x, hook: ref[name]
    name = f"blocks.{node.layer}.attn.hook_z"
    h = slot - head_slot(graph, node.layer)

    def patch(z, hook):
        z = z.clone()
        z[:, :, h] = ref[name][:, :, h]
        return z

    return name, patch
