"""The nnsight backend: the same cached-forward interface over nnsight tracing.

Locally it wraps the Hugging Face module already loaded from disk. For models too large for
one machine, nnsight runs the same trace on NDIF's hosted models with ``remote=True``::

    from nnsight import CONFIG
    CONFIG.set_default_api_key("...")            # your NDIF key
    m = wb.remote_model("meta-llama/Llama-3.1-70B")  # no weights are downloaded
    logits, cache = m.run_with_cache(m.to_tokens("The capital of France is"),
                                     names=["blocks.40.hook_resid_post"])

Only activations named in ``names`` travel back. Names follow TransformerLens conventions;
supported here: hook_resid_pre, hook_resid_post, hook_attn_out, attn.hook_pattern,
hook_mlp_out and mlp.hook_post, per block, for Llama-family (model.layers) and GPT-2
(transformer.h) layouts. Engines that need every internal (DPA, AtP) use the
TransformerLens backend; this one serves caching, probing and patching at scale.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from workbench.errors import RangeError, WorkbenchError
from workbench.models.hooked import ArchInfo, HookedModel

# hook -> (module path relative to a block, which part, execution order inside a block)
_BLOCK_HOOKS = {
    "hook_resid_pre": ("", "input", 0),
    "attn.hook_pattern": ("{attn}", "output1", 1),
    "hook_attn_out": ("{attn}", "output0", 2),
    "mlp.hook_post": ("{mlp}.{down}", "input", 3),
    "hook_mlp_out": ("{mlp}", "output", 4),
    "hook_resid_post": ("", "output", 5),
}
_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")


class _Hook:
    """What a TransformerLens hook function gets as ``hook``: here only its ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name


class NNsightModel(HookedModel):
    """A HookedModel whose forwards run through nnsight (locally or on NDIF)."""

    def __init__(self, hf_or_repo: Any, tokenizer: Any, name: str, remote: bool = False,
                 prepend_bos: bool | None = None) -> None:
        from nnsight import LanguageModel

        from workbench.models.backends import tokenizer_adds_bos

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.lm = LanguageModel(hf_or_repo, tokenizer=tokenizer) if tokenizer is not None \
                else LanguageModel(hf_or_repo)
        self.remote = remote
        cfg = self.lm.config
        self._gpt2 = cfg.model_type == "gpt2"
        n_heads = getattr(cfg, "num_attention_heads", getattr(cfg, "n_head", 0))
        d_model = getattr(cfg, "hidden_size", getattr(cfg, "n_embd", 0))
        arch = ArchInfo(
            n_layers=getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layer", 0)), n_heads=n_heads,
            n_kv_heads=getattr(cfg, "num_key_value_heads", None) or n_heads, d_model=d_model,
            d_head=getattr(cfg, "head_dim", None) or d_model // max(n_heads, 1),
            d_mlp=getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * d_model,
            d_vocab=cfg.vocab_size,
            n_ctx=getattr(cfg, "max_position_embeddings", getattr(cfg, "n_positions", 2048)),
            norm="layernorm" if self._gpt2 else "rmsnorm", mlp="gelu" if self._gpt2 else "swiglu",
            positional="learned" if self._gpt2 else "rope",
            act_fn=getattr(cfg, "hidden_act", getattr(cfg, "activation_function", None)),
        )
        super().__init__(tl=None, tokenizer=self.lm.tokenizer, name=name, kind="llm", backend="nnsight",
                         prepend_bos=tokenizer_adds_bos(self.lm.tokenizer) if prepend_bos is None else prepend_bos,
                         arch=arch)
        self._active_hooks: list[tuple[str, Any]] = []  # forward hooks of the open ``hooks`` blocks

    @property
    def device(self):
        import torch

        if self.remote:
            return torch.device("cpu")
        return self.lm.device  # nnsight's public property: the device of the module's first parameter

    def _blocks(self):
        return self.lm.transformer.h if self._gpt2 else self.lm.model.layers

    def _module(self, block: Any, rel: str) -> Any:
        parts = rel.format(attn="attn" if self._gpt2 else "self_attn", mlp="mlp",
                           down="c_proj" if self._gpt2 else "down_proj")
        mod = block
        for p in filter(None, parts.split(".")):
            mod = getattr(mod, p)
        return mod

    def _parse(self, name: str) -> tuple[int, str]:
        m = _NAME.match(name)
        if not m or m.group(2) not in _BLOCK_HOOKS:
            raise RangeError(f"hook {name!r} is not available on the nnsight backend; "
                             f"use one of blocks.L.{{{', '.join(_BLOCK_HOOKS)}}}")
        return self.check_layer(int(m.group(1))), m.group(2)

    def _site(self, blocks: Any, layer: int, hook: str) -> Any:
        """The tensor at a hook inside a running trace (the real value: nnsight 0.8 runs the trace's body
        beside the forward), to read or to change in place."""
        rel, part, _ = _BLOCK_HOOKS[hook]
        mod = self._module(blocks[layer], rel)
        value = mod.input if part == "input" else mod.output
        if part.startswith("output") and part != "output":
            value = value[int(part[-1])]
        return value[0] if isinstance(value, tuple) else value

    def _trace(self, tokens: Any, save: list[str] = (), fwd_hooks: list = (), start_at_layer: int | None = None):
        """One nnsight trace: ``fwd_hooks`` ((hook name, fn(act, hook)) as in TransformerLens) change the
        activations they are given, in place or by what they return; the names in ``save`` come back (after
        the hooks). With ``start_at_layer``, ``tokens`` is the residual stream entering that layer: the trace
        runs on placeholder ids of its shape and the block's input is replaced by it (positions are the
        same; the layers before run on the placeholders and are not read)."""
        import torch

        # (layer, place in the block, start 0 / hook 1 / save 2, name, action): nnsight reads modules in
        # execution order; at one site the residual replacing the input comes first, then hooks, then saves
        steps: list[tuple[int, int, int, str, Any]] = []
        for name, fn in [*self._active_hooks, *fwd_hooks]:
            layer, hook = self._parse(name)
            if _BLOCK_HOOKS[hook][1] == "output1":
                raise RangeError(f"hook {name!r} can be read, not changed, on the nnsight backend")
            steps.append((layer, _BLOCK_HOOKS[hook][2], 1, name, fn))
        for name in save:
            layer, hook = self._parse(name)
            steps.append((layer, _BLOCK_HOOKS[hook][2], 2, name, None))
        resid = None
        if start_at_layer is not None:
            resid = tokens
            steps.append((self.check_layer(start_at_layer), _BLOCK_HOOKS["hook_resid_pre"][2], 0,
                          f"blocks.{start_at_layer}.hook_resid_pre", None))
            tokens = torch.zeros(resid.shape[:2], dtype=torch.long, device=resid.device)
        steps.sort(key=lambda step: step[:3])
        saved: dict[str, Any] = {}
        blocks = self._blocks()
        with torch.no_grad(), self.lm.trace(self._tokens(tokens), remote=self.remote):
            for layer, _, kind, name, action in steps:
                value = self._site(blocks, layer, self._parse(name)[1])
                if kind == 0:  # the residual stream replaces the block's input
                    value.copy_(resid.to(value.dtype))
                elif kind == 2:
                    saved[name] = value.clone().save()
                else:
                    out = action(value, _Hook(name))
                    if out is not None and out is not value:
                        value.copy_(out)
            logits = self.lm.output.logits.save()
        return logits, saved

    def run_with_cache(self, tokens, names_filter=None, names: list[str] | None = None, **kwargs):
        """(logits, {hook name: tensor}) for the requested TransformerLens hook names."""
        wanted = names if names is not None else (names_filter if isinstance(names_filter, list) else [])
        if callable(names_filter):
            wanted = [f"blocks.{l}.{h}" for l in range(self.arch.n_layers) for h in _BLOCK_HOOKS
                      if names_filter(f"blocks.{l}.{h}") and (h != "attn.hook_pattern")]
        return self._trace(tokens, save=list(wanted))

    def logits(self, tokens):
        return self._trace(tokens)[0]

    def __call__(self, tokens, start_at_layer: int | None = None, **kwargs):
        """Logits [batch, pos, vocab]; with ``start_at_layer``, ``tokens`` is the residual stream entering
        that layer [batch, pos, d_model] (as TransformerLens' forward takes it)."""
        if kwargs:
            raise WorkbenchError(f"the nnsight backend's forward takes no {', '.join(sorted(kwargs))}")
        return self._trace(tokens, start_at_layer=start_at_layer)[0]

    def run_with_hooks(self, tokens, fwd_hooks=(), bwd_hooks=(), **kwargs):
        """Logits of a forward with TransformerLens-style forward hooks at the hook names this backend has."""
        if bwd_hooks or kwargs:
            raise WorkbenchError("the nnsight backend runs forward hooks only (no backward hooks or options)")
        return self._trace(tokens, fwd_hooks=list(fwd_hooks))[0]

    @contextmanager
    def hooks(self, fwd_hooks=(), bwd_hooks=()) -> Iterator[NNsightModel]:
        """Within the block every forward of this model (``model(...)``, ``logits``, ``run_with_cache``,
        generation) runs with ``fwd_hooks``, as TransformerLens' ``hooks`` context."""
        if bwd_hooks:
            raise WorkbenchError("the nnsight backend runs forward hooks only (no backward hooks)")
        for name, _ in fwd_hooks:
            self._parse(name)
        added = list(fwd_hooks)
        self._active_hooks = [*self._active_hooks, *added]
        try:
            yield self
        finally:
            self._active_hooks = self._active_hooks[: len(self._active_hooks) - len(added)]

    def greedy(self, tokens, max_new_tokens: int, kv_cache: bool = True) -> list[int]:
        """Greedy continuation ids, each step a whole-sequence trace (no KV cache), stopping after
        end-of-text; active ``hooks`` act at every step."""
        import torch

        n = max(0, min(int(max_new_tokens), self.arch.n_ctx - tokens.shape[1]))
        eos = getattr(self.tokenizer, "eos_token_id", None)
        new: list[int] = []
        for _ in range(n):
            nxt = int(self.logits(tokens)[0, -1].argmax())
            new.append(nxt)
            if nxt == eos:
                break
            tokens = torch.cat([tokens, tokens.new_tensor([[nxt]])], dim=1)
        return new

    def hook_names(self) -> list[str]:
        return [f"blocks.{l}.{h}" for l in range(self.arch.n_layers) for h in _BLOCK_HOOKS]

    def check_hook(self, name: str) -> str:
        self._parse(name)
        return name

    def weights(self, layer: int) -> dict[str, Any]:
        raise WorkbenchError("weights are read through the transformer_lens backend")


# what a remote model needs locally: its config and tokenizer (the weights stay on NDIF)
CONFIG_FILES = ["config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json", "vocab.*",
                "merges.txt", "*.tiktoken"]


def remote_model(repo_id: str, name: str | None = None) -> NNsightModel:
    """A hosted model on NDIF, traced remotely (needs nnsight's API key configured and the network). Its
    config and tokenizer come from the Hugging Face cache or the hub (a bounded look-up); neither is one
    ModelFileError line that says how to fetch them, never a raw OSError or a hang."""
    from workbench.models import hub

    if not isinstance(repo_id, str) or not hub.HUB_ID.match(repo_id):
        raise WorkbenchError(f"remote model {repo_id!r} is not a Hugging Face hub id (ORG/NAME, e.g. "
                             "meta-llama/Llama-3.1-8B)")
    fetch = " --include " + " ".join(repr(p) if "*" in p else p for p in CONFIG_FILES)
    if not _config_cached(repo_id):
        if hub.offline():
            raise hub.not_fetchable(repo_id, repo_id, "HF_HUB_OFFLINE is set", fetch)
        try:
            hub.lookup(repo_id)
        except Exception as exc:  # unreachable, missing or gated: one line
            raise hub.not_fetchable(repo_id, repo_id, hub.first_line(exc), fetch) from None
    try:
        return NNsightModel(repo_id, tokenizer=None, name=name or repo_id, remote=True)
    except OSError as exc:
        raise hub.not_fetchable(repo_id, repo_id, hub.first_line(exc), fetch) from None


def _config_cached(repo_id: str) -> bool:
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id, local_files_only=True, allow_patterns=CONFIG_FILES)
    except Exception:  # not cached, or an unusable cache entry: the hub is asked
        return False
    from pathlib import Path

    return (Path(folder) / "config.json").is_file()
