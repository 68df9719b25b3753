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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Bool, Float

from circuits.counterfactual import PromptBatch, PromptSet
from circuits.graph import CircuitGraph

Hook = tuple[str, Callable[..., Any]]


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


def sender_hooks(model: Any, graph: CircuitGraph, write: Callable[[slice | int, torch.Tensor], Any],
                 embed: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[Hook]:
    """Hooks that hand every sender's output to ``write(slot, out)`` ([batch, pos, (head,) d_model]).

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

        def on_z(z, hook, layer=layer, first=first):
            write(slice(first, first + graph.n_heads), model.head_writes(z, layer))

        hooks.append((f"blocks.{layer}.attn.hook_z", on_z))
        if graph.has_mlp:
            def on_mlp(x, hook, slot=first + graph.n_heads):
                write(slot, x)

            hooks.append((f"blocks.{layer}.hook_mlp_out", on_mlp))
    return hooks


def receiver_hooks(graph: CircuitGraph, read: Callable[[torch.Tensor, Any, int], torch.Tensor]) -> list[Hook]:
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
                          lambda x, hook, c=cols["mlp"], n=n_up + graph.n_heads: read(x, c, n)))
    last = len(graph.receivers) - 1
    hooks.append((f"blocks.{graph.n_layers - 1}.hook_resid_post",
                  lambda x, hook: read(x, last, len(graph.senders))))
    return hooks


# -- sender outputs and references -------------------------------------------------------------------
def capture(model: Any, graph: CircuitGraph, tokens: torch.Tensor) -> Float[torch.Tensor, "batch pos sender d"]:
    """Every sender's output on a batch of prompts (no gradient; the unembedding is skipped)."""
    n, seq = tokens.shape
    out = torch.zeros(n, seq, len(graph.senders), model.arch.d_model, device=tokens.device)

    def write(slot, x):
        out[:, :, slot] = x.detach().float()

    with torch.no_grad():
        model.run_with_hooks(tokens, fwd_hooks=sender_hooks(model, graph, write), return_type=None)
    return out


def mean_outputs(model: Any, graph: CircuitGraph, prompts: PromptSet) -> Float[torch.Tensor, "sender d"]:
    """Each sender's mean output over every real position of the prompt set (mean ablation)."""
    total = torch.zeros(len(graph.senders), model.arch.d_model, dtype=torch.float64)
    count = 0
    for batch in prompts.batches:
        real = batch.real()
        total += capture(model, graph, batch.tokens)[real].double().sum(0).cpu()
        count += int(real.sum())
    return (total / count).float().to(model.device)


class References:
    """Reference outputs under the prompt set's ablation: per batch for ``corrupt``, shared otherwise."""

    def __init__(self, model: Any, graph: CircuitGraph, prompts: PromptSet) -> None:
        self.model, self.graph, self.kind = model, graph, prompts.ablation
        self.mean = mean_outputs(model, graph, prompts) if self.kind == "mean" else None

    def of(self, batch: PromptBatch) -> torch.Tensor:
        """[batch, pos, sender, d] for corrupt; [sender, d] (broadcast) for mean and zero."""
        if self.kind == "corrupt":
            return capture(self.model, self.graph, batch.corrupt)
        if self.kind == "mean":
            return self.mean
        return torch.zeros(len(self.graph.senders), self.model.arch.d_model, device=self.model.device)


def _tile(ref: torch.Tensor, copies: int) -> torch.Tensor:
    return ref.repeat(copies, 1, 1, 1) if ref.dim() == 4 else ref


# -- edge-ablated forward ----------------------------------------------------------------------------
def run_masked(model: Any, graph: CircuitGraph, batch: PromptBatch, ref: torch.Tensor,
               keep: Bool[torch.Tensor, "copy edge"], metric: str) -> Float[torch.Tensor, "copy batch"]:
    """The metric per prompt with only the kept edges of each copy intact (one forward for all copies)."""
    copies = int(keep.shape[0])
    n, seq = batch.tokens.shape
    d = model.arch.d_model
    anti = torch.stack([(~graph.mask_dense(k)).float() for k in keep]).to(model.device)  # [copy, S, R]
    diff = torch.zeros(copies, n, seq, len(graph.senders), d, device=model.device)
    flat = diff.view(copies * n, seq, len(graph.senders), d)
    tiled = _tile(ref, copies)

    def write(slot, x):
        r = tiled[:, :, slot] if tiled.dim() == 4 else tiled[slot]
        flat[:, :, slot] = x.float() - r

    def read(x, cols, n_up):
        a = anti[:, :n_up, cols]  # [copy, n_up, head] or [copy, n_up]
        up = diff[:, :, :, :n_up]
        if x.dim() == 4:
            delta = torch.einsum("cbpsd,csh->cbphd", up, a).reshape(x.shape)
        else:
            delta = torch.einsum("cbpsd,cs->cbpd", up, a).reshape(x.shape)
        return x - delta.to(x.dtype)

    hooks = sender_hooks(model, graph, write) + receiver_hooks(graph, read)
    with torch.no_grad(), model.split_inputs():
        logits = model.run_with_hooks(batch.tokens.repeat(copies, 1), fwd_hooks=hooks)
    return batch.metric(logits, metric).view(copies, n)


# -- gradients at receiver inputs --------------------------------------------------------------------
def receiver_grads(model: Any, graph: CircuitGraph, batch: PromptBatch, metric: str,
                   embed: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   ) -> tuple[Float[torch.Tensor, "batch pos sender d"], Float[torch.Tensor, "batch pos receiver d"]]:
    """Sender outputs and d(sum of the batch's metric)/d(receiver input) in one forward and one backward."""
    n, seq = batch.tokens.shape
    d = model.arch.d_model
    out = torch.zeros(n, seq, len(graph.senders), d, device=model.device)
    grads = torch.zeros(n, seq, len(graph.receivers), d, device=model.device)

    def leaf(x):
        return (embed(x) if embed is not None else x.detach()).requires_grad_(True)

    def write(slot, x):
        out[:, :, slot] = x.detach().float()

    def read(x, cols, n_up):
        def store(g, cols=cols):
            grads[:, :, cols] = g.float()
        if x.requires_grad:
            x.register_hook(store)
        return x

    hooks = sender_hooks(model, graph, write, embed=leaf) + receiver_hooks(graph, read)
    with torch.enable_grad(), model.split_inputs():
        logits = model.run_with_hooks(batch.tokens, fwd_hooks=hooks)
        batch.metric(logits, metric).sum().backward()
    return out, grads


def edge_products(graph: CircuitGraph, diff: Float[torch.Tensor, "batch pos sender d"],
                  targets: Float[torch.Tensor, "batch pos receiver d"]) -> Float[torch.Tensor, " edge"]:
    """sum over prompts and positions of diff_S . target_R for every edge S -> R (receiver-major)."""
    n, seq, s, d = diff.shape
    dense = torch.zeros(len(graph.senders), len(graph.receivers), dtype=torch.float64)
    # one matmul per group of receivers that share their upstream senders (a layer's heads, its MLP, logits)
    groups: dict[int, list[int]] = {}
    for j, r in enumerate(graph.receivers):
        groups.setdefault(graph.upstream(r), []).append(j)
    D = diff.permute(2, 0, 1, 3).reshape(s, n * seq * d)
    for n_up, cols in groups.items():
        T = targets[:, :, cols].permute(0, 1, 3, 2).reshape(n * seq * d, len(cols))
        dense[:n_up, cols] = (D[:n_up] @ T).double().cpu()
    return graph.flat(dense)
