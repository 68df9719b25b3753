"""Edge Pruning (Bhaskar et al. 2024): learn a mask over every edge on the prompts, with a hard-concrete
relaxation of its gates (Louizos et al. 2018), and rank the edges by how surely the gate stays open.

Each edge S -> R has a gate z in [0, 1] sampled from a hard-concrete distribution with a learned log_alpha;
receiver R reads ``x_R - sum_S (1 - z[S, R]) (out_S - ref_S)`` (``circuits.intervene``'s ablation with a
float keep, ``circuits.intervene.run_soft_masked``). Loss, on the prompts at hand:
  faithfulness + l0 * E[L0] (the expected number of open gates, Louizos et al. eq. 12),
faithfulness being ``kl`` (KL from the intact model's next-token distribution to the circuit's at the
metric's position, as Edge Pruning trains) or ``metric`` (the metric's normalized drop,
(m(full) - m(circuit)) / |m(full) - m(empty)|, what the benchmark's CPR rewards). Adam on log_alpha; the
model's weights are frozen. Every step is one gated forward and backward per prompt batch (each step takes
all batches). Cost (EDGE_METHODS): the gated forward's products with every upstream sender make it ~4 plain
forwards and a step ~11 (smollm2, 4 IOI prompts, one thread: 0.55 s plain, 2.3 s gated, 6.1 s a step), plus
two gated forwards for the intact and ablated ends: 8 + 11 x steps passes per prompt (EAP-IG: 1 + 3 x steps).

score = P(gate open) = sigmoid(log_alpha - beta log(-gamma / zeta)), in (0, 1): higher means the edge is
kept (positive, so top-k and |score| selections rank alike).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from jaxtyping import Float

from circuits.counterfactual import PromptSet
from circuits.graph import CircuitGraph
from circuits.intervene import References, run_soft_masked
from core.errors import MethodError

BETA, GAMMA, ZETA = 2 / 3, -0.1, 1.1  # hard-concrete temperature and stretch (Louizos et al. 2018, eq. 9)
INIT = 3.0  # log_alpha at the start: every gate open with P ~ 0.99, so training starts from the full model
LOSSES = ("kl", "metric")


def open_probability(log_alpha: Float[torch.Tensor, " edge"]) -> Float[torch.Tensor, " edge"]:
    """P(z > 0) under the hard-concrete gate: the expected L0 term (Louizos et al. 2018, eq. 12)."""
    return torch.sigmoid(log_alpha - BETA * math.log(-GAMMA / ZETA))


def sample_gates(log_alpha: Float[torch.Tensor, " edge"], gen: torch.Generator) -> Float[torch.Tensor, " edge"]:
    """One hard-concrete sample per gate: stretched sigmoid of the noisy log_alpha, clamped to [0, 1]."""
    u = torch.rand(log_alpha.shape, generator=gen).clamp(1e-6, 1 - 1e-6).to(log_alpha.device)
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / BETA)
    return (s * (ZETA - GAMMA) + GAMMA).clamp(0.0, 1.0)


def ablation_matrix(graph: CircuitGraph, keep: Float[torch.Tensor, " edge"]) -> Float[torch.Tensor, "sender receiver"]:
    """[sender, receiver] float ablation weights 1 - keep on the graph's edges, 0 elsewhere (differentiable)."""
    out = torch.zeros(graph.valid.shape, dtype=keep.dtype, device=keep.device)
    return out.index_put((graph.edges[:, 0].to(keep.device), graph.edges[:, 1].to(keep.device)), 1 - keep)


@contextmanager
def frozen(model: Any) -> Iterator[None]:
    """The model's weights take no gradient for the duration (only the gates learn); restored after. The
    loader already freezes them (core.models.backends); this holds for a model handed over unfrozen."""
    module = getattr(model, "tl", model)
    params = list(module.parameters()) if isinstance(module, torch.nn.Module) else []
    before = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(params, before, strict=True):
            p.requires_grad_(flag)


def check(steps: Any, lr: Any, l0: Any, seed: Any, loss: Any) -> None:
    """MethodError (one line) for parameters outside their range."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 10_000:
        raise MethodError(f"edge_pruning steps must be a whole number from 1 to 10000 (got {steps!r})")
    for name, value, least in (("lr", lr, "> 0"), ("l0", l0, ">= 0")):
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (value <= 0 if name == "lr" else value < 0):
            raise MethodError(f"edge_pruning {name} must be a finite number {least} (got {value!r})")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise MethodError(f"edge_pruning seed must be a whole number >= 0 (got {seed!r})")
    if loss not in LOSSES:
        raise MethodError(f"edge_pruning loss must be one of {', '.join(LOSSES)} (got {loss!r})")


class Faithfulness:
    """The faithfulness term of one prompt batch, against the intact and the fully ablated runs."""

    def __init__(self, model: Any, graph: CircuitGraph, batch: Any,
                 ref: Float[torch.Tensor, " sender #batch #pos d_model"], metric: str, loss: str) -> None:
        self.batch, self.metric, self.loss = batch, metric, loss
        with torch.no_grad():
            full = run_soft_masked(model, graph, batch, ref, torch.zeros(graph.valid.shape))
            empty = run_soft_masked(model, graph, batch, ref, graph.valid.float())
        self.log_p = torch.log_softmax(self.last(full), -1)
        self.m_full = batch.metric(full, metric)
        span = (self.m_full - batch.metric(empty, metric)).abs().mean()
        self.span = float(span) if float(span) > 1e-6 else 1.0  # no drop to normalize by: raw units

    def last(self, logits: Float[torch.Tensor, "batch pos vocab"]) -> Float[torch.Tensor, "batch vocab"]:
        """[batch, vocab] logits at each prompt's last real position (where the metric is read)."""
        return logits[torch.arange(self.batch.size), self.batch.last.to(logits.device)].float()

    def __call__(self, logits: Float[torch.Tensor, "batch pos vocab"]) -> Float[torch.Tensor, ""]:
        if self.loss == "kl":
            log_q = torch.log_softmax(self.last(logits), -1)
            return (self.log_p.exp() * (self.log_p - log_q)).sum(-1).mean()
        return ((self.m_full - self.batch.metric(logits, self.metric)) / self.span).mean()


def train(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References, steps: int = 20,
          lr: float = 0.2, l0: float = 0.01, seed: int = 0, loss: str = "kl",
          on_step: Callable[[int], None] | None = None) -> tuple[Float[torch.Tensor, " edge"], dict[str, list[float]]]:
    """The learned log_alpha [edge] and, per step (before its update): ``loss`` (the whole objective),
    ``faith`` (its faithfulness term) and ``open`` (the expected fraction of open gates)."""
    check(steps, lr, l0, seed, loss)
    gen = torch.Generator().manual_seed(seed)
    log_alpha = torch.full((graph.n_edges,), INIT, device=model.device, requires_grad=True)
    opt = torch.optim.Adam([log_alpha], lr=lr)
    history: dict[str, list[float]] = {"loss": [], "faith": [], "open": []}
    with frozen(model), torch.enable_grad():
        terms = [(b, refs.of(b)) for b in prompts.batches]
        terms = [(b, ref, Faithfulness(model, graph, b, ref, prompts.metric, loss)) for b, ref in terms]
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            z = sample_gates(log_alpha, gen)
            expected = open_probability(log_alpha).sum()  # E[L0], the number of open gates
            (l0 * expected).backward()
            faith = 0.0
            ablated = ablation_matrix(graph, z)
            for i, (b, ref, term) in enumerate(terms):  # full-batch step: every batch, weighted by its size
                part = term(run_soft_masked(model, graph, b, ref, ablated)) * (b.size / prompts.n_prompts)
                part.backward(retain_graph=i < len(terms) - 1)
                faith += float(part.detach())
            opt.step()
            history["faith"].append(faith)
            history["open"].append(float(expected.detach()) / graph.n_edges)
            history["loss"].append(faith + l0 * float(expected.detach()))
        if on_step:
            on_step(prompts.n_prompts)
    return log_alpha.detach(), history


def score(model: Any, graph: CircuitGraph, prompts: PromptSet, refs: References,
          on_step: Callable[[int], None] | None = None, steps: int = 20, lr: float = 0.2, l0: float = 0.01,
          seed: int = 0, loss: str = "kl") -> Float[torch.Tensor, " edge"]:
    log_alpha, history = train(model, graph, prompts, refs, steps, lr, l0, seed, loss, on_step)
    if not all(math.isfinite(v) for v in history["loss"]):
        raise MethodError("edge_pruning: the loss is not finite; try a smaller lr")
    return open_probability(log_alpha.double()).float().cpu()
