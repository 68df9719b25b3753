"""Train a cross-layer transcoder (attribution/sae/clt.py) from every layer's cached MLP input and output.

The activations are cached once, all layers in one forward per batch (``sets.cache_layers``: the per-layer sets'
cache, one shard directory per layer whose shards hold the same tokens), then read a shard at a time for all
layers, so memory holds one shard (16k tokens x 2 x L x d_model in float16: 1.1 GB on smollm2-135m), not the corpus.

Training follows the per-layer sets' recipe where it carries over (attribution/sae/train_shards.py): each layer's
input and output scaled to mean norm sqrt(d); the encoder reads its input standardized per dimension; the skip term
starts at the least-squares linear map; BatchTopK per layer (the k x batch largest pre-activations of that layer
over the batch), saved as JumpReLU with one threshold per layer, the (k n)-th largest pre-activation on training
tokens, so it fires as it trained; Adam with a linear warm-up (5%) and decay over the last 20%; several epochs;
tokens with a massive MLP output at any layer (over MASSIVE_ABOVE x that layer's median norm) left out. The loss is
the sum over layers of the squared error of the scaled outputs. The decoders are applied sparsely (only the active
features' rows: ``sparse_decode``'s embedding_bag), which is what makes the L(L+1)/2 decoders affordable on a CPU.

Resumes: a checkpoint (weights, step) every ``checkpoint_every`` steps; the batch order is fixed by the seed, so a
resumed build skips the batches done.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.config import TrainConfig
from attribution.sae.sets import MASSIVE_ABOVE, SetSpec, check_training, shuffled_docs
from core.errors import DatasetError, ModelFileError, RangeError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from attribution.sae.shards import ShardSet

Progress = Callable[[str, int, int], None]


@dataclass(kw_only=True)
class CLTSpec(TrainConfig):
    """What a CLT is trained with: TrainConfig's settings (k, batch_size, seed, skip_first), the sets' cache layout
    (held-out tokens, window, shard size) and their longer recipe (lr 2e-3, 3 epochs, the massive-token rule); its
    own, named here: narrower per layer than the sets (576 against 1152 on smollm2-135m), since its decoders are
    L(L+1)/2 matrices, 15x the decoder parameters at the same width."""

    model: str
    kind: str = "clt"
    width: int = 576
    tokens: int = 80_000
    lr: float = 2e-3
    epochs: int = 3
    heldout_tokens: int = SetSpec.heldout_tokens
    ctx: int = SetSpec.ctx
    shard_tokens: int = SetSpec.shard_tokens
    massive_above: float = MASSIVE_ABOVE

    def check(self) -> None:
        check_training(self.k, self.width, self.epochs, self.tokens, self.batch_size)

    def same_training(self) -> dict[str, Any]:
        """What a resumed (or finished) build must agree on; stored in its workbench.json as "training"."""
        keys = ("model", "width", "k", "tokens", "epochs", "batch_size", "lr", "seed", "ctx", "shard_tokens",
                "skip_first", "massive_above")
        return {k: getattr(self, k) for k in keys}


def _load_layers(shards: dict[int, ShardSet], index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Shard ``index`` of every layer: x, y [n, L, d] (float16)."""
    import torch

    xs, ys = [], []
    for layer in sorted(shards):
        t = shards[layer].load(index)
        hin, hout = shards[layer].hooks
        xs.append(t[hin])
        ys.append(t[hout])
    n = min(len(x) for x in xs)
    if any(len(x) != n for x in xs + ys):
        raise DatasetError(f"shard {index} holds different token counts across layers: the cache is damaged "
                           "(delete the CLT's .acts folder and build again)")
    return torch.stack(xs, 1), torch.stack(ys, 1)


def batches(shards: dict[int, ShardSet], batch_size: int, seed: int, epochs: int, skip: int = 0
            ) -> Iterator[tuple[Float[torch.Tensor, "batch layer d_in"], Float[torch.Tensor, "batch layer d_out"]]]:
    """(x, y) [batch, L, d] float32, shard by shard in a seeded order per epoch, shuffled within the shard; the
    remainder of each shard is dropped. ``skip``: batches already done (a resume), skipped without loading."""
    import torch

    ref = shards[min(shards)]
    sizes = [s["n_tokens"] for s in ref.manifest["shards"]]
    done = 0
    for epoch in range(epochs):
        order = list(range(len(sizes)))
        random.Random(seed * 1000 + epoch).shuffle(order)
        for i in order:
            n_b = sizes[i] // batch_size
            if done + n_b <= skip:
                done += n_b
                continue
            x, y = _load_layers(shards, i)
            perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed * 7919 + epoch * 31 + i))
            for b in range(n_b):
                if done >= skip:
                    idx = perm[b * batch_size:(b + 1) * batch_size]
                    yield x[idx].float(), y[idx].float()
                done += 1


def steps_of(shards: dict[int, ShardSet], batch_size: int, epochs: int) -> int:
    ref = shards[min(shards)]
    return epochs * sum(s["n_tokens"] // batch_size for s in ref.manifest["shards"])


class _Trainable:
    """The training form in scaled units: per layer s, f_s = BatchTopK(relu(std(x_s) W_enc[s] + b_enc[s])), and
    y_t = sum_{s<=t} f_s W_dec[s][:, t-s] + b_dec[t] + x_t W_skip[t]^T."""

    def __init__(self, n_layers: int, d: int, width: int, k: int, seed: int) -> None:
        import torch

        gen = torch.Generator().manual_seed(seed)
        w = torch.randn(n_layers, d, width, generator=gen)
        w = w / w.norm(dim=1, keepdim=True)
        self.L, self.d, self.width, self.k = n_layers, d, width, k
        dec = []
        for s in range(n_layers):  # the own-layer decoder starts small (the skip term carries the linear part);
            m = torch.zeros(width, n_layers - s, d)  # the later layers' start at zero
            m[:, 0] = w[s].T * 0.01
            dec.append(m.reshape(width, -1).requires_grad_())
        self.params = {"W_enc": w.requires_grad_(), "b_enc": torch.zeros(n_layers, width, requires_grad=True),
                       "b_dec": torch.zeros(n_layers, d, requires_grad=True),
                       "W_skip": torch.zeros(n_layers, d, d, requires_grad=True)}
        self.dec = dec
        self.mu = torch.zeros(n_layers, d)
        self.sigma = torch.ones(n_layers, d)

    def tensors(self) -> list[torch.Tensor]:  # mixed shapes: the parameters, then each layer's decoder
        return [*self.params.values(), *self.dec]

    def pre(self, x: Float[torch.Tensor, "batch layer d_in"]) -> Float[torch.Tensor, "batch layer feature"]:
        import torch

        return torch.einsum("bld,ldf->blf", (x - self.mu) / self.sigma, self.params["W_enc"]) + self.params["b_enc"]

    def forward(self, x: Float[torch.Tensor, "batch layer d_in"]
                ) -> Float[torch.Tensor, "batch layer d_out"]:
        import torch
        import torch.nn.functional as F  # noqa: N812

        B = x.shape[0]  # noqa: N806
        p = self.params
        pre = torch.relu(self.pre(x))
        y = p["b_dec"] + torch.einsum("bld,led->ble", x, p["W_skip"])
        for s in range(self.L):
            vals, idx = pre[:, s].flatten().topk(self.k * B)  # BatchTopK over this layer's batch
            tok, feat = idx // self.width, idx % self.width
            order = torch.argsort(tok)
            tok, feat, vals = tok[order], feat[order], vals[order]
            offsets = torch.searchsorted(tok, torch.arange(B))
            out = F.embedding_bag(feat, self.dec[s], offsets, mode="sum", per_sample_weights=vals)
            y = y + F.pad(out.view(B, self.L - s, self.d), (0, 0, s, 0))
        return y

    def folded(self, s_in: Float[torch.Tensor, " layer"], s_out: Float[torch.Tensor, " layer"]) -> dict[str, Any]:
        """Raw-unit weights: per-layer input/output scales and the standardization folded in."""
        p = {n: v.detach() for n, v in self.params.items()}
        w_enc = p["W_enc"] / self.sigma[:, :, None]
        dec = [(m.detach().view(self.width, self.L - s, self.d) / s_out[s:][None, :, None])
               for s, m in enumerate(self.dec)]
        return {"W_enc": w_enc * s_in[:, None, None], "b_enc": p["b_enc"] - (self.mu[:, None, :] @ w_enc)[:, 0],
                "W_dec": dec, "b_dec": p["b_dec"] / s_out[:, None],
                "W_skip": p["W_skip"] * s_in[:, None, None] / s_out[:, None, None]}


def _scales(x: torch.Tensor, y: torch.Tensor, above: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-layer input and output scales (to mean norm sqrt(d)) and massive-output limits (raw norms), from a
    sample [n, L, d] with the massive tokens left out."""
    import torch

    norms = y.float().norm(dim=2)  # [n, L]
    limit = above * norms.median(0).values if above else torch.full((y.shape[1],), float("inf"))
    ok = (norms <= limit).all(1)
    x, y = x[ok].float(), y[ok].float()
    d = x.shape[2]
    return d**0.5 / x.norm(dim=2).mean(0), d**0.5 / y.norm(dim=2).mean(0), limit


def train_clt(shards: dict[int, ShardSet], spec: CLTSpec, ckpt: Path, on_progress: Progress | None = None,
              checkpoint_every: int = 50) -> dict[str, Any]:
    """Train; returns raw-unit weights (plus scales, the massive limits and the steps)."""
    import torch
    from safetensors.torch import load_file, save_file

    from attribution.sae.shards import write_atomic
    from attribution.sae.train_shards import lr_factor

    torch.manual_seed(spec.seed)
    x0, y0 = _load_layers(shards, 0)
    x0, y0 = x0[:20_000], y0[:20_000]
    s_in, s_out, limit = _scales(x0, y0, spec.massive_above)
    ok = (y0.float().norm(dim=2) <= limit).all(1)
    xs, ys = x0[ok].float() * s_in[:, None], y0[ok].float() * s_out[:, None]
    n_layers, d = xs.shape[1], xs.shape[2]
    tc = _Trainable(n_layers, d, spec.width, spec.k, spec.seed)
    with torch.no_grad():  # the skip term and bias start at each layer's least-squares linear map
        ones = torch.ones(len(xs), 1)
        for layer in range(n_layers):
            sol = torch.linalg.lstsq(torch.cat([xs[:, layer], ones], 1), ys[:, layer]).solution
            tc.params["W_skip"][layer].copy_(sol[:-1].T)
            tc.params["b_dec"][layer].copy_(sol[-1])
        tc.mu = xs.mean(0)
        sd = xs.std(0)
        tc.sigma = torch.clamp(sd, min=1e-3 * sd.mean(1, keepdim=True) + 1e-12)
    del x0, y0, xs, ys
    steps = steps_of(shards, spec.batch_size, spec.epochs)
    step = 0
    state = ckpt / "clt_state.safetensors"
    if state.exists():
        saved = load_file(str(state))
        with torch.no_grad():
            for name, p in tc.params.items():
                p.copy_(saved[name])
            for s, m in enumerate(tc.dec):
                m.copy_(saved[f"dec_{s}"])
        step = int(saved["step"])
    opt = torch.optim.Adam(tc.tensors(), lr=spec.lr)
    warmup, decay_from = max(1, steps // 20), int(steps * 0.8)
    started = time.time()
    for x, y in batches(shards, spec.batch_size, spec.seed, spec.epochs, skip=step):
        keep = (y.norm(dim=2) <= limit).all(1)
        x, y = x[keep] * s_in[:, None], y[keep] * s_out[:, None]
        y_hat = tc.forward(x)
        loss = ((y - y_hat) ** 2).sum(-1).mean(0).sum()
        opt.zero_grad()
        loss.backward()
        for g in opt.param_groups:  # the sets' schedule: linear warm-up, decay over the last 20%
            g["lr"] = spec.lr * lr_factor(step, steps, warmup, "decay", decay_from)
        opt.step()
        step += 1
        if on_progress and (step % 5 == 0 or step == steps):
            rate = (time.time() - started) / max(1, step)
            on_progress(f"train clt (loss {float(loss.detach()):.1f}, {rate:.1f} s/step)", step * spec.batch_size,
                        steps * spec.batch_size)
        if step % checkpoint_every == 0 or step == steps:
            ckpt.mkdir(parents=True, exist_ok=True)
            t = {n: p.detach().contiguous() for n, p in tc.params.items()}
            t |= {f"dec_{s}": m.detach().contiguous() for s, m in enumerate(tc.dec)}
            t["step"] = torch.tensor(step)
            write_atomic(state, lambda p, t=t: save_file(t, str(p)))
    out = tc.folded(s_in, s_out)
    out.update(scale_in=s_in.tolist(), scale_out=s_out.tolist(), massive_norm=limit.tolist(), steps=steps)
    return out


def thresholds(weights: dict[str, Any], shards: dict[int, ShardSet], k: int, n: int = 8_000
               ) -> Float[torch.Tensor, "layer feature"]:
    """Per layer, the JumpReLU threshold that keeps k features per token over ``n`` training tokens (BatchTopK's
    global threshold), repeated over the layer's features [L, F]."""
    import torch

    from attribution.sae.train_shards import topk_threshold

    x, y = _load_layers(shards, 0)
    keep = (y.float().norm(dim=2) <= torch.tensor(weights["massive_norm"])).all(1)
    x = x[keep][:n].float()
    out = [topk_threshold({"W_enc": weights["W_enc"][layer], "b_enc": weights["b_enc"][layer], "k": k}, x[:, layer])
           for layer in range(x.shape[1])]
    return torch.tensor(out)[:, None].expand(-1, weights["W_enc"].shape[2]).contiguous()


def evaluate_clt(clt: Any, held: dict[int, ShardSet], massive_norm: list[float], batch: int = 512) -> dict[str, Any]:
    """Per layer on held-out tokens (massive ones left out, as in training): explained variance of the MLP output
    (every layer's features, cross-layer writes and skip), L0, the fraction of features that never fire."""
    import torch

    limit = torch.tensor(massive_norm)
    n_layers = clt.n_layers
    sse = torch.zeros(n_layers, dtype=torch.float64)
    sum_y = torch.zeros(n_layers, clt.d_model, dtype=torch.float64)
    sum_y2 = torch.zeros(n_layers, dtype=torch.float64)
    l0 = torch.zeros(n_layers, dtype=torch.float64)
    fired = torch.zeros(n_layers, clt.width, dtype=torch.bool)
    n, left_out = 0, 0
    ref = held[min(held)]
    with torch.no_grad():
        for i in range(len(ref.manifest["shards"])):
            x, y = _load_layers(held, i)
            keep = (y.float().norm(dim=2) <= limit).all(1)
            left_out += int((~keep).sum())
            x, y = x[keep].float(), y[keep].float()
            for a in range(0, len(x), batch):
                xb, yb = x[a:a + batch], y[a:a + batch]
                y_hat = clt.reconstruct_all(xb)
                sse += ((yb - y_hat) ** 2).sum((0, 2)).double()
                sum_y += yb.sum(0).double()
                sum_y2 += (yb**2).sum((0, 2)).double()
                for s in range(n_layers):
                    f = clt.encode(s, xb[:, s])
                    l0[s] += (f > 0).sum().double()
                    fired[s] |= (f > 0).any(0)
                n += len(xb)
    if n == 0:
        raise DatasetError("no held-out tokens to measure the CLT on")
    var = sum_y2 - (sum_y**2).sum(1) / n
    return {str(layer): {"explained_variance": float(1 - sse[layer] / var[layer]), "l0": float(l0[layer] / n),
                         "dead_fraction": float(1 - fired[layer].float().mean()), "heldout_tokens": n,
                         "massive_tokens": left_out} for layer in range(n_layers)}


def build_clt(model: Any, spec: CLTSpec, root: Path, on_progress: Progress | None = None,
              texts: dict[str, Any] | None = None, half: bool = True) -> dict[str, Any]:
    """Cache, train, threshold, save (atomically: a temporary directory renamed into ``root``) and measure; the
    workbench.json written. A build interrupted resumes from its cache and checkpoint (``.NAME.build`` beside
    ``root``); a finished CLT is not rebuilt: its summary is returned (other settings: RangeError; delete it to
    rebuild)."""
    from attribution.sae.clt import INFO, input_hook, load_clt, output_hook, save_clt
    from attribution.sae.sets import cache_layers, check_cache
    from attribution.sae.train_shards import finish
    from core.checks import read_json

    spec.check()
    if (root / INFO).is_file():  # built: its summary, as a finished set's build-set gives (with the same settings)
        built = (read_json(root / INFO, f"{root}/{INFO}", ModelFileError) or {}).get("training") or {}
        diff = [k for k, v in spec.same_training().items() if built.get(k) != v]
        if diff:
            raise RangeError(f"cross-layer transcoder {root.name!r} is built with other settings "
                             f"({', '.join(f'{k} {built.get(k)}' for k in diff)}): give another --name, or delete "
                             f"{root} to build it again")
        return summary(root)
    n_layers = int(model.arch.n_layers)
    layers = list(range(n_layers))
    for layer in layers:
        model.check_hook(input_hook(layer))
        model.check_hook(output_hook(layer))
    work = root.with_name(f".{root.name}.build")  # work/.acts/{train,heldout}/L5 as a set's cache (check_cache)
    acts, ckpt = work / ".acts", work / "ckpt"
    meta_file = work / "spec.json"
    if meta_file.is_file():  # a resumed build: the same settings, and a cache whose shards are whole
        theirs = read_json(meta_file, str(meta_file), ModelFileError)
        diff = [k for k, v in spec.same_training().items() if isinstance(theirs, dict) and theirs.get(k) != v]
        if diff:
            raise RangeError(f"cross-layer transcoder {root.name!r} was started with other settings "
                             f"({', '.join(f'{k} {theirs.get(k)}' for k in diff)}): resume it with those, or give "
                             "another --name")
        check_cache(work, layers)
    work.mkdir(parents=True, exist_ok=True)
    meta_file.write_text(json.dumps(spec.same_training()))
    src = texts or {}
    t0 = time.time()

    def report(stage: str) -> Callable[[int, int], None]:
        return lambda done, total: on_progress(stage, done, total) if on_progress else None

    train = cache_layers(model, layers, src.get("train") or shuffled_docs("train", spec.seed), acts / "train",
                         spec.tokens, spec.ctx, shard_tokens=spec.shard_tokens, skip_first=spec.skip_first,
                         on_progress=report("cache train"))
    held = cache_layers(model, layers, src.get("heldout") or shuffled_docs("heldout", spec.seed), acts / "heldout",
                        spec.heldout_tokens, spec.ctx, shard_tokens=spec.shard_tokens, skip_first=spec.skip_first,
                        on_progress=report("cache heldout"))
    t_cache = time.time() - t0
    t1 = time.time()
    w = train_clt(train, spec, ckpt, on_progress)
    w["threshold"] = thresholds(w, train, spec.k)
    t_train = time.time() - t1
    tmp = root.with_name(f".{root.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    info = {"model": model.name, "hook_in": "blocks.L.ln2.hook_normalized", "hook_out": "blocks.L.hook_mlp_out",
            "width": spec.width, "k": spec.k, "training": spec.same_training(),
            "train_tokens": train[0].n_tokens, "steps": w["steps"],
            "massive_norm": [x if x != float("inf") else None for x in w["massive_norm"]],  # None: no limit
            "activation_scale": {"input": w["scale_in"], "output": w["scale_out"]},
            "corpus": "data/corpus/english.jsonl.gz (train split; metrics on the held-out split)",
            "format": "circuit-tracer's CLT layout (W_enc_L/W_dec_L.safetensors) plus W_skip_L.safetensors"}
    save_clt(tmp, w, info, half=half)
    if on_progress:
        on_progress("evaluate", 0, 1)
    metrics = evaluate_clt(load_clt(tmp), held, w["massive_norm"])
    info.update(metrics=metrics, seconds={"cache": round(t_cache, 1), "train": round(t_train, 1),
                                          "evaluate": round(time.time() - t1 - t_train, 1)})
    written = read_json(tmp / INFO, f"{tmp}/{INFO}", ModelFileError)
    (tmp / INFO).write_text(json.dumps({**written, **info}, indent=1, default=str) + "\n")
    finish(tmp, root)
    shutil.rmtree(work, ignore_errors=True)
    return summary(root)


def summary(root: Path) -> dict[str, Any]:
    from attribution.sae.clt import INFO
    from core.checks import read_json

    info = read_json(root / INFO, f"{root}/{INFO}", ModelFileError)
    rows = [{"layer": int(k), **v} for k, v in sorted((info.get("metrics") or {}).items(), key=lambda kv: int(kv[0]))]
    evs = [r["explained_variance"] for r in rows]
    return {"name": root.name, "path": str(root), "model": info.get("model"), "width": info.get("width"),
            "k": info.get("k"), "train_tokens": info.get("train_tokens"), "seconds": info.get("seconds"),
            "mean_explained_variance": sum(evs) / len(evs) if evs else None, "quality": rows}
