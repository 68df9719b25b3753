"""Forward passes on the edge-level graph: sender outputs, edge-ablated runs, gradients at receiver inputs.

Senders are read at TransformerLens hooks (``blocks.0.hook_resid_pre`` for the embedding, ``attn.hook_z``
times W_O per head, ``hook_mlp_out``); receivers are the split inputs ``blocks.{l}.hook_q_input`` /
``hook_k_input`` / ``hook_v_input`` / ``hook_mlp_in`` and, for the logits, the last ``hook_resid_post``
(see ``HookedModel.split_inputs``).

Ablating edges (auto-circuit's formulation): a receiver normally reads the sum of every upstream sender's
output; with edge S -> R ablated it reads the reference output of S instead of S's output in this run.
So each receiver input becomes ``x_R - sum_S (1 - keep[S, R]) (out_S - ref_S)``, where out_S is the
sender's output in the same (patched) run. All senders' differences live in one buffer
[batch, pos, sender, d_model] filled as the forward pass reaches them; a receiver reads only the prefix
of senders upstream of it. Keeping every edge gives the clean run, keeping none the reference run.

Layout: sender outputs are [sender, batch, pos, d_model] and receiver gradients or targets [receiver,
batch, pos, d_model], so a sender's or receiver's values are one contiguous row when edge scores are
taken as one matrix product per group of receivers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Bool, Float, Int

from circuits.counterfactual import PromptBatch, PromptSet
from circuits.graph import CircuitGraph

Hook = tuple[str, Callable[..., Any]]
# The tensors of the edge-level graph, named once
SenderOutputs = Float[torch.Tensor, "sender batch pos d_model"]
ReceiverTargets = Float[torch.Tensor, "receiver batch pos d_model"]  # gradients or targets at the receiver inputs
Reference = Float[torch.Tensor, " sender #batch #pos d_model"]  # per prompt (corrupt) or one shared (mean, zero)
# sender_hooks' write(slot, out): out [batch, pos, d_model], or [head, batch, pos, d_model] for a layer's heads
Write = Callable[[slice | int, Float[torch.Tensor, "... batch pos d_model"]], Any]
# receiver_hooks' read(x, cols, n_upstream): x [batch, pos, head, d_model] at head inputs, else [batch, pos, d_model]
Read = Callable[[Float[torch.Tensor, "batch pos *head d_model"], Any, int],
                Float[torch.Tensor, "batch pos *head d_model"]]
Embed = Callable[[Float[torch.Tensor, "batch pos d_model"]], Float[torch.Tensor, "batch pos d_model"]]


def _per_layer(graph: CircuitGraph) -> int:
    return graph.n_heads + int(graph.has_mlp)


def head_slot(graph: CircuitGraph, layer: int) -> int:
    """Sender index of head 0 of a layer (its heads follow; the MLP comes after them)."""
    return 1 + layer * _per_layer(graph)


def receiver_cols(graph: CircuitGraph, layer: int) -> dict[str, Any]:
    """Receiver indices of a layer: q/k/v as [head] index tensors, mlp as an int (or None)."""
    base = layer * (3 * graph.n_heads + int(graph.has_mlp))
    heads = torch.arange(graph.n_heads)
    cols: dict[str, Any] = {r: base + 3 * heads + i for i, r in enumerate(("q", "k", "v"))}
    cols["mlp"] = base + 3 * graph.n_heads if graph.has_mlp else None
    return cols


def sender_hooks(model: Any, graph: CircuitGraph, write: Write, embed: Embed | None = None) -> list[Hook]:
    """Hooks that hand every sender's output to ``write(slot, out)``: [batch, pos, d_model] for the
    embedding and MLPs, [head, batch, pos, d_model] for a layer's heads.

    embed, if given, replaces the embedding (EAP-IG's interpolation, a gradient leaf) before it is read."""
    hooks: list[Hook] = []

    def on_embed(x, hook):
        if embed is not None:
            x = embed(x)
        write(0, x)
        return x

    hooks.append(("blocks.0.hook_resid_pre", on_embed))
    for layer in range(graph.n_layers):
        first = head_slot(graph, layer)
        post = model.norm_sites(layer)["attn_post"] if hasattr(model, "norm_sites") else None
        if post is None:
            def on_z(z, hook, layer=layer, first=first):
                write(slice(first, first + graph.n_heads), model.head_writes(z, layer, heads_first=True))

            hooks.append((f"blocks.{layer}.attn.hook_z", on_z))
        else:  # a post-norm (Gemma, OLMo-2): each head's write as the residual gets it, gamma * write / scale
            hooks += _post_normed_heads(model, graph, layer, first, post, write)
        if graph.has_mlp:
            def on_mlp(x, hook, slot=first + graph.n_heads):
                write(slot, x)

            hooks.append((f"blocks.{layer}.hook_mlp_out", on_mlp))
    return hooks


def _post_normed_heads(model: Any, graph: CircuitGraph, layer: int, first: int, post: Any,
                       write: Callable[[slice | int, torch.Tensor], Any]) -> list[Hook]:
    """Sender hooks for the heads of a layer with an attention post-norm: the writes are taken at hook_z and
    handed on once the post-norm's scale of this forward is known (its frozen gamma / scale makes the sum of
    the heads' outputs, plus the bias, exactly what the residual receives)."""
    held: dict[str, torch.Tensor] = {}

    def on_z(z, hook):
        held["writes"] = model.head_writes(z, layer, heads_first=True)  # [head, batch, pos, d]

    def on_scale(scale, hook):
        writes = held.pop("writes", None)
        if writes is not None and scale.dim() == 3:
            write(slice(first, first + graph.n_heads), writes * post.w / scale)

    return [(f"blocks.{layer}.attn.hook_z", on_z), (post.scale_hook, on_scale)]


def receiver_hooks(graph: CircuitGraph, read: Read) -> list[Hook]:
    """Hooks that pass every receiver input through ``read(x, cols, n_upstream)`` and use what it returns.

    x is [batch, pos, head, d_model] with cols a [head] tensor for q/k/v inputs, [batch, pos, d_model] with
    an int col for MLP inputs and the logits."""
    hooks: list[Hook] = []
    for layer in range(graph.n_layers):
        cols = receiver_cols(graph, layer)
        n_up = head_slot(graph, layer)
        for role in ("q", "k", "v"):
            hooks.append((f"blocks.{layer}.hook_{role}_input",
                          lambda x, hook, c=cols[role], n=n_up: read(x, c, n)))
        if cols["mlp"] is not None:
            hooks.append((f"blocks.{layer}.hook_mlp_in",
                          lambda x, hook, c=cols["mlp"], n=graph.upstream(graph.receivers[cols["mlp"]]):
                          read(x, c, n)))
    last = len(graph.receivers) - 1
    hooks.append((f"blocks.{graph.n_layers - 1}.hook_resid_post",
                  lambda x, hook: read(x, last, len(graph.senders))))
    return hooks


# -- sender outputs and references -------------------------------------------------------------------
def put_output(out: SenderOutputs, slot: slice | int, x: Float[torch.Tensor, "... batch pos d_model"]) -> None:
    """out[slot] = x: a sender's output as sender_hooks hands it over (already sender-major)."""
    out[slot] = x.detach()


def capture(model: Any, graph: CircuitGraph, tokens: Int[torch.Tensor, "batch pos"]) -> SenderOutputs:
    """Every sender's output on a batch of prompts (no gradient; the unembedding is skipped)."""
    n, seq = tokens.shape
    out = torch.zeros(len(graph.senders), n, seq, model.arch.d_model, device=tokens.device)
    with torch.no_grad():
        model.run_with_hooks(tokens, fwd_hooks=sender_hooks(model, graph, lambda slot, x: put_output(out, slot, x)),
                             return_type=None)
    return out


def mean_outputs(model: Any, graph: CircuitGraph, prompts: PromptSet) -> Float[torch.Tensor, "sender d_model"]:
    """Each sender's mean output over every real position of the prompt set (mean ablation)."""
    total = torch.zeros(len(graph.senders), model.arch.d_model, dtype=torch.float64)
    count = 0
    for batch in prompts.batches:
        real = batch.real()
        total += capture(model, graph, batch.tokens)[:, real].double().sum(1).cpu()
        count += int(real.sum())
    return (total / count).float().to(model.device)


class References:
    """Reference outputs under the prompt set's ablation, [sender, batch or 1, pos or 1, d_model]:
    the counterfactual's own per batch for ``corrupt``, one shared vector per sender otherwise."""

    def __init__(self, model: Any, graph: CircuitGraph, prompts: PromptSet) -> None:
        self.model, self.graph, self.kind = model, graph, prompts.ablation
        self.mean = mean_outputs(model, graph, prompts) if self.kind == "mean" else None

    def of(self, batch: PromptBatch) -> Reference:
        if self.kind == "corrupt":
            return capture(self.model, self.graph, batch.corrupt)
        if self.kind == "mean":
            return self.mean[:, None, None]
        return torch.zeros(len(self.graph.senders), 1, 1, self.model.arch.d_model, device=self.model.device)


# -- edge-ablated forward ----------------------------------------------------------------------------
class _Ablation:
    """The edges each copy ablates, as sparse (copy, sender, receiver) lists.

    A copy that keeps few edges (a small circuit) is applied as "every upstream difference minus the kept
    ones", a copy that ablates few (the complement of a circuit, one patched edge) as "the ablated ones":
    either way the work is proportional to the smaller set, not to senders x receivers."""

    def __init__(self, graph: CircuitGraph, keep: torch.Tensor, device: Any) -> None:
        dense = torch.stack([graph.mask_dense(k) for k in keep])  # [copy, S, R]
        valid = graph.valid[None]
        kept, ablated = dense & valid, ~dense & valid
        self.by_total = kept.flatten(1).sum(1) <= ablated.flatten(1).sum(1)  # [copy]
        chosen = torch.where(self.by_total[:, None, None], kept, ablated)
        self.pairs = torch.nonzero(chosen).to(device)  # [E, 3] (copy, sender, receiver)
        self.sign = torch.where(self.by_total[self.pairs[:, 0].cpu()], -1.0, 1.0).to(device)
        self.by_total = self.by_total.to(device)
        self.n_receivers = len(graph.receivers)

    def delta(self, diff: Float[torch.Tensor, "copy sender batch pos d_model"],
              total: Float[torch.Tensor, "copy batch pos d_model"], cols: Int[torch.Tensor, " col"],
              ) -> Float[torch.Tensor, "copy col batch pos d_model"]:
        """What to subtract from the receivers ``cols``: [copy, len(cols), *diff.shape[2:]]."""
        local = torch.full((self.n_receivers,), -1, dtype=torch.long, device=diff.device)
        local[cols] = torch.arange(len(cols), device=diff.device)
        j = local[self.pairs[:, 2]]
        rows = j >= 0
        c, s, j, sign = self.pairs[rows, 0], self.pairs[rows, 1], j[rows], self.sign[rows]
        out = torch.where(self.by_total.view(-1, 1, *[1] * (diff.dim() - 2)),
                          total[:, None], torch.zeros((), device=diff.device)).expand(-1, len(cols), *diff.shape[2:])
        out = out.contiguous()
        for start in range(0, len(c), 512):  # bounded memory: 512 sender outputs gathered at a time
            sl = slice(start, start + 512)
            picked = diff[c[sl], s[sl]] * sign[sl].view(-1, *[1] * (diff.dim() - 2))
            out.index_put_((c[sl], j[sl]), picked, accumulate=True)
        return out


def run_masked(model: Any, graph: CircuitGraph, batch: PromptBatch, ref: Reference,
               keep: Bool[torch.Tensor, "copy edge"], metric: str) -> Float[torch.Tensor, "copy batch"]:
    """The metric per prompt with only the kept edges of each copy intact (one forward for all copies)."""
    copies = int(keep.shape[0])
    n, seq = batch.tokens.shape
    d = model.arch.d_model
    plan = _Ablation(graph, keep, model.device)
    diff = torch.zeros(copies, len(graph.senders), n, seq, d, device=model.device)  # out_S - ref_S
    total = torch.zeros(copies, n, seq, d, device=model.device)  # the sum over the senders written so far

    def write(slot, x):
        if x.dim() == 4:  # heads: [head, copy x b, p, d] -> [copy, head, b, p, d]
            change = x.float().view(x.shape[0], copies, n, seq, d).transpose(0, 1) - ref[slot][None]
            diff[:, slot] = change
            total.add_(change.sum(1))
        else:
            change = x.float().view(copies, n, seq, d) - ref[slot][None]
            diff[:, slot] = change
            total.add_(change)

    def read(x, cols, n_up):
        cols_t = torch.as_tensor(cols, device=model.device).reshape(-1)
        delta = plan.delta(diff, total, cols_t)  # [copy, cols, b, p, d]
        if x.dim() == 4:
            delta = delta.permute(0, 2, 3, 1, 4)
        return x - delta.reshape(x.shape).to(x.dtype)

    hooks = sender_hooks(model, graph, write) + receiver_hooks(graph, read)
    with torch.no_grad(), model.split_inputs():
        logits = model.run_with_hooks(batch.tokens.repeat(copies, 1), fwd_hooks=hooks)
    return batch.metric(logits, metric).view(copies, n)


# -- gradients at receiver inputs --------------------------------------------------------------------
def live_positions(batch: PromptBatch) -> Bool[torch.Tensor, "batch pos"]:
    """Positions at or after the first token where a prompt and its counterfactual differ (and not past
    the prompt's end): elsewhere every sender's output equals its reference, so no ablation changes them.
    Without a counterfactual (mean/zero ablation) every real position is live."""
    real = batch.real()
    if batch.corrupt is None:
        return real
    differs = (batch.tokens != batch.corrupt).cpu()
    return (differs.cumsum(1) > 0) & real


def live_reference(model: Any, batch: PromptBatch, ref: Reference
                   ) -> tuple[Int[torch.Tensor, " live"], Int[torch.Tensor, " live"],
                              Float[torch.Tensor, "sender live d_model"]]:
    """The live positions (batch index, position; on the model's device) and every sender's reference
    output there."""
    lb, lp = torch.nonzero(live_positions(batch), as_tuple=True)
    lb, lp = lb.to(model.device), lp.to(model.device)
    ref_live = ref[:, lb if ref.shape[1] > 1 else 0, lp if ref.shape[2] > 1 else 0]  # [S, live, d]
    if ref_live.dim() == 2:
        ref_live = ref_live[:, None].expand(-1, len(lb), -1)
    return lb, lp, ref_live


def run_soft_masked(model: Any, graph: CircuitGraph, batch: PromptBatch, ref: Reference,
                    ablated: Float[torch.Tensor, "sender receiver"]) -> Float[torch.Tensor, "batch pos vocab"]:
    """The logits when receiver R reads ``x_R - sum_S ablated[S, R] (out_S -
    ref_S)`` at the live positions, with ablated a float matrix (``valid * (1 - keep)``: 0 keeps an edge, 1
    ablates it), so the run is differentiable in ``ablated`` (edge pruning learns a mask through it).

    run_masked_dense's semantics for one copy, without its in-place buffer (autograd must keep each value it
    reads): each receiver run (a layer's head inputs, its MLP input, the logits) takes one product with the
    senders written so far, at the first of its hooks, and its other hooks read their rows of it."""
    lb, lp, ref_live = live_reference(model, batch, ref)
    n_live, d = len(lb), model.arch.d_model
    ablated = ablated.to(model.device)
    changes: list[torch.Tensor] = []  # per sender group in slot order: [senders, live * d] out - ref
    runs = dict(receiver_groups(graph))  # n_up -> the receivers reading exactly those senders
    held: dict[int, torch.Tensor] = {}  # n_up -> [receivers of the run, live * d], only the current run

    def write(slot, x):
        change = x.float()[:, lb, lp] - ref_live[slot] if x.dim() == 4 else (x.float()[lb, lp] - ref_live[slot])[None]
        changes.append(change.flatten(1))

    def read(x, cols, n_up):
        run = runs[n_up]
        if n_up not in held:
            held.clear()
            held[n_up] = ablated[:n_up, run].T @ torch.cat(changes)[:n_up]
        rows = torch.as_tensor(cols, device=model.device).reshape(-1) - run.start
        delta = held[n_up][rows].view(len(rows), n_live, d)
        delta = delta.transpose(0, 1) if x.dim() == 4 else delta[0]  # [live, head, d] or [live, d]
        return x.index_put((lb, lp), x[lb, lp] - delta.to(x.dtype))

    hooks = sender_hooks(model, graph, write) + receiver_hooks(graph, read)
    with model.split_inputs():
        return model.run_with_hooks(batch.tokens, fwd_hooks=hooks)


def receiver_grads(model: Any, graph: CircuitGraph, batch: PromptBatch, metric: str,
                   embed: Embed | None = None, tap: Write | None = None, shift: Read | None = None,
                   ) -> tuple[SenderOutputs, ReceiverTargets]:
    """Sender outputs and d(sum of the batch's metric)/d(receiver input) in one forward and one backward.

    tap(slot, out), if given, also sees each sender's output with its gradient history (not detached);
    shift(x, cols, n_upstream), if given, replaces each receiver input after its gradient is hooked, so the
    gradient is taken at the input the receiver reads (EAP-IG-activations moves a layer's output this way)."""
    n, seq = batch.tokens.shape
    d = model.arch.d_model
    out = torch.zeros(len(graph.senders), n, seq, d, device=model.device)
    grads = torch.zeros(len(graph.receivers), n, seq, d, device=model.device)

    def leaf(x):
        return (embed(x) if embed is not None else x.detach()).requires_grad_(True)

    def keep_grad(g, cols):  # g: [b, p, head, d] at a layer's head inputs, [b, p, d] at an MLP or the logits
        grads[cols] = g.permute(2, 0, 1, 3) if g.dim() == 4 else g

    def read(x, cols, n_up):
        if x.requires_grad:
            x.register_hook(lambda g, cols=cols: keep_grad(g, cols))
        return shift(x, cols, n_up) if shift is not None else x

    def write(slot, x):
        put_output(out, slot, x)
        if tap is not None:
            tap(slot, x)

    hooks = sender_hooks(model, graph, write, embed=leaf)
    hooks += receiver_hooks(graph, read)
    with torch.enable_grad(), model.split_inputs():
        logits = model.run_with_hooks(batch.tokens, fwd_hooks=hooks)
        batch.metric(logits, metric).sum().backward()
    return out, grads


def receiver_groups(graph: CircuitGraph) -> list[tuple[int, slice]]:
    """(n_upstream, receiver slice) for each run of receivers reading the same senders: a layer's head
    inputs, its MLP input, the logits."""
    groups: list[tuple[int, slice]] = []
    for j, r in enumerate(graph.receivers):
        n_up = graph.upstream(r)
        if groups and groups[-1][0] == n_up and groups[-1][1].stop == j:
            groups[-1] = (n_up, slice(groups[-1][1].start, j + 1))
        else:
            groups.append((n_up, slice(j, j + 1)))
    return groups


def live(diff: SenderOutputs) -> Bool[torch.Tensor, "batch pos"]:
    """Positions where some sender's output differs from its reference: only they carry edge scores
    (pads, and a counterfactual's identical prefix, add nothing)."""
    return diff.abs().amax(dim=(0, 3)) > 0


class EdgeProducts:
    """Accumulates sum over prompts, positions and d_model of diff_S . target_R into a dense [sender,
    receiver] matrix, receiver groups fed in any order.

    Groups are buffered until about ``width`` receivers are waiting and then taken in one matrix product
    over the most senders any of them reads: a product with 27 columns (one layer's head inputs) runs at
    well under half the speed of one with 100+, so a few wasted rows (senders downstream of some of the
    buffered receivers, whose products are never read: only valid edges leave ``scores``) cost less."""

    def __init__(self, graph: CircuitGraph, diff: SenderOutputs,
                 out: Float[torch.Tensor, "sender receiver"] | None = None, width: int = 128) -> None:
        self.graph, self.width = graph, width
        self.keep = live(diff)
        self.D = diff[:, self.keep].reshape(diff.shape[0], -1)  # [sender, live positions x d]
        self.dense = out if out is not None else torch.zeros(len(graph.senders), len(graph.receivers),
                                                             dtype=torch.float64)
        self.waiting: list[tuple[int, slice, torch.Tensor]] = []

    def add(self, n_up: int, cols: slice, T: ReceiverTargets) -> None:
        self.waiting.append((n_up, cols, T[:, self.keep].reshape(T.shape[0], -1)))
        if sum(t.shape[0] for _, _, t in self.waiting) >= self.width:
            self.flush()

    def flush(self) -> Float[torch.Tensor, "sender receiver"]:
        if self.waiting:
            n_up = max(n for n, _, _ in self.waiting)
            cols = torch.cat([torch.arange(c.start, c.stop) for _, c, _ in self.waiting])
            T = torch.cat([t for _, _, t in self.waiting])
            self.dense[:n_up, cols] += (self.D[:n_up] @ T.T).double().cpu()
            self.waiting = []
        return self.dense

    def scores(self) -> Float[torch.Tensor, " edge"]:
        return self.graph.flat(self.flush())


def edge_products(graph: CircuitGraph, diff: SenderOutputs, targets: ReceiverTargets) -> Float[torch.Tensor, " edge"]:
    """sum over prompts, positions and d_model of diff_S . target_R for every edge S -> R (receiver-major),
    over the live positions only."""
    acc = EdgeProducts(graph, diff)
    for n_up, cols in receiver_groups(graph):
        acc.add(n_up, cols, targets[cols])
    return acc.scores()
