"""One call that builds a dictionary end to end: cache the corpus's activations to shards (once,
resumable), train, save in SAELens' format, and measure the saved form on held-out text with the
attention sink (position 0) left out.

Shards live under ``~/.cache/workbench/acts/<model>-english/{train,heldout}`` (``WORKBENCH_CACHE``
moves them); a shard set cached earlier for more hooks (scripts/build_dictionaries.py caches all
twelve hooks of the shipped dictionaries in one pass) is reused when it holds the needed hooks.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attribution.sae.config import TrainConfig
from attribution.sae.dictionary import load_dictionary
from attribution.sae.evaluate import evaluate_dictionary
from attribution.sae.shards import MANIFEST, ShardSet, cache_shards
from attribution.sae.train import check_trained
from attribution.sae.train_shards import (
    Progress,
    check_width,
    finish,
    save_transcoder,
    store_half,
    topk_threshold,
    train_topk_sae,
    train_topk_transcoder,
    write_info,
)
from core.corpus import english_texts
from core.errors import ModelFileError, NonFiniteError, RangeError

HELDOUT_TOKENS = 64_000


@dataclass(kw_only=True)
class BuildSpec(TrainConfig):
    """One dictionary built from disk shards: the training settings (TrainConfig's defaults; kind "topk", a
    residual SAE, or "transcoder"; width None: 4 features per d_model) and the hook it reads."""

    hook: str  # the input hook (for a transcoder: blocks.L.ln2.hook_normalized)
    l0_target: float | None = None  # transcoders: L0 the JumpReLU threshold aims at (default k)
    recipe: dict[str, Any] | None = None  # transcoders: train_topk_transcoder's recipe (epochs, schedule, ...)

    @property
    def layer(self) -> int:
        parts = self.hook.split(".")
        if len(parts) < 2 or parts[0] != "blocks" or not parts[1].isdigit():
            raise RangeError(f"hook {self.hook!r} is not inside a block (blocks.L....)")
        return int(parts[1])

    @property
    def hook_out(self) -> str:
        return f"blocks.{self.layer}.hook_mlp_out" if self.kind == "transcoder" else self.hook

    def hooks(self) -> list[str]:
        return [self.hook] if self.hook_out == self.hook else [self.hook, self.hook_out]


def transcoder_input(hook: str) -> str:
    """A transcoder reads the MLP's input: given blocks.L.<anything>, blocks.L.ln2.hook_normalized."""
    layer = hook.split(".")[1] if hook.startswith("blocks.") else None
    if layer is None or not layer.isdigit():
        raise RangeError(f"hook {hook!r} is not inside a block (blocks.L....)")
    return f"blocks.{layer}.ln2.hook_normalized"


def shards_root(model_name: str) -> Path:
    base = Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))
    # a local model directory's path, not only its base name, tells it from others of that name
    name = str(model_name).strip("/").replace("/", "_")
    return base / "acts" / f"{name}-english"


def _reusable(root: Path, hooks: list[str], skip_first: int) -> Path | None:
    """A shard directory under ``root`` (the split dir itself or a per-hook one) holding ``hooks``."""
    for cand in [root, *sorted(p for p in root.parent.glob(f"{root.name}-*") if p.is_dir())]:
        try:
            m = json.loads((cand / MANIFEST).read_text())
        except (OSError, ValueError):
            continue
        if set(hooks) <= set(m["hooks"]) and m.get("skip_first") == skip_first:
            return cand
    return None


def shard_dir(model_name: str, hooks: list[str], split: str, skip_first: int = 1) -> Path:
    """Where the shards of ``hooks`` live by default (`sae cache` writes there, `sae train` reads there): the split's
    directory or a per-hook sibling already holding them, else the split's directory if it is free, else a fresh
    per-hook sibling (so caching one hook never runs into another hook's shards)."""
    root = shards_root(model_name) / split
    target = _reusable(root, hooks, skip_first)
    if target is None:
        key = "+".join(h.replace(".", "_") for h in hooks)
        target = root if not root.exists() else root.parent / f"{split}-{key}"
    return target


def resumed_hooks(target: Path, hooks: list[str]) -> list[str]:
    """The hooks a cache into ``target`` writes: the directory's own (all of them) when it already holds shards,
    so a resumed cache stays one whole set; else ``hooks``."""
    return ShardSet.open(target).manifest["hooks"] if (target / MANIFEST).exists() else hooks


def ensure_shards(model: Any, hooks: list[str], split: str, n_tokens: int, skip_first: int = 1,
                  on_progress: Progress | None = None) -> ShardSet:
    target = shard_dir(model.name, hooks, split, skip_first)
    if (target / MANIFEST).exists():
        have = ShardSet.open(target)
        if set(hooks) <= set(have.manifest["hooks"]) and have.n_tokens >= n_tokens:
            return have

    def report(done: int, total: int) -> None:
        if on_progress:
            on_progress(f"cache {split}", done, total)

    return cache_shards(model, resumed_hooks(target, hooks), english_texts(split), target, n_tokens,
                        skip_first=skip_first, on_progress=report)


def build_dictionary(model: Any, spec: BuildSpec, out: Path, on_progress: Progress | None = None,
                     train_shards: ShardSet | None = None, heldout_shards: ShardSet | None = None,
                     eval_windows: int = 48, half: bool = False, eval_bf16: bool = False) -> dict[str, Any]:
    """Train one dictionary and save it to ``out`` (atomically); returns its workbench.json."""
    spec = replace(spec, width=spec.width_for(model.arch.d_model))
    check_width(spec.width, spec.k)
    if spec.kind not in ("topk", "transcoder"):
        raise RangeError(f"unknown dictionary kind {spec.kind!r}: topk, transcoder")
    for h in spec.hooks():
        model.check_hook(h)
    started = time.time()
    train = train_shards or ensure_shards(model, spec.hooks(), "train", spec.tokens, spec.skip_first, on_progress)
    held = heldout_shards or ensure_shards(model, spec.hooks(), "heldout", HELDOUT_TOKENS, spec.skip_first,
                                           on_progress)
    t_cache = time.time() - started
    tokens = min(spec.tokens, train.n_tokens)
    ckpt = out.with_name(f".{out.name}.ckpt")
    tmp = out.with_name(f".{out.name}.tmp")
    t0 = time.time()
    if spec.kind == "topk":
        sae, scale = train_topk_sae(train, spec.hook, spec.width, spec.k, tokens, ckpt, spec.batch_size,
                             spec.lr, spec.seed, on_progress)
        tmp.mkdir(parents=True, exist_ok=True)
        sae.save_inference_model(str(tmp))
        massive = {}
    else:
        w = train_topk_transcoder(train, spec.hook, spec.hook_out, spec.width, spec.k, tokens, ckpt,
                                  spec.batch_size, spec.lr, spec.seed, on_progress, recipe=spec.recipe)
        x = threshold_sample(train, spec.hook, hook_out=spec.hook_out, massive_norm=w["massive_norm"])
        tmp.mkdir(parents=True, exist_ok=True)
        save_transcoder(w, topk_threshold(w, x, spec.l0_target), tmp, model.name, spec.hook, spec.hook_out)
        scale = {"input": w["scale_in"], "output": w["scale_out"]}
        massive = {"massive_above": w["massive_above"], "massive_norm": w["massive_norm"],
                   "massive_train_tokens": w["massive_train"], "sparsity": (spec.recipe or {}).get("sparsity", "topk")}
    t_train = time.time() - t0
    if half:
        store_half(tmp)
    import shutil

    try:  # a diverged dictionary (NaN weights or metrics) leaves nothing behind, not even its .tmp
        dic = load_dictionary(tmp)
    except ModelFileError as exc:
        shutil.rmtree(tmp, ignore_errors=True)

        if "NaN or Infinity" in str(exc):
            raise NonFiniteError("dictionary not saved: its weights are not finite (training diverged: try a "
                                 "smaller --lr)") from None
        raise
    dic.info.update({"hook": spec.hook, "hook_out": spec.hook_out})
    if on_progress:
        on_progress("evaluate", 0, 1)
    metrics = evaluate_dictionary(model, dic, held, train, eval_windows, spec.skip_first, eval_bf16,
                                  massive.get("massive_norm"))
    try:
        check_trained(dic.sae, metrics)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info = {
        "model": model.name,
        "hook": spec.hook,
        "hook_out": spec.hook_out,
        "layer": spec.layer,
        "kind": spec.kind,
        "width": spec.width,
        "weights_dtype": "float16" if half else "float32",
        "k": spec.k,
        "train_tokens": tokens,
        "batch_size": spec.batch_size,
        "lr": spec.lr,
        "skip_first": spec.skip_first,
        **massive,  # transcoders: the massive-token rule (multiple, norm limit, training tokens left out)
        "activation_scale": scale,
        "corpus": "data/corpus/english.jsonl.gz (train split; metrics on the held-out split)",
        "seconds": {"cache": round(t_cache, 1), "train": round(t_train, 1)},
        "metrics": metrics,
        "threshold": None if spec.kind == "topk" else float(dic.sae.threshold[0]),
        "sae_lens_format": ("JumpReLUSkipTranscoder" if spec.kind == "transcoder" else "TopKSAE")
        + ": cfg.json + sae_weights.safetensors (sae_lens.SAE.load_from_disk)",
    }
    write_info(tmp, info)
    finish(tmp, out)
    shutil.rmtree(ckpt, ignore_errors=True)
    return info



def rethreshold(model: Any, path: Path, train: ShardSet, held: ShardSet, eval_windows: int = 48,
                l0: float | None = None) -> dict[str, Any]:
    """Refit a saved transcoder's JumpReLU threshold (topk_threshold on training text) and measure
    it again; rewrites its weights and workbench.json in place."""
    import torch
    from safetensors.torch import load_file, save_file

    info = json.loads((path / "workbench.json").read_text())
    weights_file = path / "sae_weights.safetensors"
    tensors = load_file(str(weights_file))
    w = {"W_enc": tensors["W_enc"].float(), "b_enc": tensors["b_enc"].float(), "k": info["k"]}
    limit = info.get("massive_norm")  # the tokens its training left out stay out (None: a build before the rule)
    t = topk_threshold(w, threshold_sample(train, info["hook"], hook_out=info.get("hook_out"), massive_norm=limit),
                       l0)
    tensors["threshold"] = torch.full_like(tensors["threshold"], t)
    save_file(tensors, str(weights_file))
    dic = load_dictionary(path)
    info["metrics"] = evaluate_dictionary(model, dic, held, train, eval_windows, info.get("skip_first", 1),
                                          massive_norm=limit)
    info["threshold"] = t
    info["threshold_l0_target"] = l0 or info["k"]
    write_info(path, info)
    return info



def threshold_sample(train: ShardSet, hook: str, n: int = 8_000, hook_out: str | None = None,
                     massive_norm: float | None = None) -> Any:
    """Training activations from every shard (the shards follow the corpus order, one source
    after another, so one shard alone would fit the threshold to one kind of text); with ``massive_norm``,
    without the tokens whose output at ``hook_out`` exceeds it (as in training)."""
    import torch

    n_shards = len(train.manifest["shards"])
    per = max(1, n // n_shards)
    parts = []
    for i in range(n_shards):
        if massive_norm is None or hook_out is None:
            parts.append(train.load(i, [hook])[hook][:per])
            continue
        t = train.load(i, [hook, hook_out])
        ok = t[hook_out][:per].float().norm(dim=1) <= massive_norm
        parts.append(t[hook][:per][ok])
    return torch.cat(parts)
