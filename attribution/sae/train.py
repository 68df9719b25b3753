"""Train SAEs with SAELens on cached activations, fully offline; evaluate, save and load them.

SAELens' ``SAETrainer`` takes any iterator of activation batches as its data provider, so no
Hugging Face dataset or model download is involved: we feed it shuffled batches of an
``ActivationCache``. The trained SAE is saved with ``save_inference_model`` (SAELens' on-disk
format: ``cfg.json`` + ``sae_weights.safetensors``; BatchTopK saves as JumpReLU) and loads back
with ``SAE.load_from_disk``. Metrics are computed on held-out activations.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.config import TRAIN, WIDTH_PER_DIM_IN_MEMORY
from attribution.sae.dictionary import check_dictionary_dir, load_dictionary
from core.checks import t_finite
from core.errors import DatasetError, NonFiniteError, RangeError
from core.options import check_memory, first_non_finite

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

KINDS = ("topk", "batchtopk", "jumprelu", "l1")


def training_sae(
    kind: str,
    d_in: int,
    d_sae: int,
    k: int = 32,
    l1: float = 0.5,
    l0: float = 1.0,
    model: str = "",
    hook: str = "",
):
    """A SAELens TrainingSAE of the given kind (inputs normalised to norm sqrt(d_in))."""
    # encoder and decoder, their gradients and Adam's two moments: 8 float32 copies of d_in x d_sae
    check_memory(f"an SAE of width {d_sae:,} on {d_in}-wide activations", 32 * int(d_in) * int(d_sae))
    import sae_lens as sl

    if kind not in KINDS:
        raise RangeError(f"unknown SAE kind {kind!r}: {', '.join(KINDS)}")
    if d_sae < 1:
        raise RangeError(f"SAE width must be positive, got {d_sae}")
    if kind in ("topk", "batchtopk") and not 0 < k <= d_sae:
        raise RangeError(f"k={k} must be between 1 and the SAE width {d_sae}")
    meta = sl.saes.sae.SAEMetadata(model_name=model, hook_name=hook)
    common = {
        "d_in": d_in,
        "d_sae": d_sae,
        "normalize_activations": "expected_average_only_in",
        "metadata": meta,
    }
    if kind == "topk":
        return sl.TopKTrainingSAE(sl.TopKTrainingSAEConfig(k=k, **common))
    if kind == "batchtopk":
        return sl.BatchTopKTrainingSAE(sl.BatchTopKTrainingSAEConfig(k=k, **common))
    if kind == "jumprelu":
        return sl.JumpReLUTrainingSAE(sl.JumpReLUTrainingSAEConfig(l0_coefficient=l0, **common))
    return sl.StandardTrainingSAE(sl.StandardTrainingSAEConfig(l1_coefficient=l1, **common))


def batches(acts: Float[torch.Tensor, "token d_in"], batch_size: int,
            seed: int = 0) -> Iterator[Float[torch.Tensor, "batch d_in"]]:
    """Endless shuffled float32 batches from an [n, d] activation tensor (epoch after epoch)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    n = acts.shape[0]
    while True:
        perm = torch.randperm(n, generator=gen)
        for s in range(0, n - batch_size + 1, batch_size):
            yield acts[perm[s : s + batch_size]].float()


def fit(
    sae: Any,
    acts: Float[torch.Tensor, "token d_in"],
    n_samples: int,
    batch_size: int = TRAIN.batch_size,
    lr: float = TRAIN.lr,
    seed: int = TRAIN.seed,
    quiet: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Train ``sae`` on ``n_samples`` activations drawn from ``acts`` with SAELens' trainer;
    ``on_progress(samples done, samples in all)`` every 20 steps and at the end."""
    import contextlib
    import io

    import sae_lens as sl
    import torch

    torch.manual_seed(seed)
    batch_size = min(batch_size, int(acts.shape[0]))
    steps = max(1, n_samples // batch_size)
    from sae_lens.config import SAETrainerConfig

    cfg = SAETrainerConfig(
        total_training_samples=steps * batch_size,
        train_batch_size_samples=batch_size,
        lr=lr,
        lr_end=lr,
        lr_warm_up_steps=min(100, steps // 10),
        lr_decay_steps=steps // 5,
        lr_scheduler_name="constant",
        device="cpu",
        dead_feature_window=max(50, steps // 4),
        feature_sampling_window=max(50, steps // 4),
        n_batches_for_norm_estimate=min(50, max(1, acts.shape[0] // batch_size)),
    )
    with torch.no_grad():  # b_dec starts at the (normalised) data mean, so features learn deviations
        x = acts[:200_000].float()
        sae.b_dec.copy_(x.mean(0) * (acts.shape[1] ** 0.5) / x.norm(dim=1).mean())
    data = batches(acts, batch_size, seed)
    if on_progress:
        data = _reporting(data, steps, batch_size, on_progress)
    trainer = sl.SAETrainer(cfg=cfg, sae=sae, data_provider=data)
    sink = io.StringIO()
    with contextlib.redirect_stderr(sink) if quiet else contextlib.nullcontext():
        sae = trainer.fit()
    if on_progress:
        on_progress(steps * batch_size, steps * batch_size)
    return sae


def _reporting(data: Iterator[Any], steps: int, batch_size: int,
               on_progress: Callable[[int, int], None]) -> Iterator[Any]:
    for i, batch in enumerate(data):
        if i % 20 == 0 and i < steps:
            on_progress(i * batch_size, steps * batch_size)
        yield batch


def save_sae(sae: Any, path: Path, extra: dict[str, Any] | None = None) -> Path:
    """SAELens inference format (cfg.json + sae_weights.safetensors) plus our workbench.json."""
    path.mkdir(parents=True, exist_ok=True)
    # a TrainingSAE saves its inference form (BatchTopK -> JumpReLU); an inference SAE saves as is
    (sae.save_inference_model if hasattr(sae, "save_inference_model") else sae.save_model)(str(path))
    if extra:
        (path / "workbench.json").write_text(json.dumps(extra, indent=1, default=str))
    return path


def load_sae(path: str | Path) -> Any:
    """The SAELens object of a dictionary directory, checked as every dictionary is when opened
    (attribution/sae/dictionary.py: load_dictionary)."""
    return load_dictionary(path).sae


def sae_info(path: str | Path) -> dict[str, Any]:
    """A dictionary's workbench.json ({} when absent), checked (ModelFileError when damaged)."""
    return check_dictionary_dir(path)[1]


def check_fits(sae: Any, d: int, hook: str) -> None:
    if int(sae.cfg.d_in) != int(d):
        raise RangeError(f"SAE input width {sae.cfg.d_in} does not match hook {hook} (width {d})")


@dataclass
class SAEMetrics:
    mse: float  # mean squared error per element
    explained_variance: float  # 1 - sum |x - x_hat|^2 / sum |x - mean x|^2
    l0: float  # mean number of active features per token
    dead_fraction: float  # features that never fire on the evaluated tokens
    n_eval_tokens: int
    ce_loss_clean: float | None = None
    ce_loss_spliced: float | None = None
    ce_loss_delta: float | None = None  # spliced - clean, next-token loss in nats

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def reconstruction_metrics(sae: Any, acts: Float[torch.Tensor, "token d_in"], chunk: int = 4096) -> dict[str, Any]:
    import torch

    if acts.shape[0] == 0:
        raise DatasetError("no activations to evaluate the SAE on; cache more tokens")
    x_all = acts.float()
    mean = x_all.mean(0)
    sq, tot, l0, fired = 0.0, 0.0, 0.0, torch.zeros(sae.cfg.d_sae, dtype=torch.bool)
    with torch.no_grad():
        for s in range(0, x_all.shape[0], chunk):
            x = x_all[s : s + chunk]
            f = sae.encode(x)
            xh = sae.decode(f)
            sq += float(((x - xh) ** 2).sum())
            tot += float(((x - mean) ** 2).sum())
            active = f > 0
            l0 += float(active.sum())
            fired |= active.any(0)
    n = x_all.shape[0]
    return {
        "mse": sq / (n * x_all.shape[1]),
        "explained_variance": 1 - sq / max(tot, 1e-12),
        "l0": l0 / n,
        "dead_fraction": float((~fired).float().mean()),
        "n_eval_tokens": n,
    }


def spliced_loss(model: Any, sae: Any, hook: str, windows: Int[torch.Tensor, "window ctx"],
                 skip_first: int = 1) -> tuple[float, float]:
    """(clean, spliced) mean next-token loss over ``windows`` [n, ctx] (-1 = padding), with the
    SAE reconstruction replacing the activation at every position from ``skip_first`` on."""
    import torch

    def splice(act, hook):  # noqa: ARG001
        out = act.clone()
        shape = act[:, skip_first:].shape
        flat = act[:, skip_first:].reshape(shape[0] * shape[1], -1)
        out[:, skip_first:] = sae.decode(sae.encode(flat.float())).to(act.dtype).reshape(shape)
        return out

    model.check_hook(hook)
    tokens = windows.long()
    valid = tokens >= 0
    tokens = torch.where(valid, tokens, torch.zeros_like(tokens))
    # loss only on targets after the spliced span starts and inside the real (unpadded) window
    target_ok = valid[:, 1:].clone()
    target_ok[:, :skip_first] = False
    losses = []
    with torch.no_grad():
        for hooks in ([], [(hook, splice)]):
            logits = model.run_with_hooks(tokens.to(model.device), fwd_hooks=hooks).float().cpu()
            lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None])[..., 0]
            losses.append(float(-(lp[target_ok]).mean()))
    return losses[0], losses[1]


def evaluate(
    model: Any | None, sae: Any, hook: str, eval_acts: Float[torch.Tensor, "token d_in"],
    eval_windows: Int[torch.Tensor, "window ctx"] | None = None, skip_first: int = 1,
    dead_acts: Float[torch.Tensor, "held d_in"] | None = None
) -> SAEMetrics:
    """Metrics on ``eval_acts``; dead features are counted on ``dead_acts`` too when given (a few
    thousand held-out tokens are too few to tell a rare feature from a dead one)."""
    check_fits(sae, eval_acts.shape[1], hook)
    m = SAEMetrics(**reconstruction_metrics(sae, eval_acts))
    if dead_acts is not None:
        import torch

        both = torch.cat([eval_acts, dead_acts.to(eval_acts.dtype)])
        m.dead_fraction = reconstruction_metrics(sae, both)["dead_fraction"]
    if model is not None and eval_windows is not None and len(eval_windows):
        m.ce_loss_clean, m.ce_loss_spliced = spliced_loss(model, sae, hook, eval_windows, skip_first)
        m.ce_loss_delta = m.ce_loss_spliced - m.ce_loss_clean
    return m


def split_cache(cache: Any, holdout: float = 0.05) -> tuple[Any, Any, Any]:
    """(train acts, held-out acts, held-out windows): the last windows are held out whole."""
    n_win = cache.windows.shape[0]
    if n_win < 2:
        raise DatasetError("the activation cache holds fewer than two windows; cache more tokens")
    first_eval = n_win - max(1, int(n_win * holdout))
    is_eval = cache.where[:, 0] >= first_eval
    return cache.acts[~is_eval], cache.acts[is_eval], cache.windows[first_eval:]


def train_sae(
    model: Any,
    cache: Any,
    kind: str = TRAIN.kind,
    width: int | None = TRAIN.width,
    k: int = TRAIN.k,
    epochs: float = 4.0,
    batch_size: int = TRAIN.batch_size,
    lr: float = TRAIN.lr,
    out: Path | None = None,
    eval_windows: int = 8,
    seed: int = TRAIN.seed,
    on_progress: Callable[[int, int], None] | None = None,
    **kw: Any,
) -> tuple[Any, SAEMetrics, dict[str, Any]]:
    """Train on the cache's training part, evaluate on its held-out windows, optionally save (the training
    settings' defaults are attribution.sae.config.TrainConfig's; width None: 8 features per input dimension)."""
    width = width or WIDTH_PER_DIM_IN_MEMORY * cache.d_in
    train, held, held_windows = split_cache(cache)
    sae = training_sae(kind, cache.d_in, width, k=k, model=cache.model, hook=cache.hook, **kw)
    started = time.time()
    sae = fit(sae, train, int(epochs * train.shape[0]), batch_size, lr, seed, on_progress=on_progress)
    seconds = time.time() - started
    # evaluate the inference SAE exactly as it is saved and loaded (BatchTopK becomes JumpReLU)
    import tempfile

    from sae_lens import SAE

    with tempfile.TemporaryDirectory() as tmp:
        sae.save_inference_model(tmp)
        inference = SAE.load_from_disk(tmp, device="cpu")
    metrics = evaluate(
        model,
        inference,
        cache.hook,
        held,
        held_windows[:eval_windows],
        cache.skip_first,
        dead_acts=train[-50_000:],
    )
    info = {
        "model": cache.model,
        "hook": cache.hook,
        "kind": kind,
        "width": width,
        "k": k,
        "train_tokens": int(train.shape[0]),
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "seconds": round(seconds, 1),
        "skip_first": cache.skip_first,
        "metrics": metrics.to_json(),
        "sae_lens_format": "cfg.json + sae_weights.safetensors (SAE.load_from_disk)",
    }
    check_trained(inference, info["metrics"])  # a diverged run (say --lr 1e30) writes nothing
    if out is not None:
        save_sae(inference, out, info)
    return inference, metrics, info


def check_trained(sae: Any, metrics: dict[str, Any]) -> None:
    """NonFiniteError (and nothing saved) when a trained dictionary's weights or metrics hold NaN/Infinity."""
    for name, p in sae.named_parameters():
        if not t_finite(p.detach()):
            raise NonFiniteError(f"sae run not saved: its weight {name} is not finite (training diverged: "
                                 "try a smaller --lr)")
    where = first_non_finite(metrics, "metrics")
    if where:
        raise NonFiniteError(f"sae run not saved: it holds a non-finite value ({where}; training diverged: "
                             "try a smaller --lr)")
