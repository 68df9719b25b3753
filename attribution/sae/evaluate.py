"""Held-out figures of a dictionary, position 0 excluded (the shards never hold it).

- explained variance of the activation at ``hook_out`` (1 - |y - y_hat|^2 / |y - mean y|^2), and the
  same with the two largest-variance dimensions removed (smollm2's residual stream has channels with
  massive activations that would otherwise dominate the figure);
- L0 (mean active features per token), dead fraction (never active on the held-out tokens plus the
  last 100k training tokens), dense fraction (active on more than 10% of tokens);
- next-token loss with the dictionary's reconstruction spliced in at every position but the first,
  minus the clean loss, on held-out windows.

A transcoder trained with the massive-token rule (``massive_norm``: an MLP-output norm limit, see
train_shards.massive_norm) is measured without the tokens over the limit, as it was trained: they are left out
of every figure above (counted in ``massive_tokens``) and keep their clean activation in the spliced loss, as
position 0 does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attribution.sae.shards import ShardSet

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

DENSE_AT = 0.1


def reconstruction(dic: Any, x: Float[torch.Tensor, "token d_in"], y: Float[torch.Tensor, "token d_out"],
                   chunk: int = 4096) -> dict[str, float]:
    import torch

    y = y.float()
    var_dims = y.var(0)
    keep = torch.ones(y.shape[1], dtype=torch.bool)
    keep[var_dims.topk(min(2, y.shape[1] - 1)).indices] = False
    mean = y.mean(0)
    sq = torch.zeros(y.shape[1])
    tot = ((y - mean) ** 2).sum(0)
    active = torch.zeros(dic.d_sae)
    l0 = 0.0
    with torch.no_grad():
        for s in range(0, x.shape[0], chunk):
            xs = x[s : s + chunk].float()
            f = dic.encode(xs)
            yh = dic.decode(f) + (dic.skip(xs) if dic.is_transcoder else 0)
            sq += ((y[s : s + chunk] - yh) ** 2).sum(0)
            on = f > 0
            l0 += float(on.sum())
            active += on.float().sum(0)
    n = x.shape[0]
    return {
        "explained_variance": float(1 - sq.sum() / tot.sum().clamp_min(1e-12)),
        "explained_variance_no_top2": float(1 - sq[keep].sum() / tot[keep].sum().clamp_min(1e-12)),
        "mse": float(sq.sum() / (n * y.shape[1])),
        "l0": l0 / n,
        "dense_fraction": float((active / n > DENSE_AT).float().mean()),
        "_active": active,
        "n_eval_tokens": n,
    }


def spliced_loss(model: Any, dic: Any, windows: Int[torch.Tensor, "window ctx"], skip_first: int = 1,
                 bf16: bool = False, massive_norm: float | None = None) -> tuple[float, float]:
    """(clean, spliced) mean next-token loss over ``windows`` [n, ctx] (-1 = padding): the
    activation at ``hook_out`` is replaced by the dictionary's reconstruction from position
    ``skip_first`` on (from the activation at ``hook`` for a transcoder). ``bf16``: both forwards under
    bfloat16 autocast (the transcoder set's per-layer figure: a third of the time on this CPU). ``massive_norm``:
    positions whose clean output norm exceeds it keep the clean activation (the tokens left out of training)."""
    import contextlib

    import torch

    seen: dict[str, Any] = {}

    def grab(act, hook):  # noqa: ARG001
        seen["x"] = act
        return act

    def splice(act, hook):  # noqa: ARG001
        src = seen.get("x", act) if dic.is_transcoder else act
        part = src[:, skip_first:]
        flat = part.reshape(-1, part.shape[-1]).float()
        out = act.clone()
        rec = dic.reconstruct(flat).to(act.dtype).reshape(act[:, skip_first:].shape)
        if massive_norm is not None:
            clean = act[:, skip_first:]
            rec = torch.where(clean.float().norm(dim=-1, keepdim=True) > massive_norm, clean, rec)
        out[:, skip_first:] = rec
        return out

    tokens = windows.long()
    valid = tokens >= 0
    tokens = torch.where(valid, tokens, torch.zeros_like(tokens))
    target_ok = valid[:, 1:].clone()
    target_ok[:, :skip_first] = False
    hooks = ([(dic.hook, grab)] if dic.is_transcoder else []) + [(dic.hook_out, splice)]
    losses = []
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with torch.no_grad(), autocast:
        for fwd in ([], hooks):
            total, count = 0.0, 0
            for s in range(0, tokens.shape[0], 16):
                t = tokens[s : s + 16]
                logits = model.run_with_hooks(t.to(model.device), fwd_hooks=fwd).float().cpu()
                lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, t[:, 1:, None])[..., 0]
                ok = target_ok[s : s + 16]
                total += float(-(lp[ok]).sum())
                count += int(ok.sum())
            losses.append(total / max(count, 1))
    return losses[0], losses[1]


def evaluate_dictionary(model: Any, dic: Any, held: ShardSet, train: ShardSet | None = None,
                        eval_windows: int = 48, skip_first: int = 1, bf16: bool = False,
                        massive_norm: float | None = None) -> dict[str, Any]:
    """The held-out figures (module docstring); ``massive_norm`` (transcoders): the MLP-output norm above which a
    token is left out of them, as of training (None: every token counts)."""
    import torch

    x = held.tensor(dic.hook)
    y = held.tensor(dic.hook_out) if dic.is_transcoder else x
    left_out = 0
    if massive_norm is not None and dic.is_transcoder:
        ok = y.float().norm(dim=1) <= massive_norm
        left_out = int((~ok).sum())
        x, y = x[ok], y[ok]
    m = reconstruction(dic, x, y)
    if massive_norm is not None:
        m["massive_tokens"] = left_out
    active = m.pop("_active")
    if train is not None:  # a few held-out tokens cannot tell a rare feature from a dead one
        last = len(train.manifest["shards"]) - 1
        xt = train.load(last, [dic.hook])[dic.hook][-100_000:]
        with torch.no_grad():
            for s in range(0, xt.shape[0], 4096):
                active += (dic.encode(xt[s : s + 4096].float()) > 0).float().sum(0)
    m["dead_fraction"] = float((active == 0).float().mean())
    if model is not None and eval_windows:
        clean, spliced = spliced_loss(model, dic, held.windows()[:eval_windows], skip_first, bf16, massive_norm)
        m.update(ce_loss_clean=clean, ce_loss_spliced=spliced, ce_loss_delta=spliced - clean)
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in m.items()}
