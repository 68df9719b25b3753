"""Dual Path Attribution: one cached forward pass, then one top-down propagation of the target.

``dpa_all`` returns every requested level (token, head, qk, neuron) from the same forward and
the same top-down pass, plus the bias / norm-offset contributions and, on request, the target
vector at every residual position of every layer. ``dpa_scores`` is the method-table entry point.
The equations are the DPA spec's (shared/specs/dpa.md); each step's docstring below restates its own.
Scores use the target just above the component: neurons the target above their MLP (before that
MLP's own update), heads and query-key pairs the target above their attention sublayer.

Cost: the forward skips the unembedding (only the target row is needed); the top-down pass is one
transpose of each weight matrix per layer, batched over positions and heads, so it costs about one
backward pass and does not grow with the number of heads or neurons scored (query-key pairs excepted: the
qk tensor itself is layers x heads x pos x pos).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float, Int

from attribution.dpa.linear import check_supported
from attribution.dpa.params import DPAParams
from attribution.dpa.steps import OFFSET_KEYS, At, Cache, Scores, bsum, hook_names, init_target, top_down
from attribution.methods import Scored
from core.errors import MethodError, RangeError

if TYPE_CHECKING:
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

LEVELS = ("token", "head", "qk", "neuron")


@dataclass
class DPATrace:
    """Everything one DPA pass produced.

    levels: token [pos], head [layer, head, query], qk [layer, head, query, key],
    neuron [layer, position, neuron] (only the levels asked for).
    offsets: contributions of biases, norm offsets and positional embeddings (not token-attributable).
    targets (keep_targets=True): the target vector at each residual point, [layer, pos, d_model] each:
    "resid_post" (above layer l's MLP), "resid_mid" (above its attention), "resid_pre" (below it).
    """

    tokens: list[str]
    levels: dict[str, Float[torch.Tensor, "*axes"]]  # each level's own axes (above)
    target_logit: float
    offsets: dict[str, float]
    params: DPAParams
    seconds: float = 0.0
    targets: dict[str, Float[torch.Tensor, "layer pos d_model"]] | None = field(default=None, repr=False)

    def __getitem__(self, level: str) -> Float[torch.Tensor, "*axes"]:
        return self.levels[level]

    def completeness_error(self) -> float:
        """token scores + offsets - target logit (float noise under the COMPLETE weights)."""
        if "token" not in self.levels:
            raise MethodError("the completeness check needs the token level")
        return float(self.levels["token"].double().sum()) + sum(self.offsets.values()) - self.target_logit


def dpa_scores(model: HookedModel, enc: Encoding, level: str, **params: Any) -> Scored:
    """Method-table entry: DPA scores of one level, laid out on LEVEL_AXES[level], with the target logit
    of DPA's own forward."""
    trace = dpa_all(model, enc, levels=(level,), **params)
    return Scored(trace.levels[level], target_logit=trace.target_logit)


def dpa_levels(model: HookedModel, enc: Encoding, levels: tuple[str, ...], **params: Any) -> dict[str, Scored]:
    """Method-table one_pass entry: every level in ``levels`` from one forward and one top-down pass."""
    trace = dpa_all(model, enc, levels=levels, **params)
    return {lv: Scored(trace.levels[lv], target_logit=trace.target_logit) for lv in levels}


def dpa_all(model: HookedModel, enc: Encoding, levels: Iterable[str] = LEVELS, keep_targets: bool = False,
            **params: Any) -> DPATrace:
    """One forward + one top-down pass; scores for every level in ``levels``."""
    if enc.tokens.shape[0] != 1:
        raise MethodError("dpa_all scores one prompt (batch of 1); use dpa_batch for many")
    return dpa_batch(model, [enc], levels=levels, keep_targets=keep_targets, **params)[0]


def dpa_batch(model: HookedModel, encs: Sequence[Encoding], levels: Iterable[str] = LEVELS, batch_size: int = 16,
              keep_targets: bool = False, on_step: Callable[[int], None] | None = None,
              **params: Any) -> list[DPATrace]:
    """DPA for many prompts, ``batch_size`` at a time through one forward and one top-down pass.

    Prompts are right-padded: under causal attention no real position attends to a pad, and pads start
    with a zero target that nothing propagates into, so every prompt's scores equal its own dpa_all's
    (to float tolerance). Batching shares each weight read among the prompts, which on a CPU is most of
    a single prompt's cost. Prompts are batched in order of length (less padding); traces come back in
    the order given. Each trace's ``seconds`` is its batch's time divided by the batch's prompts;
    on_step(n) is called after each batch of n prompts.
    """
    p = DPAParams.from_kwargs(**params)
    levels = tuple(levels)
    for lv in levels:
        if lv not in LEVELS:
            raise MethodError(f"dpa has no level {lv!r}; levels: {', '.join(LEVELS)}")
    if int(batch_size) < 1:
        raise MethodError(f"batch_size must be at least 1 (got {batch_size})")
    check_supported(model)
    if "neuron" in levels and not model.arch.d_mlp:
        raise MethodError(f"{model.name} has no MLP neurons")
    for enc in encs:
        if enc.tokens.shape[0] != 1:
            raise MethodError("each encoding holds one prompt (batch of 1)")
    order = sorted(range(len(encs)), key=lambda i: encs[i].seq_len)
    traces: list[DPATrace | None] = [None] * len(encs)
    start = 0
    while start < len(order):
        picked = order[start:start + int(batch_size)]
        chunk = [encs[i] for i in picked]
        while len(chunk) > 1 and _over_budget(model, chunk[-1].seq_len, levels, p, batch=len(chunk)):
            chunk, picked = chunk[:len(chunk) // 2], picked[:len(chunk) // 2]  # long prompts: fewer at a time
        check_fits(model, chunk[-1].seq_len, levels, p)  # the longest (batches are in order of length)
        start += len(chunk)
        started = time.perf_counter()
        with torch.no_grad():
            tokens = _right_pad([e.tokens[0] for e in chunk])
            cache = clean_forward(model, tokens, p, levels)
            done = propagate(model, chunk, cache, p, levels, keep_targets)
        seconds = (time.perf_counter() - started) / len(chunk)
        for i, trace in zip(picked, done, strict=True):
            trace.seconds = seconds
            traces[i] = trace
        if on_step:
            on_step(len(picked))
    return traces  # type: ignore[return-value]


def _right_pad(rows: list[Int[torch.Tensor, " _pos"]]) -> Int[torch.Tensor, "batch pos"]:
    """[batch, longest] ids; each row padded with its own last id (any id works: nothing reads pads)."""
    longest = max(int(r.shape[0]) for r in rows)
    return torch.stack([torch.cat([r, r[-1:].expand(longest - r.shape[0])]) for r in rows])


# -- memory --------------------------------------------------------------------------------------
def memory_estimate(model: HookedModel, seq: int) -> dict[str, float]:
    """Bytes each level needs beyond the model: the cached patterns are shared by all levels."""
    a = model.arch
    patterns = 4.0 * a.n_layers * a.n_heads * seq * seq
    resid = 4.0 * a.n_layers * seq * (6 * a.d_model + 4 * (a.d_mlp or 0))
    return {"token": patterns + resid, "head": patterns + resid, "neuron": patterns + resid,
            "qk": 2 * patterns + resid}


def _over_budget(model: HookedModel, seq: int, levels: Iterable[str], p: DPAParams, batch: int = 1) -> list[str]:
    """The levels whose tensors for ``batch`` prompts of ``seq`` tokens would exceed max_gib."""
    need = memory_estimate(model, seq)
    return [lv for lv in levels if batch * need[lv] > p.max_gib * 2**30]


def check_fits(model: HookedModel, seq: int, levels: Iterable[str], p: DPAParams) -> None:
    """Refuse (RangeError) a level whose tensors would exceed max_gib; say which levels fit and why."""
    over = _over_budget(model, seq, levels, p)
    if not over:
        return
    a = model.arch
    need = memory_estimate(model, seq)
    too_big = _over_budget(model, seq, LEVELS, p)
    fit = [lv for lv in LEVELS if lv not in too_big]
    raise RangeError(
        f"dpa {'/'.join(over)} level for a {seq}-token prompt needs {_gib(need[over[0]])} "
        f"({a.n_layers} layers x {a.n_heads} heads x {seq}x{seq} attention floats), "
        f"over max_gib={p.max_gib:g}; "
        + (f"levels that fit: {', '.join(fit)}" if fit
           else "no level fits: shorten the prompt or raise --param max_gib"))


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**28 else f"{n / 2**20:.2f} MiB"


# -- forward -------------------------------------------------------------------------------------
def clean_forward(model: HookedModel, tokens: Int[torch.Tensor, "batch pos"], p: DPAParams,
                  levels: tuple[str, ...]) -> Cache:
    names = hook_names(model, p, levels)
    try:  # return_type=None: the unembedding of every position is not needed, only one row of W_U
        _, cache = model.run_with_cache(tokens, names_filter=names, return_type=None)
    except TypeError:
        _, cache = model.run_with_cache(tokens, names_filter=names)
    return {k: v.float() for k, v in cache.items()}  # propagate in float32 whatever the model's dtype


# -- top-down pass -------------------------------------------------------------------------------
def propagate(model: HookedModel, encs: list[Encoding], cache: Cache, p: DPAParams,
              levels: tuple[str, ...], keep_targets: bool) -> list[DPATrace]:
    """The top-down pass for a right-padded batch: t is [batch, pos, d_model] throughout."""
    a = model.arch
    n_batch, seq = cache["hook_embed"].shape[:2]
    device = model.W_U.device
    offsets = {k: torch.zeros(n_batch, dtype=torch.float64, device=device) for k in OFFSET_KEYS}
    t, logit = init_target(model, encs, cache, offsets, p.norm_aware)
    out: Scores = {}
    if "head" in levels:
        out["head"] = t.new_zeros(n_batch, a.n_layers, a.n_heads, seq)
    if "qk" in levels:
        out["qk"] = t.new_zeros(n_batch, a.n_layers, a.n_heads, seq, seq)
    if "neuron" in levels:
        out["neuron"] = t.new_zeros(n_batch, a.n_layers, seq, a.d_mlp)
    # the target at each residual point (keep_targets)
    at: dict[tuple[int, str], Float[torch.Tensor, "batch pos d_model"]] = {}
    for step in top_down(model, cache, t, p, out=out, offsets=offsets):
        if isinstance(step, At):
            t = step.t
            if keep_targets:
                at[step.point] = t
    if "token" in levels:
        out["token"] = (t * cache["hook_embed"]).sum(-1)
    if "hook_pos_embed" in cache:
        offsets["pos_embed"] += bsum(t * cache["hook_pos_embed"])
    stacked = _stack_targets(at, a.n_layers) if keep_targets else None
    traces = []
    for b, enc in enumerate(encs):
        n = enc.seq_len
        traces.append(DPATrace(
            tokens=list(enc.str_tokens), levels={lv: _one(lv, x, b, n) for lv, x in out.items()},
            target_logit=float(logit[b]), offsets={k: float(v[b]) for k, v in offsets.items()}, params=p,
            targets=None if stacked is None else {k: _one("neuron", v, b, n) for k, v in stacked.items()}))
    return traces


def _stack_targets(at: dict[tuple[int, str], Float[torch.Tensor, "batch pos d_model"]],
                   n_layers: int) -> dict[str, Float[torch.Tensor, "batch layer pos d_model"]]:
    """[batch, layer, pos, d_model] per residual point; a parallel block's resid_mid is the target above it."""
    layers = range(n_layers)
    return {"resid_post": torch.stack([at[(la, "post")] for la in layers], dim=1),
            "resid_mid": torch.stack([at.get((la, "mid"), at[(la, "post")]) for la in layers], dim=1),
            "resid_pre": torch.stack([at[(la - 1, "post")] for la in layers], dim=1)}


def _one(level: str, x: Float[torch.Tensor, "batch ..."], b: int, n: int) -> Float[torch.Tensor, "*axes"]:
    """Prompt b's scores, its own n positions (a copy when cut from a batch, so the batch can be freed)."""
    y = {"token": lambda: x[b, :n], "head": lambda: x[b, ..., :n], "qk": lambda: x[b, ..., :n, :n],
         "neuron": lambda: x[b, :, :n]}[level]()
    return y if x.shape[0] == 1 and y.shape == x.shape[1:] else y.clone()


