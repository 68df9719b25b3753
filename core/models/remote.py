"""The nnsight backend: the same hooked-model interface over nnsight tracing (nnsight 0.8's public API).

Locally it wraps the Hugging Face module already loaded from disk. For models too large for one machine,
nnsight runs the same trace on NDIF's hosted models with ``remote=True`` (only the transport differs: the
trace's code is the local one)::

    from nnsight import CONFIG
    CONFIG.set_default_api_key("...")            # your NDIF key
    m = wb.remote_model("meta-llama/Llama-3.1-70B")  # no weights are downloaded
    logits, cache = m.run_with_cache(m.to_tokens("The capital of France is"),
                                     names=["blocks.40.hook_resid_post"])

Only activations named in ``names`` travel back. Names follow TransformerLens conventions. Every layout
(Llama-style ``model.layers`` and GPT-2's ``transformer.h``) has hook_resid_pre, hook_attn_out,
attn.hook_pattern, mlp.hook_post, hook_mlp_out, hook_resid_post and hook_embed. Llama-style models without
q/k norms (llama, mistral, qwen2: SmolLM2 among them) have the rest of what the engines read: ln1/ln2/ln_final
hook_scale, attn.hook_q/k/v/z and hook_rot_q/k, hook_resid_mid, mlp.hook_pre/hook_pre_linear; loaded locally,
they also give the weights in TransformerLens' layout, so DPA, the lens and head patching run here with the
TransformerLens backend's numbers. What does not run refuses in one BackendError line
(``NNsightModel.refusal``; the table is README's "Engines x backends").
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from core.errors import BackendError, RangeError, WorkbenchError
from core.models import hub
from core.models.hooked import ArchInfo, HookedModel, NormSite
from core.models.tokens import tokenizer_adds_bos

# hook -> (module path relative to a block, "input" / "output" / "output0" / "output1", execution order of that
# module value inside the block, how the hook's tensor follows from it). One module value is read once per
# trace (nnsight 0.8 reads modules in execution order); several hooks may derive from it.
_GPT2_HOOKS = {
    "hook_resid_pre": ("", "input", 0, None),
    "attn.hook_pattern": ("attn", "output1", 1, None),
    "hook_attn_out": ("attn", "output0", 1, None),
    "mlp.hook_post": ("mlp.c_proj", "input", 2, None),
    "hook_mlp_out": ("mlp", "output", 3, None),
    "hook_resid_post": ("", "output", 4, None),
}
_LLAMA_BASIC = {
    "hook_resid_pre": ("", "input", 0, None),
    "attn.hook_pattern": ("self_attn", "output1", 5, None),
    "hook_attn_out": ("self_attn", "output0", 5, None),
    "mlp.hook_post": ("mlp.down_proj", "input", 9, None),
    "hook_mlp_out": ("mlp", "output", 10, None),
    "hook_resid_post": ("", "output", 11, None),
}
# Llama-style blocks without q/k norms: the rest of TransformerLens' hooks, derived from module values
_LLAMA_HOOKS = {
    **_LLAMA_BASIC,
    "ln1.hook_scale": ("", "input", 0, "scale"),
    "ln1.hook_normalized": ("", "input", 0, "normalized"),
    "attn.hook_q": ("self_attn.q_proj", "output", 1, "q"),
    "attn.hook_rot_q": ("self_attn.q_proj", "output", 1, "rot_q"),
    "attn.hook_k": ("self_attn.k_proj", "output", 2, "kv"),
    "attn.hook_rot_k": ("self_attn.k_proj", "output", 2, "rot_kv"),
    "attn.hook_v": ("self_attn.v_proj", "output", 3, "kv"),
    "attn.hook_z": ("self_attn.o_proj", "input", 4, "q"),
    "hook_resid_mid": ("post_attention_layernorm", "input", 6, None),
    "ln2.hook_scale": ("post_attention_layernorm", "input", 6, "scale"),
    "ln2.hook_normalized": ("post_attention_layernorm", "input", 6, "normalized"),
    "mlp.hook_pre": ("mlp.gate_proj", "output", 7, None),
    "mlp.hook_pre_linear": ("mlp.up_proj", "output", 8, None),
}
# hooks outside the blocks: (module path from the root, part, layer slot: -1 before block 0, None after the last)
_GLOBAL = {
    "gpt2": {"hook_embed": ("transformer.wte", "output", -1), "hook_pos_embed": ("transformer.wpe", "output", -1)},
    "llama": {"hook_embed": ("model.embed_tokens", "output", -1)},
    "llama+": {"hook_embed": ("model.embed_tokens", "output", -1),
               "ln_final.hook_scale": ("model.norm", "input", None),
               "ln_final.hook_normalized": ("model.norm", "input", None)},
}
_READ_ONLY = {"output1", "scale", "normalized", "rot_q", "rot_kv"}  # derived: a hook reads them, cannot change them
LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2"})  # model.layers blocks with no q/k norms, post-norms or caps
_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")

# what each engine needs of a backend; NNsightModel.refusal says which of these a model lacks
ENGINE_NEEDS: dict[str, str] = {
    # attribution methods (attribution/methods.py)
    "dpa": "internals", "dpa_path": "gradients", "random": "hooks", "gradient": "gradients",
    "gradient_norm": "gradients", "input_x_gradient": "gradients", "integrated_gradients": "gradients",
    "attention_last": "hooks", "attention_mean": "hooks", "rollout": "hooks", "atp": "gradients",
    "atp_foil": "gradients", "ifr": "transformer_lens", "dla": "transformer_lens",
    "activation_patching": "transformer_lens",
    # the other engines
    "lens": "internals", "tuned lens": "internals", "patch (resid, attn, mlp, mlps)": "hooks",
    "patch (heads)": "internals", "path patching": "transformer_lens", "circuit": "transformer_lens",
    "feature attribution": "internals", "feature graph": "internals", "sae steering": "hooks",
    "probe": "hooks", "concept vectors": "hooks",
}
_NEED_WORDS = {
    "internals": "the weights and every internal activation, which the nnsight backend gives for local "
                 f"Llama-style models ({', '.join(sorted(LLAMA_LIKE))}) only",
    "gradients": "gradients through the forward (backward hooks), which the nnsight backend does not run",
    "transformer_lens": "TransformerLens modules (an ActivationCache, per-head inputs, stop_at_layer)",
}


class _Hook:
    """What a TransformerLens hook function gets as ``hook``: here only its ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name


def remote_timeout() -> float:
    """Seconds to wait for NDIF before a remote trace is refused (WORKBENCH_REMOTE_TIMEOUT, default 5)."""
    try:
        return max(0.1, float(os.environ.get("WORKBENCH_REMOTE_TIMEOUT", "5")))
    except ValueError:
        return 5.0


def check_ndif(host: str | None = None, timeout: float | None = None) -> None:
    """A BackendError in one line unless NDIF answers (any HTTP status) within ``timeout`` seconds: a
    remote trace without a network, or behind a silent proxy, is refused at once rather than after
    nnsight's own waits (10 s to connect, 600 s to read)."""
    import httpx
    from nnsight import CONFIG

    host = host or CONFIG.API.HOST
    timeout = remote_timeout() if timeout is None else timeout
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout)) as client:
            client.get(host)
    except httpx.HTTPError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BackendError(f"nnsight remote=True: NDIF at {host} did not answer within {timeout:g} s ({reason}); "
                           "check the network, or load the model locally (remote=False)") from None


class NNsightModel(HookedModel):
    """A HookedModel whose forwards run through nnsight (locally or on NDIF)."""

    def __init__(self, hf_or_repo: Any, tokenizer: Any, name: str, remote: bool = False,
                 prepend_bos: bool | None = None) -> None:
        from nnsight import LanguageModel

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.lm = LanguageModel(hf_or_repo, tokenizer=tokenizer) if tokenizer is not None \
                else LanguageModel(hf_or_repo)
        # the Hugging Face module we loaded ourselves (None for a hosted model): its weights, rotary tables and
        # norms are read from it directly, never from nnsight's private attributes
        self.hf = None if isinstance(hf_or_repo, str) else hf_or_repo
        self.remote = remote
        cfg = self.lm.config
        self._gpt2 = cfg.model_type == "gpt2"
        self.layout = "gpt2" if self._gpt2 else ("llama+" if cfg.model_type in LLAMA_LIKE else "llama")
        self._hook_table = {"gpt2": _GPT2_HOOKS, "llama": _LLAMA_BASIC, "llama+": _LLAMA_HOOKS}[self.layout]
        n_heads = getattr(cfg, "num_attention_heads", getattr(cfg, "n_head", 0))
        d_model = getattr(cfg, "hidden_size", getattr(cfg, "n_embd", 0))
        act = getattr(cfg, "hidden_act", getattr(cfg, "activation_function", None))
        arch = ArchInfo(
            n_layers=getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layer", 0)), n_heads=n_heads,
            n_kv_heads=getattr(cfg, "num_key_value_heads", None) or n_heads, d_model=d_model,
            d_head=getattr(cfg, "head_dim", None) or d_model // max(n_heads, 1),
            d_mlp=getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * d_model,
            d_vocab=cfg.vocab_size,
            n_ctx=getattr(cfg, "max_position_embeddings", getattr(cfg, "n_positions", 2048)),
            norm="layernorm" if self._gpt2 else "rmsnorm",
            mlp="gelu" if self._gpt2 else ("swiglu" if act == "silu" else f"glu-{act}"),
            positional="learned" if self._gpt2 else "rope", act_fn=act,
        )
        super().__init__(tl=None, tokenizer=self.lm.tokenizer, name=name, kind="llm", backend="nnsight",
                         prepend_bos=tokenizer_adds_bos(self.lm.tokenizer) if prepend_bos is None else prepend_bos,
                         arch=arch)
        self._active_hooks: list[tuple[str, Any]] = []  # forward hooks of the open ``hooks`` blocks
        self._ndif_checked = False

    @property
    def device(self):
        import torch

        if self.remote:
            return torch.device("cpu")
        return self.lm.device  # nnsight's public property: the device of the module's first parameter

    # -- what runs here ---------------------------------------------------------------------
    @property
    def internals(self) -> bool:
        """Whether the weights and every internal activation the engines read are here: a local Llama-style
        model (a hosted model's weights stay on NDIF)."""
        return self.layout == "llama+" and self.hf is not None and not self.remote

    def refusal(self, engine: str) -> str | None:
        """Why ``engine`` (a key of ENGINE_NEEDS) does not run on this model, or None when it does."""
        need = ENGINE_NEEDS.get(engine, "transformer_lens")
        if need == "hooks" or (need == "internals" and self.internals):
            return None
        why = _NEED_WORDS[need]
        if need == "internals" and self.remote:
            why += " (a remote model's weights stay on NDIF)"
        return why

    def _need_internals(self, what: str) -> None:
        if not self.internals:
            raise BackendError(f"{what} of {self.name} is not available on the nnsight backend: it needs "
                               f"{_NEED_WORDS['internals']}" + (" (not a remote one)" if self.remote else ""))

    @property
    def cfg(self) -> Any:
        """The configuration facts DPA checks (attribution.dpa.linear.check_supported), as TransformerLens
        names them; None where the internals are not here."""
        if not self.internals:
            return None
        return SimpleNamespace(positional_embedding_type="rotary", clip_qkv=None, use_logn_attn=False,
                               use_attention_sinks=False, act_fn=self.arch.act_fn)

    # -- hook sites -------------------------------------------------------------------------
    def _blocks(self):
        return self.lm.transformer.h if self._gpt2 else self.lm.model.layers

    def _parse(self, name: str) -> tuple[int, str]:
        """(layer, hook) of a hook name; hooks outside the blocks sit at layer -1 (before block 0) or
        n_layers (after the last)."""
        outside = _GLOBAL[self.layout]
        if name in outside:
            slot = outside[name][2]
            return (-1 if slot == -1 else self.arch.n_layers), name
        m = _NAME.match(name)
        if not m or m.group(2) not in self._hook_table:
            raise RangeError(f"hook {name!r} is not available on the nnsight backend for {self.name}; "
                             f"use one of {', '.join(outside)}, blocks.L.{{{', '.join(self._hook_table)}}}")
        return self.check_layer(int(m.group(1))), m.group(2)

    def _spec(self, hook: str) -> tuple[str, str, int, str | None]:
        if hook in _GLOBAL[self.layout]:
            path, part, _ = _GLOBAL[self.layout][hook]
            return path, part, 0, hook.rsplit("hook_", 1)[1] if hook.startswith("ln_final") else None
        return self._hook_table[hook]

    def _fetch(self, layer: int, hook: str) -> Any:
        """The module value (input or output) a hook derives from, inside a running trace."""
        path, part, _, _ = self._spec(hook)
        mod = self.lm if hook in _GLOBAL[self.layout] else self._blocks()[layer]
        for p in filter(None, path.split(".")):
            mod = getattr(mod, p)
        return mod.input if part == "input" else mod.output

    def _derive(self, raw: Any, hook: str, rope: Any) -> Any:
        """The hook's tensor from its module value: the real tensor (or a view of it, so that changing it in
        place changes the forward), or a value computed from it (a norm's scale, rotated queries/keys)."""
        _, part, _, derive = self._spec(hook)
        value = raw[int(part[-1])] if part in ("output0", "output1") else raw
        value = value[0] if isinstance(value, tuple) else value
        if derive is None:
            return value
        if derive in ("scale", "normalized"):  # RMSNorm divides by sqrt(mean x^2 + eps): TL's hook_scale
            eps = float(getattr(self.lm.config, "rms_norm_eps", 1e-6))
            scale = (value.pow(2).mean(-1, keepdim=True) + eps).sqrt()
            return scale if derive == "scale" else value / scale
        heads = self.arch.n_heads if derive in ("q", "rot_q") else self.arch.n_kv_heads
        value = value.view(*value.shape[:-1], heads, self.arch.d_head)
        if derive.startswith("rot"):  # RoPE over halves (Llama), as HF applies it after this projection
            import torch

            cos, sin = (t[:, None, :].to(value.dtype) for t in rope)  # [pos, 1, d_head]
            half = value.shape[-1] // 2
            value = value * cos + torch.cat((-value[..., half:], value[..., :half]), dim=-1) * sin
        return value

    def _trace(self, tokens: Any, save: list[str] = (), fwd_hooks: list = (), start_at_layer: int | None = None):
        """One nnsight trace: ``fwd_hooks`` ((hook name, fn(act, hook)) as in TransformerLens) change the
        activations they are given, in place or by what they return; the names in ``save`` come back (after
        the hooks). With ``start_at_layer``, ``tokens`` is the residual stream entering that layer: the trace
        runs on placeholder ids of its shape and the block's input is replaced by it (positions are the
        same; the layers before run on the placeholders and are not read). The same code runs locally and,
        with ``remote=True``, on NDIF: only ``lm.trace``'s transport differs."""
        import torch

        # (layer, module value's order in the block, start 0 / hook 1 / save 2, name, action): nnsight reads
        # modules in execution order; at one site the residual replacing the input comes first, then hooks,
        # then saves
        steps: list[tuple[int, int, int, str, Any]] = []
        for name, fn in [*self._active_hooks, *fwd_hooks]:
            layer, hook = self._parse(name)
            spec = self._spec(hook)
            if spec[1] in _READ_ONLY or spec[3] in _READ_ONLY:
                raise RangeError(f"hook {name!r} can be read, not changed, on the nnsight backend")
            steps.append((layer, spec[2], 1, name, fn))
        for name in save:
            layer, hook = self._parse(name)
            steps.append((layer, self._spec(hook)[2], 2, name, None))
        resid = None
        if start_at_layer is not None:
            resid = tokens
            steps.append((self.check_layer(start_at_layer), 0, 0, f"blocks.{start_at_layer}.hook_resid_pre", None))
            tokens = torch.zeros(resid.shape[:2], dtype=torch.long, device=resid.device)
        steps.sort(key=lambda step: step[:3])
        ids = self._tokens(tokens)
        rope = None
        if any(self._spec(self._parse(s[3])[1])[3] in ("rot_q", "rot_kv") for s in steps):
            rope = self._rope_tables(ids.shape[1])
        if self.remote:
            self._check_remote()
        saved: dict[str, Any] = {}
        raw: dict[tuple[int, str, str], Any] = {}
        try:
            with torch.no_grad(), self.lm.trace(ids, remote=self.remote):
                for layer, _, kind, name, action in steps:
                    hook = self._parse(name)[1]
                    path, part = self._spec(hook)[:2]
                    key = (layer, path, "input" if part == "input" else "output")
                    if key not in raw:  # each module value once (a second read would wait for another call)
                        raw[key] = self._fetch(layer, hook)
                    value = self._derive(raw[key], hook, rope)
                    if kind == 0:  # the residual stream replaces the block's input
                        value.copy_(resid.to(value.dtype))
                    elif kind == 2:
                        saved[name] = value.clone().save()
                    else:
                        out = action(value, _Hook(name))
                        if out is not None and out is not value:
                            value.copy_(out)
                logits = self.lm.output.logits.save()
        except WorkbenchError:
            raise
        except Exception as exc:
            if not self.remote:
                raise
            raise BackendError(f"nnsight remote trace of {self.name} failed: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        return logits, saved

    def _check_remote(self) -> None:
        if not self._ndif_checked:
            check_ndif()
            self._ndif_checked = True

    def run_with_cache(self, tokens, names_filter=None, names: list[str] | None = None, **kwargs):
        """(logits, {hook name: tensor}) for the requested TransformerLens hook names (a list, or a filter
        function over hook_names())."""
        if callable(names_filter):
            wanted = [n for n in self.hook_names() if names_filter(n)]
        elif names is not None:
            wanted = list(names)
        else:
            wanted = list(names_filter) if isinstance(names_filter, list | tuple | set | frozenset) else []
        return self._trace(tokens, save=wanted)

    def logits(self, tokens):
        return self._trace(tokens)[0]

    def __call__(self, tokens, start_at_layer: int | None = None, **kwargs):
        """Logits [batch, pos, vocab]; with ``start_at_layer``, ``tokens`` is the residual stream entering
        that layer [batch, pos, d_model] (as TransformerLens' forward takes it)."""
        if kwargs:
            raise BackendError(f"the nnsight backend's forward takes no {', '.join(sorted(kwargs))}")
        return self._trace(tokens, start_at_layer=start_at_layer)[0]

    def run_with_hooks(self, tokens, fwd_hooks=(), bwd_hooks=(), **kwargs):
        """Logits of a forward with TransformerLens-style forward hooks at the hook names this backend has."""
        if bwd_hooks or kwargs:
            raise BackendError("the nnsight backend runs forward hooks only (no backward hooks or options)")
        return self._trace(tokens, fwd_hooks=list(fwd_hooks))[0]

    @contextmanager
    def hooks(self, fwd_hooks=(), bwd_hooks=()) -> Iterator[NNsightModel]:
        """Within the block every forward of this model (``model(...)``, ``logits``, ``run_with_cache``,
        generation) runs with ``fwd_hooks``, as TransformerLens' ``hooks`` context."""
        if bwd_hooks:
            raise BackendError("the nnsight backend runs forward hooks only (no backward hooks)")
        for name, _ in fwd_hooks:
            self._parse(name)
        added = list(fwd_hooks)
        self._active_hooks = [*self._active_hooks, *added]
        try:
            yield self
        finally:
            self._active_hooks = self._active_hooks[: len(self._active_hooks) - len(added)]

    @contextmanager
    def split_inputs(self) -> Iterator[NNsightModel]:
        raise BackendError(f"per-head inputs (edge-level circuits) do not run on the nnsight backend ({self.name}); "
                           "load it with backend='transformer_lens'")
        yield self  # pragma: no cover - a generator for contextmanager

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
        names = list(_GLOBAL[self.layout])
        blocks = [h for h in self._hook_table if self.internals or not h.startswith("attn.hook_rot")]
        return names + [f"blocks.{l}.{h}" for l in range(self.arch.n_layers) for h in blocks]

    def check_hook(self, name: str) -> str:
        self._parse(name)
        return name

    def has_hook(self, name: str) -> bool:
        return name in set(self.hook_names())

    @property
    def can_stop_at_layer(self) -> bool:
        return False

    # -- weights and frozen pieces (local Llama-style models) ----------------------------------
    def _block(self, layer: int) -> Any:
        self._need_internals("the weights")
        return self.hf.model.layers[self.check_layer(layer)]

    def has_mlp(self, layer: int) -> bool:
        self.check_layer(layer)
        return True

    def n_experts(self, layer: int) -> int | None:
        return None

    def weights(self, layer: int, repeat_kv: bool = True) -> dict[str, Any]:
        """Layer weights in TransformerLens' layout (see HookedModel.weights), read from the HF module."""
        blk = self._block(layer)
        attn, mlp = blk.self_attn, blk.mlp
        a = self.arch
        rep = a.n_heads // a.n_kv_heads if repeat_kv else 1

        def heads(lin: Any, n: int) -> tuple[Any, Any]:  # [n * d_head, d_model] -> [n, d_model, d_head]
            w = lin.weight.T.reshape(a.d_model, n, a.d_head).permute(1, 0, 2)
            b = None if lin.bias is None else lin.bias.reshape(n, a.d_head)
            return w.repeat_interleave(rep, 0) if n != a.n_heads else w, \
                (b.repeat_interleave(rep, 0) if b is not None and n != a.n_heads else b)

        w: dict[str, Any] = {}
        w["W_Q"], w["b_Q"] = heads(attn.q_proj, a.n_heads)
        w["W_K"], w["b_K"] = heads(attn.k_proj, a.n_kv_heads)
        w["W_V"], w["b_V"] = heads(attn.v_proj, a.n_kv_heads)
        w["W_O"] = attn.o_proj.weight.T.reshape(a.n_heads, a.d_head, a.d_model)
        w["b_O"] = attn.o_proj.bias
        w["ln1.w"], w["ln1.b"] = blk.input_layernorm.weight, None
        w["ln2.w"], w["ln2.b"] = blk.post_attention_layernorm.weight, None
        w["W_in"], w["W_gate"], w["W_out"] = mlp.up_proj.weight.T, mlp.gate_proj.weight.T, mlp.down_proj.weight.T
        w["b_in"], w["b_out"] = mlp.up_proj.bias, mlp.down_proj.bias
        return w

    def norm_sites(self, layer: int) -> dict[str, NormSite | None]:
        blk = self._block(layer)
        return {"attn_pre": NormSite(f"blocks.{layer}.ln1.hook_scale", blk.input_layernorm.weight, None),
                "attn_post": None,
                "mlp_pre": NormSite(f"blocks.{layer}.ln2.hook_scale", blk.post_attention_layernorm.weight, None),
                "mlp_post": None}

    def qk_norm_sites(self, layer: int) -> None:
        return None

    def act_fn(self, layer: int) -> Any:
        return self._block(layer).mlp.act_fn

    def attn_scale(self, layer: int) -> float:
        return 1.0 / float(self._block(layer).self_attn.scaling)

    def _rope_tables(self, seq: int) -> tuple[Any, Any]:
        """(cos, sin) [seq, d_head] from the model's own rotary embedding (its scaling included)."""
        import torch

        self._need_internals("the rotary tables")
        pos = torch.arange(seq, device=self.device)[None]
        probe = torch.zeros(1, seq, self.arch.d_head, device=self.device, dtype=self.hf.dtype)
        with torch.no_grad():
            cos, sin = self.hf.model.rotary_emb(probe, pos)
        return cos[0], sin[0]

    def rope(self, layer: int, seq_len: int):
        self.check_layer(layer)
        cos, sin = self._rope_tables(seq_len)
        return cos, sin, False, int(cos.shape[-1])

    def _final_norm(self, x: Any) -> Any:
        self._need_internals("the final norm")
        return self.hf.model.norm(x)

    def final_logits(self, resid):
        return self.read_out(resid[:, -1])

    def read_out(self, resid):
        return self._final_norm(resid) @ self.W_U

    @property
    def W_U(self):
        self._need_internals("the unembedding")
        return self.hf.lm_head.weight.T

    @property
    def b_U(self):
        return None

    @property
    def W_E(self):
        self._need_internals("the embedding")
        return self.hf.model.embed_tokens.weight

    @property
    def W_pos(self):
        return None

    def final_norm_weight(self):
        self._need_internals("the final norm")
        return self.hf.model.norm.weight

    def final_norm_bias(self):
        return None

    def head_writes(self, z, layer: int, heads_first: bool = False):
        import torch

        W_O = self.weights(layer)["W_O"]
        if not heads_first:
            return torch.einsum("bphd,hdm->bphm", z, W_O)
        return torch.einsum("bphd,hdm->hbpm", z, W_O)

    def state_dict(self) -> dict[str, Any]:
        self._need_internals("the state dict")
        return self.hf.state_dict()

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> Any:
        raise BackendError("the nnsight backend's weights are the Hugging Face module's; load them there")

    def n_params(self) -> int:
        if self.hf is None:
            raise BackendError(f"a remote model's parameters stay on NDIF ({self.name})")
        return sum(p.numel() for p in self.hf.parameters())

    def sample(self, tokens, max_new_tokens: int, temperature: float = 1.0):
        raise BackendError("sampling does not run on the nnsight backend (greedy generation does)")

    def to(self, device: str) -> NNsightModel:
        if self.hf is None:
            raise BackendError(f"a remote model runs on NDIF ({self.name}); it has no local device")
        self.lm.to(device)
        return self


# what a remote model needs locally: its config and tokenizer (the weights stay on NDIF)
CONFIG_FILES = ["config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json", "vocab.*",
                "merges.txt", "*.tiktoken"]


def remote_model(repo_id: str, name: str | None = None) -> NNsightModel:
    """A hosted model on NDIF, traced remotely (needs nnsight's API key configured and the network). Its
    config and tokenizer come from the Hugging Face cache or the hub (a bounded look-up); neither is one
    ModelFileError line that says how to fetch them, never a raw OSError or a hang."""
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
