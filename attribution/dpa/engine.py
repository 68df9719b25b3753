"""Dual Path Attribution: one cached forward pass, then one top-down propagation of the target.

``dpa_all`` returns every requested level (token, head, edge, neuron) from the same forward and
the same top-down pass, plus the bias / norm-offset contributions and, on request, the target
vector at every residual position of every layer. ``dpa_scores`` is the method-table entry point.
The equations are the DPA spec's (shared/specs/dpa.md); each step's docstring below restates its own.
Scores use the target just above the component: neurons the target above their MLP (before that
MLP's own update), heads and edges the target above their attention sublayer.

Cost: the forward skips the unembedding (only the target row is needed); the top-down pass is one
transpose of each weight matrix per layer, batched over positions and heads, so it costs about one
backward pass and does not grow with the number of heads or neurons scored (edges excepted: the
edge tensor itself is layers x heads x pos x pos).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from attribution.dpa.linear import act_slope, check_supported, norm_back, rope_tables, rope_transpose
from attribution.dpa.params import DPAParams
from attribution.methods import Scored
from workbench.errors import MethodError, RangeError

if TYPE_CHECKING:
    from workbench.hooked import HookedModel
    from workbench.tokens import Encoding

LEVELS = ("token", "head", "edge", "neuron")
OFFSET_KEYS = ("unembed_bias", "final_norm_bias", "attn_out_bias", "attn_value_bias", "attn_qk_bias",
               "attn_norm_bias", "mlp_bias", "mlp_norm_bias", "pos_embed")


@dataclass
class DPATrace:
    """Everything one DPA pass produced.

    levels: token [pos], head [layer, head, query], edge [layer, head, query, key],
    neuron [layer, position, neuron] (only the levels asked for).
    offsets: contributions of biases, norm offsets and positional embeddings (not token-attributable).
    targets (keep_targets=True): the target vector at each residual point, [layer, pos, d_model] each:
    "resid_post" (above layer l's MLP), "resid_mid" (above its attention), "resid_pre" (below it).
    """

    tokens: list[str]
    levels: dict[str, torch.Tensor]
    target_logit: float
    offsets: dict[str, float]
    params: DPAParams
    seconds: float = 0.0
    targets: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    def __getitem__(self, level: str) -> torch.Tensor:
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
            cache = _forward(model, tokens, p, levels)
            done = _propagate(model, chunk, cache, p, levels, keep_targets)
        seconds = (time.perf_counter() - started) / len(chunk)
        for i, trace in zip(picked, done, strict=True):
            trace.seconds = seconds
            traces[i] = trace
        if on_step:
            on_step(len(picked))
    return traces  # type: ignore[return-value]


def _right_pad(rows: list[torch.Tensor]) -> torch.Tensor:
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
            "edge": 2 * patterns + resid}


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
def _hook_names(model: HookedModel, p: DPAParams, levels: tuple[str, ...]) -> list[str]:
    rotary = model.arch.positional == "rope"
    names = ["hook_embed", "hook_pos_embed", "ln_final.hook_scale", "ln_final.hook_normalized",
             f"blocks.{model.arch.n_layers - 1}.hook_resid_post"]
    for layer in range(model.arch.n_layers):
        b = f"blocks.{layer}."
        names += [b + "ln1.hook_scale", b + "ln2.hook_scale", b + "attn.hook_pattern", b + "attn.hook_v",
                  b + "mlp.hook_pre", b + "mlp.hook_pre_linear"]
        if p.uses_qk:
            names += [b + ("attn.hook_rot_q" if rotary else "attn.hook_q"),
                      b + ("attn.hook_rot_k" if rotary else "attn.hook_k")]
        if "neuron" in levels:
            names.append(b + "mlp.hook_post")
    available = set(model.hook_names())
    return [n for n in names if n in available]


def _forward(model: HookedModel, tokens: torch.Tensor, p: DPAParams,
             levels: tuple[str, ...]) -> dict[str, torch.Tensor]:
    names = _hook_names(model, p, levels)
    try:  # return_type=None: the unembedding of every position is not needed, only one row of W_U
        _, cache = model.run_with_cache(tokens, names_filter=names, return_type=None)
    except TypeError:
        _, cache = model.run_with_cache(tokens, names_filter=names)
    return {k: v.float() for k, v in cache.items()}  # propagate in float32 whatever the model's dtype


def _bsum(x: torch.Tensor) -> torch.Tensor:
    """Sum over every axis but the leading batch axis, in float64: [batch]."""
    return x.flatten(1).sum(-1).double()


# -- top-down pass -------------------------------------------------------------------------------
def _propagate(model: HookedModel, encs: list[Encoding], cache: dict[str, torch.Tensor], p: DPAParams,
               levels: tuple[str, ...], keep_targets: bool) -> list[DPATrace]:
    """The top-down pass for a right-padded batch: t is [batch, pos, d_model] throughout."""
    a = model.arch
    n_batch, seq = cache["hook_embed"].shape[:2]
    device = model.W_U.device
    offsets = {k: torch.zeros(n_batch, dtype=torch.float64, device=device) for k in OFFSET_KEYS}
    t, logit = _init_target(model, encs, cache, offsets)
    out: dict[str, torch.Tensor] = {}
    if "head" in levels:
        out["head"] = t.new_zeros(n_batch, a.n_layers, a.n_heads, seq)
    if "edge" in levels:
        out["edge"] = t.new_zeros(n_batch, a.n_layers, a.n_heads, seq, seq)
    if "neuron" in levels:
        out["neuron"] = t.new_zeros(n_batch, a.n_layers, seq, a.d_mlp)
    kept: dict[str, list[torch.Tensor]] = {"resid_post": [], "resid_mid": [], "resid_pre": []}
    for layer in reversed(range(a.n_layers)):
        w = _layer_weights(model, layer)
        if keep_targets:
            kept["resid_post"].append(t)
        if f"blocks.{layer}.mlp.hook_pre" in cache:
            t = t + _undo_mlp(model, layer, w, t, cache, p, out, offsets)
        if keep_targets:
            kept["resid_mid"].append(t)
        t = t + _undo_attention(model, layer, w, t, cache, p, out, offsets)
        if keep_targets:
            kept["resid_pre"].append(t)
    if "token" in levels:
        out["token"] = (t * cache["hook_embed"]).sum(-1)
    if "hook_pos_embed" in cache:
        offsets["pos_embed"] += _bsum(t * cache["hook_pos_embed"])
    stacked = {k: torch.stack(v[::-1], dim=1) for k, v in kept.items()} if keep_targets else None
    traces = []
    for b, enc in enumerate(encs):
        n = enc.seq_len
        traces.append(DPATrace(
            tokens=list(enc.str_tokens), levels={lv: _one(lv, x, b, n) for lv, x in out.items()},
            target_logit=float(logit[b]), offsets={k: float(v[b]) for k, v in offsets.items()}, params=p,
            targets=None if stacked is None else {k: _one("neuron", v, b, n) for k, v in stacked.items()}))
    return traces


def _one(level: str, x: torch.Tensor, b: int, n: int) -> torch.Tensor:
    """Prompt b's scores, its own n positions (a copy when cut from a batch, so the batch can be freed)."""
    y = {"token": lambda: x[b, :n], "head": lambda: x[b, ..., :n], "edge": lambda: x[b, ..., :n, :n],
         "neuron": lambda: x[b, :, :n]}[level]()
    return y if x.shape[0] == 1 and y.shape == x.shape[1:] else y.clone()


def _init_target(model: HookedModel, encs: list[Encoding], cache: dict[str, torch.Tensor],
                 offsets: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """t at each prompt's explained position (Encoding.query: the last one unless a position is given): the
    unembedding row(s) pulled back through the frozen final norm."""
    a = model.arch
    W_U = model.W_U.float()  # [d_model, vocab]
    b_U = getattr(model, "b_U", None)
    gamma = model.final_norm_weight()
    beta = model.final_norm_bias()
    rows = torch.arange(len(encs))
    last = torch.tensor([e.query for e in encs])
    if "ln_final.hook_normalized" in cache:
        final = cache["ln_final.hook_normalized"][rows, last]  # [batch, d_model]
        final = final * gamma.float() if gamma is not None else final
        final = final + beta.float() if beta is not None else final
        scale = cache["ln_final.hook_scale"][rows, last][:, None] if "ln_final.hook_scale" in cache else None
    else:  # no final norm
        final = cache[f"blocks.{a.n_layers - 1}.hook_resid_post"][rows, last]
        scale = None
    u = final.new_zeros(final.shape)
    for b, enc in enumerate(encs):
        target_id = enc.target_id
        if target_id is None:  # no target given: explain the model's own top prediction
            target_id = int((final[b] @ W_U).argmax())
        u[b] = W_U[:, target_id]
        if enc.foil_id is not None:
            u[b] -= W_U[:, enc.foil_id]
        if b_U is not None:
            offsets["unembed_bias"][b] += float(b_U[target_id] - (b_U[enc.foil_id] if enc.foil_id is not None
                                                                   else 0.0))
    logit = (final * u).sum(-1).double() + offsets["unembed_bias"]
    g, off = norm_back(u[:, None, :], scale, None if gamma is None else gamma.float(),
                       None if beta is None else beta.float(), a.norm == "layernorm")
    offsets["final_norm_bias"] += off.double()
    t = torch.zeros(len(encs), cache["hook_embed"].shape[1], a.d_model, dtype=torch.float32, device=W_U.device)
    t[rows, last] = g[:, 0]
    return t, logit


def _layer_weights(model: HookedModel, layer: int) -> dict[str, Any]:
    """Layer weights in float32 with grouped kv heads NOT repeated: repeating copies W_K and W_V, which costs
    more than this layer's whole top-down pass; DPA sums the query heads of a group instead."""
    return {k: (v.float() if isinstance(v, torch.Tensor) else v)
            for k, v in model.weights(layer, repeat_kv=False).items()}


def _undo_mlp(model: HookedModel, layer: int, w: dict[str, Any], t: torch.Tensor, cache: dict[str, torch.Tensor],
              p: DPAParams, out: dict[str, torch.Tensor], offsets: dict[str, torch.Tensor]) -> torch.Tensor:
    """Update to t from layer l's MLP: up and gate paths (SwiGLU) or one content path (GELU/ReLU)."""
    b = f"blocks.{layer}."
    m = t @ w["W_out"].T  # [batch, pos, d_mlp]: the target seen by each neuron's output
    if "neuron" in out:
        out["neuron"][:, layer] = cache[b + "mlp.hook_post"] * m
    if w["b_out"] is not None:
        offsets["mlp_bias"] += _bsum(t * w["b_out"])
    g = cache[b + "mlp.hook_pre"]
    act_fn = model.act_fn(layer)
    silu = model.arch.act_fn == "silu"
    slope = act_slope(act_fn, g, p.act_mode, silu=silu)
    if w["W_gate"] is not None:
        if w["b_in"] is not None:  # TL's gated MLP adds b_in after the product
            offsets["mlp_bias"] += _bsum(m * w["b_in"])
        u = cache[b + "mlp.hook_pre_linear"]
        act = g * slope if (silu and p.act_mode == "ratio") else act_fn(g)
        parts = []
        if p.w_up:  # up path, act(g) frozen: linear in u
            parts.append(((p.w_up * m) * act) @ w["W_in"].T)
        if p.w_gate:  # gate path, slope(g) and u frozen: linear in g
            parts.append(((p.w_gate * m) * slope * u) @ w["W_gate"].T)
        g_n = sum(parts[1:], parts[0]) if parts else torch.zeros_like(t)
    else:
        grad_pre = (p.w_mlp * m) * slope
        g_n = grad_pre @ w["W_in"].T
        if w["b_in"] is not None:
            offsets["mlp_bias"] += _bsum(grad_pre * w["b_in"])
    g_x, off = norm_back(g_n, cache.get(b + "ln2.hook_scale"), w["ln2.w"], w["ln2.b"],
                         model.arch.norm == "layernorm")
    offsets["mlp_norm_bias"] += off.double()
    return g_x


def _from_heads(g: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """sum_h g[:, h] @ W[h]^T: [batch, head, pos, d_head] x [head, d_model, d_head] -> [batch, pos, d_model],
    as one matmul. W.transpose(1, 2).reshape is a free view for HF-converted weights (TL's W_Q views q_proj).
    """
    n_batch, heads, seq, d_head = g.shape
    flat = g.transpose(1, 2).reshape(n_batch, seq, heads * d_head)
    return flat @ W.transpose(1, 2).reshape(heads * d_head, -1)


def _by_head(x: torch.Tensor) -> torch.Tensor:
    """[batch, pos, head, d_head] -> [batch, head, pos, d_head]."""
    return x.transpose(1, 2)


def _undo_attention(model: HookedModel, layer: int, w: dict[str, Any], t: torch.Tensor,
                    cache: dict[str, torch.Tensor], p: DPAParams, out: dict[str, torch.Tensor],
                    offsets: dict[str, torch.Tensor]) -> torch.Tensor:
    """Update to t from layer l's attention: value path (pattern frozen) and query/key paths.

    Grouped-query attention without repeating kv heads: the R query heads of kv group g are stacked
    along positions ([batch, G, R*pos, d_head]), so one matmul per group covers all of them and sums
    their gradients into the shared k and v.
    """
    b = f"blocks.{layer}.attn."
    n_batch, seq, d_model = t.shape
    W_O = w["W_O"]  # [head, d_head, d_model]
    H, d_head = W_O.shape[0], W_O.shape[1]
    G = w["W_V"].shape[0]
    A = cache[b + "hook_pattern"]  # [batch, head, query, key]
    v = _by_head(cache[b + "hook_v"])  # [batch, group, key, d_head]
    m = (t @ W_O.reshape(H * d_head, d_model).T).view(n_batch, seq, H, d_head)  # target seen by each z
    m_g = _by_head(m).reshape(n_batch, G, -1, d_head)  # [batch, group, R*query, d_head]
    if w["b_O"] is not None:
        offsets["attn_out_bias"] += _bsum(t * w["b_O"])
    A_g = A.reshape(n_batch, G, -1, seq)  # [batch, group, R*query, key]
    mz = None  # m_i . z_i per head and query: the head's score, and the q/k paths' baseline
    if "edge" in out or p.uses_qk:
        mv = (m_g @ v.transpose(-1, -2)).view(n_batch, H, seq, seq)  # m_i . v_j
        edge = A * mv
        if "edge" in out:
            out["edge"][:, layer] = edge
        mz = edge.sum(-1)  # z_i = sum_j A_ij v_j, so m_i . z_i = sum_j A_ij (m_i . v_j)
    elif "head" in out:
        edge = None
        mz = (m_g * (A_g @ v)).sum(-1).view(n_batch, H, seq)
    if "head" in out:
        out["head"][:, layer] = mz
    # value path: t_j += w_v r_j (W_V gamma)^T sum_i A_ij m_i
    gv = p.w_v * (A_g.transpose(-1, -2) @ m_g)  # [batch, group, key, d_head]
    g_n = _from_heads(gv, w["W_V"])
    if w["b_V"] is not None:
        offsets["attn_value_bias"] += _bsum(gv * w["b_V"][:, None, :])
    if p.uses_qk:
        g_n = g_n + _qk_paths(model, layer, w, A, edge, mz, cache, p, offsets)
    g_x, off = norm_back(g_n, cache.get(f"blocks.{layer}.ln1.hook_scale"), w["ln1.w"], w["ln1.b"],
                         model.arch.norm == "layernorm")
    offsets["attn_norm_bias"] += off.double()
    return g_x


def _qk_paths(model: HookedModel, layer: int, w: dict[str, Any], A: torch.Tensor, edge: torch.Tensor, mz: torch.Tensor,
              cache: dict[str, torch.Tensor], p: DPAParams, offsets: dict[str, torch.Tensor]) -> torch.Tensor:
    """Control paths: delta_ij = A_ij (m_i.v_j - m_i.z_i) = d(m_i.z_i)/d score_ij, sent to q_i and k_j.

    edge: A_ij (m_i . v_j) [batch, head, query, key]; mz: m_i . z_i [batch, head, query]."""
    b = f"blocks.{layer}.attn."
    n_batch, H, seq = A.shape[0], A.shape[1], A.shape[-1]
    G, d_head = w["W_K"].shape[0], w["W_K"].shape[-1]
    rotary = model.arch.positional == "rope"
    scale = model.attn_scale(layer)
    delta = ((edge - A * mz[..., None]) / scale).reshape(n_batch, G, -1, seq)  # [batch, group, R*query, key]
    tables = rope_tables(model, layer, seq)
    g_n = A.new_zeros(())
    if p.w_q:
        k = _by_head(cache[b + ("hook_rot_k" if rotary else "hook_k")])  # [batch, group, key, d_head]
        gq = (p.w_q * (delta @ k)).view(n_batch, H, seq, d_head)  # on the rotated q
        if tables is not None:
            gq = rope_transpose(gq, tables)
        g_n = g_n + _from_heads(gq, w["W_Q"])
        if w["b_Q"] is not None:
            offsets["attn_qk_bias"] += _bsum(gq * w["b_Q"][:, None, :])
    if p.w_k:
        q = _by_head(cache[b + ("hook_rot_q" if rotary else "hook_q")]).reshape(n_batch, G, -1, d_head)
        gk = p.w_k * (delta.transpose(-1, -2) @ q)  # [batch, group, key, d_head] on the rotated k
        if tables is not None:
            gk = rope_transpose(gk, tables)
        g_n = g_n + _from_heads(gk, w["W_K"])
        if w["b_K"] is not None:
            offsets["attn_qk_bias"] += _bsum(gk * w["b_K"][:, None, :])
    return g_n
