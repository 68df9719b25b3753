"""Build a tuned lens for an LLM on the English corpus (``workbench lens-train`` runs it).

Two stages, both against the final distribution, position 0 (the attention sink) left out:

1. Closed-form fit. Every layer's translator is the least-squares map from the normalised residual to the
   normalised final residual: regress x_f / rms(x_f) on [h / rms(h), 1 / rms(h)], which gives
   rms(h) x_f / rms(x_f) ~ h A + b, i.e. the translator h -> h A + b before the (scale-free) final norm.
   Ridge pulls A toward the identity. The normal equations are summed while the frozen model streams
   the training windows, so no residual cache is needed; this is what makes a CPU build feasible.
   (For a full-rank output metric, least squares with shared regressors does not depend on the metric, so
   weighting by the unembedding's Fisher metric would give the same map.)
2. KL fine-tuning (Belrose et al. 2023's objective, KL(final || lens)) with Adam on a cached subset of the
   training residuals, for a time budget.

Then each layer's held-out KL is measured for the logit lens and the tuned lens, on the corpus's held-out
split. The frozen model runs under bfloat16 autocast on CPU (about 3x faster here); lens logits are
computed in bfloat16 and their log-softmax in float32.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from attribution.lens import layer_labels, residual_stack
from attribution.lens.tuned import TunedLens, lens_dir
from core.corpus import english_texts
from core.errors import DatasetError

if TYPE_CHECKING:
    from jaxtyping import Float, Int

    from core.models.hooked import HookedModel


@dataclass
class TrainConfig:
    window: int = 128  # tokens per training window (position 0 of each is left out)
    train_tokens: int = 131_072  # at most this many tokens streamed through the model for stage 1
    fit_seconds: float = 600.0  # stage 1 stops early when this budget is spent
    batch_windows: int = 8
    ridge: float = 1e-3  # relative to the mean diagonal of X^T X
    kl_tokens: int = 2048  # residuals cached for stage 2
    kl_seconds: float = 240.0
    kl_batch: int = 64
    kl_lr: float = 1e-4
    kl_max_steps: int = 1_000_000  # stage 2 stops at this many steps or kl_seconds, whichever comes first
    heldout_tokens: int = 512
    seed: int = 0
    bf16: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def windows(model: HookedModel, texts: list[str], n_tokens: int, window: int, seed: int,
            ) -> Iterator[Int[torch.Tensor, " window"]]:
    """Token windows [window] from documents in a seeded random order (each window within one document run;
    documents are concatenated), until n_tokens tokens have been given."""
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    buf: list[int] = []
    given = 0

    if not callable(model.tokenizer) or window > model.arch.n_ctx:
        raise DatasetError(f"{model.name} cannot read {window}-token windows of English text")
    for i in order:
        buf += list(model.tokenizer(texts[i], add_special_tokens=False)["input_ids"])
        while len(buf) >= window and given < n_tokens:
            yield torch.tensor(buf[:window])
            buf = buf[window:]
            given += window
        if given >= n_tokens:
            return


def _batches(model: HookedModel, split: str, n_tokens: int, cfg: TrainConfig) -> Iterator[torch.Tensor]:
    rows: list[torch.Tensor] = []
    for w in windows(model, english_texts(split), n_tokens, cfg.window, cfg.seed):
        rows.append(w)
        if len(rows) == cfg.batch_windows:
            yield torch.stack(rows)
            rows = []
    if rows:
        yield torch.stack(rows)


def stack_of(model: HookedModel, tokens: Int[torch.Tensor, "batch pos"], bf16: bool,
             ) -> Float[torch.Tensor, "layer batch pos-1 d_model"]:
    """Residual stack [layer, batch, pos - 1, d_model] in float32, position 0 dropped."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        resid = residual_stack(model, tokens)
    return resid[:, :, 1:].float()


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()


def fit_least_squares(model: HookedModel, cfg: TrainConfig, log: Callable[[str], None] = print,
                      ) -> tuple[TunedLens, Float[torch.Tensor, "layer tokens d_model"], dict[str, Any]]:
    """Stage 1: the ridge least-squares translators, and a cache of the first cfg.kl_tokens tokens' residual
    stacks [layer, tokens, d_model] for stage 2."""
    a = model.arch
    n, d = a.n_layers, a.d_model
    xtx = torch.zeros(n, d + 1, d + 1, dtype=torch.float64)
    xty = torch.zeros(n, d + 1, d, dtype=torch.float64)
    kept: list[torch.Tensor] = []
    tokens = kept_tokens = 0
    started = time.perf_counter()
    for batch in _batches(model, "train", cfg.train_tokens, cfg):
        resid = stack_of(model, batch, cfg.bf16).reshape(n + 1, -1, d)  # [layer, tokens, d]
        if kept_tokens < cfg.kl_tokens:
            kept.append(resid[:, : cfg.kl_tokens - kept_tokens].clone())
            kept_tokens += kept[-1].shape[1]
        scale = _rms(resid[:n])
        x = torch.cat([resid[:n] / scale, 1.0 / scale], dim=-1)  # [layer, tokens, d + 1]
        y = (resid[n] / _rms(resid[n])).expand(n, -1, -1)
        xtx += torch.bmm(x.transpose(1, 2), x).double()
        xty += torch.bmm(x.transpose(1, 2), y).double()
        tokens += resid.shape[1]
        elapsed = time.perf_counter() - started
        log(f"stage 1: {tokens} tokens, {elapsed:.0f} s")
        if elapsed > cfg.fit_seconds:
            break
    eye = torch.zeros(d + 1, d, dtype=torch.float64)
    eye[:d] = torch.eye(d, dtype=torch.float64)
    lam = cfg.ridge * xtx.diagonal(dim1=1, dim2=2).mean(-1)[:, None, None]
    sol = torch.linalg.solve(xtx + lam * torch.eye(d + 1, dtype=torch.float64), xty + lam * eye)
    lens = TunedLens(model.name, (sol[:, :d] - eye[:d]).float(), sol[:, d].float())
    return lens, torch.cat(kept, dim=1), {"fit_tokens": tokens, "fit_seconds": time.perf_counter() - started}


def kl_per_layer(model: HookedModel, resid: Float[torch.Tensor, "layer tokens d_model"], lens: TunedLens | None,
                 bf16: bool = True, chunk: int = 128) -> Float[torch.Tensor, " layer"]:
    """KL(final || lens) in nats per row of a stack [layer, tokens, d_model], summed over tokens (float64)."""
    total = torch.zeros(resid.shape[0], dtype=torch.float64)
    with torch.no_grad():
        for start in range(0, resid.shape[1], chunk):
            part = resid[:, start:start + chunk]
            if lens is not None:
                part = lens.translate(part)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model.read_out(part)
            logq = torch.log_softmax(logits.float(), dim=-1)
            logp = logq[-1]  # the last row is the model's own output under either lens
            total += (logp.exp() * (logp - logq)).sum((-1, -2)).double()
    return total


def fine_tune_kl(model: HookedModel, lens: TunedLens, cache: Float[torch.Tensor, "layer tokens d_model"],
                 cfg: TrainConfig,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Stage 2: Adam on KL(final || tuned) over random batches of the cached residuals, for cfg.kl_seconds."""
    weight = lens.weight.clone().requires_grad_(True)
    bias = lens.bias.clone().requires_grad_(True)
    opt = torch.optim.Adam([weight, bias], lr=cfg.kl_lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    n = weight.shape[0]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
        final_logits = model.read_out(cache[n])
    final_logp = torch.log_softmax(final_logits.float(), dim=-1)
    del final_logits
    losses: list[float] = []
    started = time.perf_counter()
    while len(losses) < cfg.kl_max_steps and time.perf_counter() - started < cfg.kl_seconds and cache.shape[1]:
        idx = torch.randint(cache.shape[1], (min(cfg.kl_batch, cache.shape[1]),), generator=gen)
        h = cache[:n, idx]
        moved = h + torch.bmm(h, weight) + bias[:, None]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model.read_out(moved)
        logq = torch.log_softmax(logits.float(), dim=-1)
        logp = final_logp[idx]
        loss = (logp.exp() * (logp - logq)).sum(-1).mean(-1).sum()  # summed over layers, mean over tokens
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()) / n)
        log(f"stage 2: step {len(losses)} mean KL per layer {losses[-1]:.4f} ({time.perf_counter() - started:.0f} s)")
    lens.weight, lens.bias = weight.detach(), bias.detach()
    return {"kl_steps": len(losses), "kl_first": losses[0] if losses else None,
            "kl_last": losses[-1] if losses else None, "kl_seconds_spent": time.perf_counter() - started}


def heldout_kl(model: HookedModel, lens: TunedLens, cfg: TrainConfig,
               log: Callable[[str], None] = print) -> dict[str, list[float]]:
    """Mean KL(final || lens) per layer on held-out windows for the logit and the tuned lens."""
    sums = {"logit": None, "tuned": None}
    count = 0
    for batch in _batches(model, "heldout", cfg.heldout_tokens, cfg):
        resid = stack_of(model, batch, cfg.bf16)
        resid = resid.reshape(resid.shape[0], -1, resid.shape[-1])
        for kind, translator in (("logit", None), ("tuned", lens)):
            kl = kl_per_layer(model, resid, translator, cfg.bf16)
            sums[kind] = kl if sums[kind] is None else sums[kind] + kl
        count += resid.shape[1]
        log(f"held-out: {count} tokens")
    return {"tokens": count, **{k: (v / max(count, 1)).tolist() for k, v in sums.items()}}


def build(model: HookedModel, cfg: TrainConfig | None = None, out_dir: str | None = None,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Fit, fine-tune, evaluate and save a tuned lens; returns the summary written to tuned.json."""
    cfg = cfg or TrainConfig()
    torch.manual_seed(cfg.seed)
    started = time.perf_counter()
    lens, cache, fit = fit_least_squares(model, cfg, log)
    lens.config = {"config": cfg.to_dict(), **fit, "stage": "least squares only (not yet evaluated)"}
    lens.save(out_dir or lens_dir(model.name))  # a checkpoint: the fit is the expensive part
    tune = fine_tune_kl(model, lens, cache, cfg, log) if cfg.kl_seconds > 0 else {"kl_steps": 0}
    del cache
    held = heldout_kl(model, lens, cfg, log)
    layers = layer_labels(model)
    lens.config = {"config": cfg.to_dict(), **fit, **tune, "heldout_tokens": held["tokens"], "layers": layers,
                   "heldout_kl": {"logit": held["logit"], "tuned": held["tuned"]},
                   "total_seconds": time.perf_counter() - started}
    path = lens.save(out_dir or lens_dir(model.name))
    return {"path": str(path), "model": model.name, **lens.config}


def results_table(summary: dict[str, Any]) -> str:
    """Markdown: each layer's held-out KL to the final distribution for both lenses."""
    kl = summary["heldout_kl"]
    c = summary["config"]
    lines = [f"# Logit lens vs tuned lens on {summary['model']}", "",
             f"Held-out KL(final || lens) in nats per token, mean over {summary['heldout_tokens']} held-out tokens "
             f"of the English corpus (`english_texts('heldout')`, {c['window']}-token windows, position 0 left out). "
             f"Tuned lens: closed-form ridge fit on {summary['fit_tokens']} training tokens, then "
             f"{summary['kl_steps']} Adam steps of KL on a {c['kl_tokens']}-token cache "
             f"(batch {c['kl_batch']}, lr {c['kl_lr']}). Built by `workbench lens-train` in "
             f"{summary['total_seconds'] / 60:.1f} min on CPU.", "",
             "| layer | logit lens KL | tuned lens KL | tuned lower |", "|---|---|---|---|"]
    for name, lo, tu in zip(summary["layers"], kl["logit"], kl["tuned"], strict=True):
        lines.append(f"| {name} | {lo:.4f} | {tu:.4f} | {'yes' if tu < lo else 'no'} |")
    return "\n".join(lines) + "\n"
