"""Cache activations at one hook of any HookedModel over a text corpus.

The corpus is cut into context windows of ``ctx`` tokens; activations at every position except
the first are kept (the first position of a window is an attention sink in most LLMs, with a
norm a hundred times the others, and would dominate any reconstruction loss). Activations are
stored in float16 next to the token windows, so dashboards can show each activation's context.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.corpus import load_corpus
from core.checks import Fields, read_json, read_tensors
from core.errors import DatasetError, RangeError
from core.models.tokens import SymbolTokenizer
from core.models.zoo import DATA_DIR

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

ACTS_FILE = "acts.safetensors"


@dataclass
class ActivationCache:
    """acts [token, d_in] (float16), windows [window, ctx] token ids (-1 = padding),
    where [token, 2] = (window, position) of each activation."""

    acts: Float[torch.Tensor, "token d_in"]
    windows: Int[torch.Tensor, "window ctx"]
    where: Int[torch.Tensor, "token 2"]
    model: str
    hook: str
    skip_first: int = 1

    @property
    def n_tokens(self) -> int:
        return int(self.acts.shape[0])

    @property
    def d_in(self) -> int:
        return int(self.acts.shape[1])

    def save(self, path: Path, extra: dict[str, Any] | None = None) -> Path:
        from safetensors.torch import save_file

        path.mkdir(parents=True, exist_ok=True)
        save_file(
            {
                "acts": self.acts.contiguous(),
                "windows": self.windows.contiguous(),
                "where": self.where.contiguous(),
            },
            str(path / ACTS_FILE),
        )
        meta = {
            "model": self.model,
            "hook": self.hook,
            "n_tokens": self.n_tokens,
            "d_in": self.d_in,
            "skip_first": self.skip_first,
            **(extra or {}),
        }
        (path / "cache.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> ActivationCache:
        if not (path / ACTS_FILE).exists():
            raise DatasetError(f"no activation cache at {path}")
        what = f"activation cache {path}"
        meta = Fields(read_json(path / "cache.json", f"{what} (cache.json)", DatasetError), f"{what} (cache.json)",
                      DatasetError)
        t = read_tensors(path / ACTS_FILE, f"{what} ({ACTS_FILE})", DatasetError, finite=True)
        missing = [k for k in ("acts", "windows", "where") if k not in t]
        if missing:
            raise DatasetError(f"{what} is damaged: no tensor {missing[0]!r}")
        return cls(t["acts"], t["windows"], t["where"], meta.text("model"), meta.text("hook"),
                   meta.integer("skip_first", 1, lo=0, hi=1 << 20))


def token_windows(
    model: Any, texts: Iterable[str | list[int]], ctx: int, max_windows_per_text: int = 4, min_len: int = 16
) -> Iterable[list[int]]:
    """Non-overlapping windows of token ids, a few per text so no single document dominates.
    An item may also be a list of token ids (toy models)."""
    for text in texts:
        if not isinstance(text, str):
            ids = [int(i) for i in text]
            for w in range(min(max_windows_per_text, (len(ids) + ctx - 1) // ctx)):
                chunk = ids[w * ctx : (w + 1) * ctx]
                if len(chunk) >= min(min_len, len(ids)):
                    yield chunk
            continue
        try:
            ids = model.to_tokens(text[: ctx * max_windows_per_text * 8])[0].tolist()
        except Exception:  # a prompt longer than the context: cut by characters and retry
            ids = model.to_tokens(text[: ctx * 4])[0].tolist()
        for w in range(min(max_windows_per_text, (len(ids) + ctx - 1) // ctx)):
            chunk = ids[w * ctx : (w + 1) * ctx]
            if len(chunk) >= min_len:
                yield chunk


def stop_layer(hook: str) -> int | None:
    """The number of blocks a forward needs to reach a hook (None = the whole model)."""
    parts = hook.split(".")
    if parts[0] == "blocks" and len(parts) > 1 and parts[1].isdigit():
        return int(parts[1]) + 1
    return None


# Hooks that hold no vector per token: attention weights and scores are [head, query, key]
NOT_PER_TOKEN = ("hook_pattern", "hook_attn_scores")


def check_token_hook(hook: str) -> None:
    """RangeError for a hook without one activation vector per token (what a dictionary is trained on)."""
    if hook.rsplit(".", 1)[-1] in NOT_PER_TOKEN:
        raise RangeError(f"--hook {hook} holds attention weights [head, query, key], not one vector per token: "
                         "a dictionary needs a per-position hook (hook_resid_post, attn.hook_z, mlp.hook_post, ...)")


def cache_activations(
    model: Any,
    hook: str,
    texts: Iterable[str | list[int]],
    n_tokens: int,
    ctx: int = 128,
    batch_size: int = 16,
    skip_first: int = 1,
    on_batch: Callable[[int], None] | None = None,
) -> ActivationCache:
    """Run the model over windows of ``texts`` until ``n_tokens`` activations are collected."""
    import torch

    model.check_hook(hook)
    check_token_hook(hook)
    stop = stop_layer(hook)
    acts, wins, where = [], [], []
    got, batch = 0, []

    def flush() -> int:
        nonlocal got
        width = max(len(b) for b in batch)
        pad = torch.full((len(batch), width), -1, dtype=torch.long)
        for i, b in enumerate(batch):
            pad[i, : len(b)] = torch.tensor(b)
        # pad with the last real token; padded positions are never kept (causal model)
        tokens = torch.where(pad < 0, pad.new_tensor([b[-1] for b in batch]).unsqueeze(1), pad)
        kwargs = {"stop_at_layer": stop} if stop is not None and _supports_stop(model) else {}
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens.to(model.device), names_filter=[hook], **kwargs)
        a = cache[hook]
        if a.dim() > 3:  # per-head hooks: flatten heads into the feature axis
            a = a.flatten(2)
        for i, b in enumerate(batch):
            keep = a[i, skip_first : len(b)].float().cpu()
            acts.append(keep.half())
            w_idx = len(wins)
            wins.append(pad[i])
            pos = torch.arange(skip_first, len(b))
            where.append(torch.stack([torch.full_like(pos, w_idx), pos], 1))
            got += keep.shape[0]
        return got

    for chunk in token_windows(model, texts, ctx):
        batch.append(chunk)
        if len(batch) == batch_size:
            flush()
            batch = []
            if on_batch:
                on_batch(got)
            if got >= n_tokens:
                break
    if batch and got < n_tokens:
        flush()
    if not acts:
        raise DatasetError("the corpus gave no token windows to cache")
    width = max(w.shape[0] for w in wins)
    windows = torch.full((len(wins), width), -1, dtype=torch.int32)
    for i, w in enumerate(wins):
        windows[i, : w.shape[0]] = w.int()
    where_t = torch.cat(where).int()[:n_tokens]
    windows = windows[: int(where_t[-1, 0]) + 1]  # drop windows whose tokens were all cut off
    return ActivationCache(torch.cat(acts)[:n_tokens], windows, where_t, model.name, hook, skip_first)


def _supports_stop(model: Any) -> bool:
    return bool(getattr(model, "can_stop_at_layer", False))


def model_texts(
    model: Any, corpus: Path | None, n_tokens: int, ctx: int, seed: int = 0, held_out: bool = False
) -> list:
    """Inputs to cache: corpus documents for LLMs; for word-level toy models, sequences of their own
    task (its training split) or, without a task, uniformly random symbol sequences.

    ``held_out`` reads the corpus from its end (training reads it from the start), so evaluations
    of an SAE trained here do not reuse its training text; toy models then draw a new seed."""
    import torch

    if not isinstance(model.tokenizer, SymbolTokenizer):
        texts = [d.text for d in load_corpus(corpus or default_corpus())]
        return texts[::-1] if held_out else texts
    seed = seed + 1000 if held_out else seed
    n_seq = n_tokens // max(1, min(ctx, model.arch.n_ctx) - 1) + 2
    task = (model.info or {}).get("task_source")  # a toy model's own task, put there by its loader (core.models)
    if task is not None:
        tokens = task.batch("train", n_seq, seed).tokens
        if tokens.dtype.is_floating_point:
            raise DatasetError(f"{model.name} reads vectors, not tokens: SAE caching needs token inputs")
        return tokens.tolist()
    gen = torch.Generator().manual_seed(seed)
    length = min(ctx, model.arch.n_ctx)
    return torch.randint(0, model.arch.d_vocab, (n_seq, length), generator=gen).tolist()


def default_corpus() -> Path:
    return DATA_DIR / "corpus"
