"""Train dictionaries from activation shards on disk: TopK SAEs with SAELens' trainer, and TopK
skip transcoders (MLP input -> MLP output) with a loop of our own, since SAELens ships transcoder
inference classes but no transcoder trainer. Both resume after an interruption from their last
checkpoint, report progress through a callback, normalize activations to norm sqrt(d) during
training (SAELens' ``expected_average_only_in``), fold that scale into the saved weights, and
record it in workbench.json as ``activation_scale``.

A transcoder is trained with TopK and saved as SAELens' ``JumpReLUSkipTranscoder``: one threshold
per feature, set to the mean k-th largest pre-activation over held-out batches (how SAELens turns
BatchTopK into JumpReLU), so the saved file runs in stock SAELens; its metrics are measured on
the saved form. Its encoder reads the input standardized per dimension (mean and spread of the first
50,000 tokens; folded into W_enc and b_enc when saved): without it, an input with one large, nearly constant
dimension (gemma3-270m's MLP inputs) left 85-95% of the features dead.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.config import TRAIN
from attribution.sae.shards import ShardSet, shard_batches
from attribution.sae.train import training_sae
from core.errors import RangeError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def _scale(x) -> float:
    """Factor that brings activations to mean norm sqrt(d) (SAELens' expected_average_only_in)."""
    return float(x.shape[1] ** 0.5 / x.float().norm(dim=1).mean())


def train_topk_sae(shards: ShardSet, hook: str, width: int, k: int, n_tokens: int, ckpt: Path,
                   batch_size: int = TRAIN.batch_size, lr: float = TRAIN.lr, seed: int = TRAIN.seed,
                   on_progress: Progress | None = None, n_checkpoints: int = 8) -> tuple[Any, float | None]:
    """SAELens TopK SAE trained on ``n_tokens`` activations of ``hook``; returns the training SAE
    (normalization folded in) and the folded scale. Checkpoints go to ``ckpt`` and resume."""
    import sae_lens as sl
    import torch
    from sae_lens.config import SAETrainerConfig

    torch.manual_seed(seed)
    steps = max(1, n_tokens // batch_size)
    sample = shards.load(0, [hook])[hook][:50_000].float()
    sae = training_sae("topk", sample.shape[1], width, k=k, model=shards.manifest["model"], hook=hook)
    cfg = SAETrainerConfig(
        total_training_samples=steps * batch_size, train_batch_size_samples=batch_size, lr=lr,
        lr_end=lr / 10, lr_warm_up_steps=min(200, steps // 10), lr_decay_steps=steps // 5,
        lr_scheduler_name="constant", device="cpu", dead_feature_window=min(1000, max(50, steps // 4)),
        feature_sampling_window=2000, n_batches_for_norm_estimate=50,
        n_checkpoints=n_checkpoints, checkpoint_path=str(ckpt), save_final_checkpoint=False,
    )
    resume = _latest_checkpoint(ckpt)
    if resume is None:
        with torch.no_grad():  # b_dec starts at the (normalised) data mean: features learn deviations
            sae.b_dec.copy_(sample.mean(0) * _scale(sample))
    else:
        state = sl.TopKTrainingSAE.load_from_disk(str(resume), device="cpu")
        sae.load_state_dict(state.state_dict())
    done = 0
    data = shard_batches(shards, hook, batch_size, seed)
    trainer = sl.SAETrainer(cfg=cfg, sae=sae, data_provider=data)
    if resume is not None:
        trainer.load_trainer_state(resume)
        done = trainer.n_training_steps
        trainer.data_provider = shard_batches(shards, hook, batch_size, seed, skip=done)

    def reporting(it):
        for i, b in enumerate(it, start=done):
            if on_progress and i % 20 == 0:
                on_progress(f"train {hook}", i * batch_size, steps * batch_size)
            yield b

    trainer.data_provider = reporting(trainer.data_provider)
    folded: list[float] = []
    fold = sae.fold_activation_norm_scaling_factor

    def record(factor: float) -> None:  # fit() folds SAELens' estimated scale and forgets it
        folded.append(float(factor))
        fold(factor)

    sae.fold_activation_norm_scaling_factor = record
    sae = trainer.fit()
    return sae, (folded[0] if folded else None)


def _latest_checkpoint(ckpt: Path) -> Path | None:
    if not ckpt.is_dir():
        return None
    done = [p for p in ckpt.iterdir() if p.is_dir() and (p / "cfg.json").exists()
            and any(p.glob("*trainer_state*"))]
    return max(done, key=lambda p: p.stat().st_mtime) if done else None


class _TopKSkipTranscoder:
    """The trainable form: f = TopK(relu(x W_enc + b_enc)); y = f W_dec + b_dec + x W_skip^T."""

    def __init__(self, d_in: int, d_out: int, width: int, k: int, seed: int, init: str = "small",
                 batch_topk: bool = False) -> None:
        import torch

        gen = torch.Generator().manual_seed(seed)
        if init == "transpose":  # the field's TopK init: unit decoder rows in the output space, encoder = W_dec^T
            w = torch.randn(d_out, width, generator=gen)
            w = w / w.norm(dim=0, keepdim=True)
            dec_scale = 1.0
            if d_out != d_in:
                raise RangeError("the transpose init needs the input and output widths equal")
        else:
            w = torch.randn(d_in, width, generator=gen)
            w = w / w.norm(dim=0, keepdim=True)
            dec_scale = 0.01
        self.k = k
        self.batch_topk = batch_topk
        self.params = {
            "W_enc": w.clone().requires_grad_(),
            "b_enc": torch.zeros(width, requires_grad=True),
            # "small": a small decoder, the features start near silent beside the least-squares skip term
            "W_dec": (w.T.contiguous() * dec_scale).requires_grad_(),
            "b_dec": torch.zeros(d_out, requires_grad=True),
            "W_skip": torch.zeros(d_out, d_in, requires_grad=True),
        }
        # the encoder reads its input standardized per dimension (set by standardize): gemma3's MLP input has
        # one dimension with ~80% of the energy and almost constant, so random encoder directions all read
        # that dimension, the same features win TopK on every token and 85-95% of them die
        self.mu = torch.zeros(d_in)
        self.sigma = torch.ones(d_in)

    def standardize(self, x) -> None:
        """Per-dimension mean and spread of (a sample of) the scaled input, for the encoder only."""
        import torch

        x = x.float()
        sd = x.std(0)
        self.mu = x.mean(0)
        self.sigma = torch.clamp(sd, min=1e-3 * float(sd.mean()) + 1e-12)

    def pre(self, x):
        return ((x - self.mu) / self.sigma) @ self.params["W_enc"] + self.params["b_enc"]

    def folded(self, s_in: float, s_out: float) -> dict[str, Any]:
        """Raw-unit weights: the input and output scales and the encoder's standardization folded in."""
        p = {n: v.detach() for n, v in self.params.items()}
        w_enc = p["W_enc"] / self.sigma[:, None]
        return {
            "W_enc": w_enc * s_in, "b_enc": p["b_enc"] - self.mu @ w_enc, "W_dec": p["W_dec"] / s_out,
            "b_dec": p["b_dec"] / s_out, "W_skip": p["W_skip"] * s_in / s_out,
            "scale_in": s_in, "scale_out": s_out, "k": self.k,
        }

    def forward(self, x, dead=None, k_aux: int = 256):
        import torch

        p = self.params
        pre = self.pre(x)
        if self.batch_topk:  # BatchTopK (Bussmann et al. 2024): the k x batch largest over the whole batch, so a
            # token with a large output may take more features than k, as the JumpReLU form it is saved as will
            flat = torch.relu(pre).flatten()
            vals, idx = flat.topk(self.k * pre.shape[0])
            f = torch.zeros_like(flat).scatter(0, idx, vals).view_as(pre)
        else:
            vals, idx = torch.relu(pre).topk(self.k, dim=-1)
            f = torch.zeros_like(pre).scatter(-1, idx, vals)
        y = f @ p["W_dec"] + p["b_dec"] + x @ p["W_skip"].T
        aux = None
        if dead is not None and bool(dead.any()):
            # AuxK (Gao et al. 2024): the dead features' top activations model what the live ones miss
            masked = torch.where(dead, torch.relu(pre), torch.zeros_like(pre))
            kk = min(k_aux, int(dead.sum()))
            av, ai = masked.topk(kk, dim=-1)
            aux = torch.zeros_like(pre).scatter(-1, ai, av) @ p["W_dec"]
        return y, f, aux


def massive_norm(y: Float[torch.Tensor, "token d_out"], above: float) -> float | None:
    """The MLP-output norm above which a token is a massive activation: ``above`` times the median norm of
    ``y`` (a sample of the layer's output); None when ``above`` is 0 (no token is left out)."""
    if not above:
        return None
    return float(above) * float(y.float().norm(dim=1).median())


def count_massive(shards: ShardSet, hook_out: str, limit: float | None) -> int:
    """How many of the cached tokens have an output norm above ``limit`` (0 without a limit)."""
    if limit is None:
        return 0
    return sum(int((shards.load(i, [hook_out])[hook_out].float().norm(dim=1) > limit).sum())
               for i in range(len(shards.manifest["shards"])))


def lr_factor(step: int, steps: int, warmup: int, schedule: str, decay_from: int) -> float:
    import math

    if step < warmup:
        return (step + 1) / warmup
    if schedule == "cosine":
        done = (step - warmup) / max(1, steps - warmup)
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * done))
    if schedule == "constant" or step < decay_from:
        return 1.0
    return max(0.05, (steps - step) / (steps - decay_from))


def train_topk_transcoder(shards: ShardSet, hook_in: str, hook_out: str, width: int, k: int,
                          n_tokens: int, ckpt: Path, batch_size: int = TRAIN.batch_size, lr: float = TRAIN.lr,
                          seed: int = TRAIN.seed, on_progress: Progress | None = None,
                          checkpoint_every: int = 200, recipe: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train a TopK skip transcoder; returns raw-scale weights (normalization folded) plus the
    input and output scales.

    ``recipe`` (the efficient-training ingredients measured in results/sae/replacement.md; the defaults are the
    set builder's): init "small" (random unit encoder, decoder its transpose x 0.01) or "transpose" (unit decoder,
    encoder its transpose); aux (AuxK on dead features, True) and aux_window (steps without firing before a
    feature counts as dead; default a quarter of the steps, 50..1000); warmup (linear lr warm-up steps, 0);
    schedule "decay" (linear decay over the last 20%) | "cosine" | "constant"; sparsity "topk" (k per token) |
    "batchtopk" (k per token on average over a batch, as the saved JumpReLU form fires); epochs (passes over the
    cached activations, 1); massive_above (0: off): tokens whose MLP-output norm exceeds this multiple of the median
    norm (massive_norm, on the first shard's sample) are left out of every step, of the scales, the skip term's
    least-squares start and the encoder's standardization, as position 0 is left out of the shards. The weights
    carry the limit (``massive_norm``, raw units; None when off) and how many cached tokens it left out
    (``massive_train``), so the held-out figures leave out the same tokens. The rule is about training and
    scoring only: a replacement model (circuits/replacement.py) still runs every token through the transcoder,
    and its error node carries what the transcoder misses at a massive token."""
    r = {"init": "small", "aux": True, "aux_window": None, "warmup": 0, "schedule": "decay", "epochs": 1,
         "massive_above": 0, "sparsity": "topk", **(recipe or {})}
    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(seed)
    steps = max(1, int(r["epochs"]) * n_tokens // batch_size)
    first = shards.load(0, [hook_in, hook_out])
    limit = massive_norm(first[hook_out][:50_000], float(r["massive_above"]))
    x0, y0 = first[hook_in][:50_000], first[hook_out][:50_000]
    if limit is not None:  # a single massive token would set the output scale and the skip term's fit
        ok = y0.float().norm(dim=1) <= limit
        x0, y0 = x0[ok], y0[ok]
    s_in, s_out = _scale(x0), _scale(y0)
    d_in, d_out = first[hook_in].shape[1], first[hook_out].shape[1]
    if r["sparsity"] not in ("topk", "batchtopk"):
        raise RangeError(f"unknown sparsity {r['sparsity']!r} (topk or batchtopk)")
    tc = _TopKSkipTranscoder(d_in, d_out, width, k, seed, r["init"], batch_topk=r["sparsity"] == "batchtopk")
    with torch.no_grad():  # the skip term starts at the least-squares linear map, so features
        # only have to model what is nonlinear in the MLP (training from zero is far slower)
        xs = x0.float() * s_in
        ys = y0.float() * s_out
        sol = torch.linalg.lstsq(torch.cat([xs, torch.ones(len(xs), 1)], 1), ys).solution
        tc.params["W_skip"].copy_(sol[:-1].T)
        tc.params["b_dec"].copy_(sol[-1])
    tc.standardize(xs)
    opt = torch.optim.Adam(tc.params.values(), lr=lr, betas=(0.9, 0.999))
    step = 0
    state_file = ckpt / "transcoder_state.safetensors"
    last_fired = torch.zeros(width, dtype=torch.long)
    if state_file.exists():
        saved = load_file(str(state_file))
        with torch.no_grad():
            for name, p in tc.params.items():
                p.copy_(saved[name])
        # a checkpoint from before the standardization trained on the plain input: resume it that way
        tc.mu = saved.get("enc_mu", torch.zeros(d_in)).float()
        tc.sigma = saved.get("enc_sigma", torch.ones(d_in)).float()
        last_fired = saved["last_fired"].long()
        step = int(saved["step"])
        opt = torch.optim.Adam(tc.params.values(), lr=lr)  # moments restart; weights resume
    data = shard_batches(shards, hook_in, batch_size, seed, skip=step, hook_out=hook_out)
    decay_from = int(steps * 0.8)
    # steps without firing before a feature counts as dead
    window = int(r["aux_window"] or min(1000, max(50, steps // 4)))
    while step < steps:
        x, y = next(data)
        if limit is not None:
            ok = y.norm(dim=1) <= limit
            if not bool(ok.all()):
                x, y = x[ok], y[ok]
        x, y = x * s_in, y * s_out
        dead = (step - last_fired) > window
        y_hat, f, aux = tc.forward(x, dead if (r["aux"] and step > window) else None)
        err = y - y_hat
        loss = (err**2).sum(-1).mean()
        if aux is not None:
            loss = loss + (1 / 32) * ((err.detach() - aux) ** 2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        for g in opt.param_groups:
            g["lr"] = lr * lr_factor(step, steps, int(r["warmup"]), str(r["schedule"]), decay_from)
        opt.step()
        last_fired[(f > 0).any(0)] = step
        step += 1
        if on_progress and step % 20 == 0:
            on_progress(f"train {hook_in}->{hook_out}", step * batch_size, steps * batch_size)
        if step % checkpoint_every == 0 or step == steps:
            ckpt.mkdir(parents=True, exist_ok=True)
            tensors = {n: p.detach().contiguous().clone() for n, p in tc.params.items()}
            tensors["last_fired"] = last_fired.clone()
            tensors["enc_mu"], tensors["enc_sigma"] = tc.mu.contiguous(), tc.sigma.contiguous()
            tensors["step"] = torch.tensor(step)
            tmp = state_file.with_suffix(".tmp")
            save_file(tensors, str(tmp))
            tmp.replace(state_file)
    out = tc.folded(s_in, s_out)  # features unchanged, outputs back in raw units
    out.update(massive_above=float(r["massive_above"]), massive_norm=limit,
               massive_train=count_massive(shards, hook_out, limit))
    return out


def save_transcoder(weights: dict[str, Any], threshold: float, path: Path, model: str,
                    hook_in: str, hook_out: str) -> None:
    """Write SAELens' JumpReLUSkipTranscoder format (cfg.json + sae_weights.safetensors)."""
    import torch
    from sae_lens.saes.sae import SAEMetadata
    from sae_lens.saes.transcoder import JumpReLUSkipTranscoder, JumpReLUSkipTranscoderConfig

    d_in, width = weights["W_enc"].shape
    cfg = JumpReLUSkipTranscoderConfig(
        d_in=d_in, d_sae=width, d_out=weights["W_dec"].shape[1], apply_b_dec_to_input=False,
        metadata=SAEMetadata(model_name=model, hook_name=hook_in, hook_name_out=hook_out),
    )
    tc = JumpReLUSkipTranscoder(cfg)
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec", "W_skip"):
            getattr(tc, name).copy_(weights[name])
        tc.threshold.fill_(threshold)
    tc.save_model(str(path))


def topk_threshold(weights: dict[str, Any], x: Float[torch.Tensor, "token d_in"], l0: float | None = None) -> float:
    """The JumpReLU threshold that keeps k features per token on average over ``x``: the (k n)-th
    largest post-ReLU pre-activation over all n tokens (BatchTopK's global threshold). The mean of
    per-token k-th values, which we used first, let L0 drift to 70 for k = 64. ``l0`` aims lower
    than k, since held-out text fires a few more features than the training text it is fitted on."""
    import torch

    pre = torch.relu(x.float() @ weights["W_enc"] + weights["b_enc"]).flatten()
    n_keep = int((l0 or weights["k"]) * x.shape[0])
    return float(pre.topk(min(n_keep, pre.numel())).values[-1])


def finish(tmp: Path, out: Path) -> Path:
    """Move a finished dictionary directory into place atomically (replacing an older one)."""
    if out.exists():
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out)
    return out


def write_info(path: Path, info: dict[str, Any]) -> None:
    (path / "workbench.json").write_text(json.dumps(info, indent=1, default=str) + "\n")


def check_width(width: int, k: int) -> None:
    if width < 1 or not 0 < k <= width:
        raise RangeError(f"k={k} must be between 1 and the dictionary width {width}")



def store_half(path: Path) -> None:
    """Rewrite a saved dictionary's weights in float16 (half the size in the repository); the
    loader computes in float32. Metrics are measured after this, on what is shipped."""
    from safetensors.torch import load_file, save_file

    weights = path / "sae_weights.safetensors"
    tensors = {k: v.half().contiguous() for k, v in load_file(str(weights)).items()}
    save_file(tensors, str(weights))
    cfg_path = path / "cfg.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dtype"] = "float16"
    cfg_path.write_text(json.dumps(cfg))
