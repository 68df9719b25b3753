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
hook_scale, attn.hook_q/k/v/z and hook_rot_q/k, hook_resid_mid, mlp.hook_pre/hook_pre_linear, and their weights
in TransformerLens' layout, read inside a trace (core/models/nnsight_weights.py), local or hosted alike. Qwen 3
has them too, with its per-head q/k norms' scales (attn.q_norm/k_norm.hook_scale); Gemma 3 without soft caps
(gemma3-270m) as well, with its q/k norms' scales (attn.q_norm/k_norm.hook_scale), post-norms
(ln1_post, ln2_post), 1 + w norm gains, scaled embedding, query_pre_attn_scalar and sliding windows; Gemma 2 as well
(Gemma 3's layout without q/k norms), with its soft-capped attention scores (attn.hook_attn_scores, computed in the
trace from the rotated q and k) and its capped logits; OLMo-2 (norms after each sublayer only, as TransformerLens' ln1
and ln2; q/k norms over the whole projection, their scales attn.q_norm/k_norm.hook_scale [batch, pos, 1]); Phi-3 with
full rotary (attn.hook_q/k/v and mlp.hook_pre/hook_pre_linear are slices of its fused qkv_proj and gate_up_proj
outputs, views a hook can change, their gradients sliced the same). Gradients
of a metric come from nnsight's backward tracing inside the forward's trace (``traced_grads``); per-head inputs
for the edge-level circuits from core/models/nnsight_split.py. Every engine runs here with the TransformerLens
backend's numbers; what does not run (other families; circuits on a remote model, whose backward runs after the
trace) refuses in one BackendError line (``NNsightModel.refusal``; README's "Engines x backends").
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from core.errors import BackendError, RangeError, WorkbenchError
from core.models import hub
from core.models.hooked import ArchInfo, HookedModel
from core.models.nnsight_ndif import check_ndif as _check_host
from core.models.nnsight_ndif import remote_timeout  # noqa: F401 - re-exported
from core.models.nnsight_split import SERVED, SPLIT_HOOKS, split_attention
from core.models.nnsight_state import hook_state, restore_state
from core.models.nnsight_tables import (  # noqa: F401 - ENGINE_NEEDS, LLAMA_LIKE: re-exported
    ATTN_ORDERS,
    ENGINE_NEEDS,
    FUSED,
    GEMMA2_HOOKS,
    GEMMA3_HOOKS,
    GLOBAL_HOOKS,
    GPT2_HOOKS,
    HOOK_NAME,
    INTERNAL_LAYOUTS,
    LLAMA_BASIC,
    LLAMA_HOOKS,
    LLAMA_LIKE,
    LOCAL_BACKWARD,
    MLP_IN,
    NEED_WORDS,
    OLMO2_HOOKS,
    PHI3_HOOKS,
    POST_BASIC,
    POST_NORMED,
    QWEN3_HOOKS,
    READ_ONLY,
    fused_part,
    layout_of,
)
from core.models.nnsight_weights import TracedWeights
from core.models.tokens import tokenizer_adds_bos

GRAD_PARTS = ("fq", "fk", "fv", "gate", "up")  # fused parts: views of a module value, its gradient sliced the same


def _cap(value: Any) -> float | None:
    """A soft cap of the config (None where there is none: absent, zero or negative)."""
    return float(value) if value is not None and float(value) > 0 else None


def _rotated(value: Any, rope: tuple[Any, Any]) -> Any:
    """RoPE over halves of [batch, pos, head, d_head] with the (cos, sin) tables [pos, d_head] of its positions."""
    import torch

    cos, sin = (t[:, None, :].to(value.dtype) for t in rope)
    half = value.shape[-1] // 2
    return value * cos + torch.cat((-value[..., half:], value[..., :half]), dim=-1) * sin


class _Hook:
    """What a TransformerLens hook function gets as ``hook``: here only its ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name


def check_ndif(host: str | None = None, timeout: float | None = None) -> None:
    """A BackendError in one line unless NDIF (nnsight's configured host) answers (any HTTP status) within
    ``timeout`` seconds: a remote trace without a network, or behind a silent proxy, is refused at once rather
    than after nnsight's own waits (10 s to connect, 600 s to read)."""
    from nnsight import CONFIG

    _check_host(host or CONFIG.API.HOST, timeout)


class NNsightModel(TracedWeights, HookedModel):
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
        if self.hf is not None:  # engines ask for gradients on activations, not weights (as on TransformerLens)
            for p in self.hf.parameters():
                p.requires_grad_(False)
        self.remote = remote
        cfg = self.lm.config
        self.layout = layout_of(cfg)
        self._gpt2 = self.layout == "gpt2"
        self._gemma = self.layout in ("gemma2", "gemma3")  # 1 + w gains, post-norms, a scaled embedding
        self._hooks = {"gpt2": GPT2_HOOKS, "llama": POST_BASIC if cfg.model_type in POST_NORMED else LLAMA_BASIC,
                       "llama+": LLAMA_HOOKS, "gemma3": GEMMA3_HOOKS, "qwen3": QWEN3_HOOKS,
                       "gemma2": GEMMA2_HOOKS, "olmo2": OLMO2_HOOKS, "phi3": PHI3_HOOKS}[self.layout]
        self._split = False  # inside ``split_inputs``: per-head q/k/v inputs and the MLP's own input
        n_heads = getattr(cfg, "num_attention_heads", getattr(cfg, "n_head", 0))
        d_model = getattr(cfg, "hidden_size", getattr(cfg, "n_embd", 0))
        act = getattr(cfg, "hidden_activation", None) if self._gemma else None
        act = act or getattr(cfg, "hidden_act", getattr(cfg, "activation_function", None))
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
            norm_placement="pre+post" if self._gemma else "post" if self.layout == "olmo2" else "pre",
            qk_norm="head" if self.layout in ("gemma3", "qwen3") else "full" if self.layout == "olmo2" else "none",
            attn_softcap=_cap(getattr(cfg, "attn_logit_softcapping", None)) if self.internals else None,
            logit_softcap=_cap(getattr(cfg, "final_logit_softcapping", None)) if self.internals else None,
        )
        super().__init__(tl=None, tokenizer=self.lm.tokenizer, name=name, kind="llm", backend="nnsight",
                         prepend_bos=tokenizer_adds_bos(self.lm.tokenizer) if prepend_bos is None else prepend_bos,
                         arch=arch)
        self._active_hooks: list[tuple[str, Any]] = []  # forward hooks of the open ``hooks`` blocks
        self._ndif_checked = False
        self._param_cache: dict[str, Any] | None = None  # the weights as one trace read them (``_params``)
        self._rope_cache: dict[int, tuple[Any, Any]] = {}

    @property
    def device(self):
        import torch

        if self.remote:
            return torch.device("cpu")
        return self.lm.device  # nnsight's public property: the device of the module's first parameter

    # -- what runs here ---------------------------------------------------------------------
    @property
    def internals(self) -> bool:
        """Whether every internal activation and weight the engines read can be traced: a Llama-style model,
        local or on NDIF (weights are read inside a trace, ``_params``, never from the module directly)."""
        return self.layout in INTERNAL_LAYOUTS

    def refusal(self, engine: str) -> str | None:
        """Why ``engine`` (a key of ENGINE_NEEDS) does not run on this model, or None when it does."""
        need = ENGINE_NEEDS.get(engine, "internals")
        if engine in LOCAL_BACKWARD and self.remote:
            return NEED_WORDS["local_backward"]
        if need == "hooks" or (need == "internals" and self.internals):
            return None
        return NEED_WORDS[need]

    def _need_internals(self, what: str) -> None:
        if not self.internals:
            raise BackendError(f"{what} of {self.name} is not available on the nnsight backend: it needs "
                               f"{NEED_WORDS['internals']}")

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

    @property
    def _eps(self) -> float:
        return float(getattr(self.lm.config, "rms_norm_eps", 1e-6))

    @property
    def _hook_table(self) -> dict[str, tuple]:
        if not self._split:
            return self._hooks
        path, order = MLP_IN.get(self.layout, MLP_IN["llama+"])
        return {**self._hooks, **SPLIT_HOOKS, "hook_mlp_in": (path, "input", order, "mlp_in")}

    def _module(self, layer: int, path: str) -> Any:
        """The envoy at ``path`` inside block ``layer``."""
        mod = self._blocks()[layer]
        for p in filter(None, path.split(".")):
            mod = getattr(mod, p)
        return mod

    def _parse(self, name: str) -> tuple[int, str]:
        """(layer, hook) of a hook name; hooks outside the blocks sit at layer -1 (before block 0) or
        n_layers (after the last)."""
        outside = GLOBAL_HOOKS[self.layout]
        if name in outside:
            slot = outside[name][2]
            return (-1 if slot == -1 else self.arch.n_layers), name
        m = HOOK_NAME.match(name)
        if not m or m.group(2) not in self._hook_table:
            raise RangeError(f"hook {name!r} is not available on the nnsight backend for {self.name}; "
                             f"use one of {', '.join(outside)}, blocks.L.{{{', '.join(self._hook_table)}}}")
        return self.check_layer(int(m.group(1))), m.group(2)

    def _spec(self, hook: str) -> tuple[str, str, int, str | None]:
        if hook in GLOBAL_HOOKS[self.layout]:
            path, part, _ = GLOBAL_HOOKS[self.layout][hook]
            return path, part, 0, hook.rsplit("hook_", 1)[1] if hook.startswith("ln_final") else None
        return self._hook_table[hook]

    def _fetch(self, layer: int, hook: str) -> Any:
        """The module value (input or output) a hook derives from, inside a running trace."""
        path, part, _, _ = self._spec(hook)
        mod = self.lm if hook in GLOBAL_HOOKS[self.layout] else self._blocks()[layer]
        for p in filter(None, path.split(".")):
            mod = getattr(mod, p)
        return mod.input if part == "input" else mod.output

    def _base(self, raw: Any, hook: str) -> Any:
        """The tensor of a module value a hook reads (one part of a tuple output), before any derivation."""
        part = self._spec(hook)[1]
        value = raw[int(part[-1])] if part in ("output0", "output1") else raw
        return value[0] if isinstance(value, tuple) else value

    def _derive(self, raw: Any, hook: str, rope: Any) -> Any:
        """The hook's tensor from its module value: the real tensor (or a view of it, so that changing it in
        place changes the forward), or a value computed from it (a norm's scale, rotated queries/keys)."""
        derive = self._spec(hook)[3]
        if derive == "scores":  # from the rotated q and k: computed in the trace (_scores_of)
            return None
        return self._view(self._base(raw, hook), derive, rope)

    def _view(self, value: Any, derive: str | None, rope: Any = None) -> Any:
        """A hook's tensor from the tensor of its module value (``_derive``), or a gradient's at the hook from the
        gradient at that tensor (``derive`` None or a view: "q", "kv", a fused part)."""
        if derive in (None, "split", "mlp_in"):  # split inputs: the module value, copied where it is used
            return value
        if derive in FUSED:  # Phi-3's fused projections: a slice (a view: changing it changes the forward)
            value = fused_part(value, derive, self.arch)
            return _rotated(value, rope) if derive.startswith("rot") else value
        if derive in ("scale", "normalized"):  # RMSNorm divides by sqrt(mean x^2 + eps): TL's hook_scale
            scale = (value.pow(2).mean(-1, keepdim=True) + self._eps).sqrt()
            return scale if derive == "scale" else value / scale
        if derive in ("q_scale", "kv_scale"):  # a q/k norm's scale per head: [batch * pos * head, 1], as TL's
            flat = value.reshape(-1, self.arch.d_head)
            return (flat.pow(2).mean(-1, keepdim=True) + self._eps).sqrt()
        if derive in ("rot_q_t", "rot_kv_t", "rot_q_n", "rot_kv_n"):  # a q/k norm's output, then RoPE
            # Gemma normalises [batch, head, pos, d_head]; Qwen 3 before the transpose
            return _rotated(value.transpose(1, 2) if derive.endswith("_t") else value, rope)
        heads = self.arch.n_heads if derive in ("q", "rot_q") else self.arch.n_kv_heads
        value = value.view(*value.shape[:-1], heads, self.arch.d_head)
        # RoPE over halves (Llama), as HF applies it after this projection
        return _rotated(value, rope) if derive.startswith("rot") else value

    def _trace(self, tokens: Any, save: list[str] = (), fwd_hooks: list = (), start_at_layer: int | None = None,
               backward: tuple[Any, int | None, list[str]] | None = None, logits_to_keep: Any = 0):
        """One nnsight trace: ``fwd_hooks`` ((hook name, fn(act, hook)) as in TransformerLens) change the
        activations they are given, in place or by what they return; the names in ``save`` come back (after
        the hooks). With ``start_at_layer``, ``tokens`` is the residual stream entering that layer: the trace
        runs on placeholder ids of its shape and the block's input is replaced by it (positions are the
        same; the layers before run on the placeholders and are not read). With ``backward`` (metric, position,
        names) the metric of the logits at ``position`` [batch] runs backward inside the same trace (nnsight's
        backward tracing) and the gradients of its sum at ``names`` come back as ``saved["grad:" + name]``, the
        metric as ``saved["metric"]``. ``logits_to_keep`` (Hugging Face's: the last n positions, or a tensor of
        them; None: no logits at all, the unembedding skipped) spares the unembedding of what nobody reads. The
        same code runs locally and, with ``remote=True``, on NDIF: only ``lm.trace``'s transport differs."""
        import nnsight
        import torch

        # (layer, module value's order in the block, start 0 / hook 1 / save 2, name, action): nnsight reads
        # modules in execution order; at one site the residual replacing the input comes first, then hooks,
        # then saves
        steps: list[tuple[int, int, int, str, Any]] = []
        for name, fn in [*self._active_hooks, *fwd_hooks]:
            layer, hook = self._parse(name)
            spec = self._spec(hook)
            steps.append((layer, spec[2], 1, name, fn))
            if spec[3] == "scores":  # computed from the rotated q and k (kind 4: fetched, not saved)
                for part in ("attn.hook_rot_q", "attn.hook_rot_k"):
                    steps.append((layer, self._spec(part)[2], 4, f"blocks.{layer}.{part}", None))
        grad_names = list(backward[2]) if backward is not None else []
        for name in grad_names:  # a gradient is read at the module value: the hook must be it, or a view of it
            if self._spec(self._parse(name)[1])[3] not in (None, "q", "kv", *GRAD_PARTS):
                raise RangeError(f"the gradient at {name!r} is not available on the nnsight backend (a value "
                                 "computed from a module's, not one the forward uses)")
        for name in dict.fromkeys([*save, *grad_names]):
            layer, hook = self._parse(name)
            steps.append((layer, self._spec(hook)[2], 2, name, None))
            if (hook == "attn.hook_attn_scores" or self.remote and hook == "attn.hook_pattern") \
                    and "attn.hook_rot_q" in self._hooks:
                # a server's attention may return no weights (its default kernel): its rotated q and k are read
                # (kind 4: fetched, not saved) for the pattern to be computed from them; the scores always are
                for part in ("attn.hook_rot_q", "attn.hook_rot_k"):
                    steps.append((layer, self._spec(part)[2], 4, f"blocks.{layer}.{part}", None))
        resid = None
        if start_at_layer is not None:
            resid = tokens
            steps.append((self.check_layer(start_at_layer), 0, 0, f"blocks.{start_at_layer}.hook_resid_pre", None))
            tokens = torch.zeros(resid.shape[:2], dtype=torch.long, device=resid.device)
        ids = self._tokens(tokens)
        split: dict[int, list] = {}
        if self._split:  # each layer's attention from per-head inputs (nnsight_split), at its block's input
            steps, split = self._split_steps(steps)
        steps.sort(key=lambda step: step[:3])
        rope = None
        rotated = ("rot_q", "rot_kv", "rot_q_t", "rot_kv_t", "rot_q_n", "rot_kv_n", "rot_fq", "rot_fk")
        if split or any(self._spec(self._parse(s[3])[1])[3] in rotated for s in steps):
            rope = self._rope_tables(ids.shape[1])
        # the weights' own trace first (traces do not nest), and only the split layers' go with the request: the
        # model itself travels without its weight cache (__getstate__)
        split_weights = {layer: (self.weights(layer), self._split_extra(layer)) for layer in split}
        if self.remote:
            self._check_remote()
        # the caller's grad mode (a circuit's backward after the trace, locally), or the traced backward's
        grad_mode = torch.enable_grad() if backward is not None or torch.is_grad_enabled() else torch.no_grad()
        if backward is not None:  # the metric reads one position: only it is unembedded
            at = ids.shape[1] - 1 if backward[1] is None else backward[1] % ids.shape[1]
            logits_to_keep, backward = torch.tensor([at], device=ids.device), (backward[0], -1, backward[2])
        unembed = logits_to_keep is not None  # None: no logits wanted, the unembedding is skipped
        logits_to_keep = 1 if logits_to_keep is None else logits_to_keep
        options = {"logits_to_keep": logits_to_keep} if not isinstance(logits_to_keep, int) or logits_to_keep else {}
        # inside the trace a statement stays on one line where it can: nnsight's remote serialisation finds the
        # nested backward block by its lines (a call wrapped over two lines before it broke it, remote="local")
        state = hook_state(fn for _, fn in [*self._active_hooks, *fwd_hooks])
        # a traced backward's metric reads the logits as TransformerLens' final_logits give them (``head`` below):
        # the unembedding's output, before the soft cap a model may put on its logits (Gemma 2), which the logits
        # returned have. No comment there: two comment lines just above the backward block made nnsight's remote
        # serialisation miss the block (the server simulation's backward got None)
        with self._transport():
            with grad_mode, self.lm.trace(ids, remote=self.remote, **options):
                # the containers are made inside the trace and ``saved`` itself is saved: a server returns only the
                # names the trace's body binds and saves, so a dict made outside and filled here comes back empty
                saved: dict[str, Any] = nnsight.save({})
                kept = nnsight.save(list(state))  # what the hooks keep, returned as a server returns it
                raw: dict[tuple[int, str, str], Any] = {}
                live: dict[str, Any] = {}  # the tensors whose gradients the backward reads, in forward order
                for layer, _, kind, name, action in steps:
                    hook = self._parse(name)[1]
                    path, part = self._spec(hook)[:2]
                    key = (layer, path, "input" if part == "input" else "output")
                    if key not in raw:  # each module value once (a second read would wait for another call)
                        raw[key] = self._fetch(layer, hook)
                    value = self._derive(raw[key], hook, self._layer_rope(rope, layer))
                    if value is None and hook == "attn.hook_attn_scores":  # from the rotated q and k read before
                        value = self._scores_of(layer, raw, self._layer_rope(rope, layer))
                    if kind == 0:  # the residual stream replaces the block's input
                        value.copy_(resid.to(value.dtype))
                    elif kind == 3:  # this layer's attention from per-head inputs; the module's is skipped
                        w, extra = split_weights[layer]
                        rope_l = self._layer_rope(rope, layer)
                        attn = self._blocks()[layer].self_attn
                        attn.skip(split_attention(w, self.arch, self._eps, value, split[layer], rope_l, saved, **extra))
                    elif kind == 1 and hook == "hook_mlp_in":  # the MLP's own input: the residual is left as it is
                        out = action(value.clone(), _Hook(name))
                        self._module(layer, path).input = value.clone() if out is None else out
                    elif kind == 4:  # read for a pattern (above)
                        continue
                    elif kind == 2:
                        if value is None and hook == "attn.hook_pattern":  # the server's attention gave no weights
                            value = self._pattern_of(layer, raw, self._layer_rope(rope, layer))
                        saved[name] = value.detach().clone().save()
                        if name in grad_names:
                            live[name] = (self._base(raw[key], hook), self._spec(hook)[3])
                    else:
                        out = action(value, _Hook(name))
                        if out is not None and out is not value:
                            spec = self._spec(hook)
                            if spec[1] in READ_ONLY or spec[3] in READ_ONLY:  # derived: changing it changes nothing
                                raise RangeError(f"hook {name!r} can be read, not changed, on the nnsight backend")
                            value.copy_(out)
                if not unembed:  # one column of the final hidden state stands in for the logits nobody reads
                    self.lm.lm_head.skip(self.lm.lm_head.input[..., :1])
                head = self.lm.lm_head.output if backward is not None and self.arch.logit_softcap else None
                logits = self.lm.output.logits
                if backward is not None:
                    metric, position = backward[0], backward[1]
                    values = metric((logits if head is None else head)[:, -1 if position is None else position].float())
                    saved["metric"] = values.detach().save()
                    with values.sum().backward():  # gradients come in the reverse of the forward's order
                        for name in reversed(list(live)):
                            saved["grad:" + name] = self._view(live[name][0].grad, live[name][1]).save()
                keep = backward is None and logits.requires_grad  # a backward after the trace (local only)
                logits = logits.save() if keep else logits.detach().save()
        restore_state(state, kept)
        return logits, saved

    def _split_steps(self, steps: list) -> tuple[list, dict[int, list]]:
        """Steps for split inputs: the per-head q/k/v input hooks and hook_z (hooks and saves) of every layer go to
        its split attention step (kind 3, after the block input's own hooks and saves); other attention internals
        are not there (the module's attention does not run)."""
        split: dict[int, list] = {layer: [] for layer in range(self.arch.n_layers)}
        kept = []
        for step in steps:
            layer, order, kind, name, action = step
            hook = self._parse(name)[1] if layer >= 0 and layer < self.arch.n_layers else None
            if hook in SERVED:
                split[layer].append((name, action if kind == 1 else None))
            elif hook is not None and order in ATTN_ORDERS.get(self.layout, ATTN_ORDERS["llama+"]):
                raise RangeError(f"hook {name!r} is not available inside split_inputs on the nnsight backend "
                                 f"(per-head inputs replace the layer's attention): use {', '.join(SERVED)}")
            else:
                kept.append(step)
        kept += [(layer, 0, 3, f"blocks.{layer}.hook_resid_pre", None) for layer in split]
        return kept, split

    def __getstate__(self) -> dict[str, Any]:
        """A trace's body refers to this model, so it travels with every remote request: without the weights and
        rotary tables read back from earlier traces (the whole model's weights would go up with each request)."""
        state = self.__dict__.copy()
        state["_param_cache"], state["_rope_cache"] = None, {}
        return state

    def _check_remote(self) -> None:
        if not self._ndif_checked:
            check_ndif()
            self._ndif_checked = True

    @contextmanager
    def _transport(self) -> Iterator[None]:
        """Around every trace: with ``remote=True`` a failure of the transport or of the server (one that
        answers but is not NDIF, a refused request) is one BackendError line; locally errors pass as they are."""
        try:
            yield
        except WorkbenchError:
            raise
        except Exception as exc:
            if not self.remote:
                raise
            from nnsight import CONFIG

            lines = [line for line in str(exc).splitlines() if line.strip()]
            # a server's error is its traceback: its last line names the exception, the first says nothing
            first = (lines[-1] if lines[0].startswith("Traceback") else lines[0])[:300] if lines else type(exc).__name__
            raise BackendError(f"nnsight remote trace of {self.name} failed ({type(exc).__name__}: {first}); "
                               f"is {CONFIG.API.HOST} an NDIF server (nnsight.CONFIG.API.HOST), and is the model "
                               "hosted there?") from None

    def run_with_cache(self, tokens, names_filter=None, names: list[str] | None = None, **kwargs):
        """(logits, {hook name: tensor}) for the requested TransformerLens hook names (a list, or a filter
        function over hook_names())."""
        # return_type=None (as TransformerLens takes it): no logits come back, and nothing is unembedded
        keep = None if "return_type" in kwargs and kwargs.pop("return_type") is None else 0
        if callable(names_filter):
            wanted = [n for n in self.hook_names() if names_filter(n)]
        elif names is not None:
            wanted = list(names)
        elif isinstance(names_filter, list | tuple | set | frozenset):
            wanted = list(names_filter)
        else:  # no filter: every hook, in TransformerLens' ActivationCache (its decompositions, as DLA reads them)
            unembed = keep is not None
            logits, saved = self._trace(tokens, save=self.hook_names(), logits_to_keep=keep)
            return logits if unembed else None, self._activation_cache(saved)
        logits, saved = self._trace(tokens, save=wanted, logits_to_keep=keep)
        return logits if keep is not None else None, saved

    def logits(self, tokens):
        return self._trace(tokens)[0]

    def __call__(self, tokens, start_at_layer: int | None = None, stop_at_layer: int | None = None,
                 return_type: str | None = "logits", **kwargs):
        """Logits [batch, pos, vocab]; with ``start_at_layer``, ``tokens`` is the residual stream entering
        that layer [batch, pos, d_model]; with ``stop_at_layer``, the residual stream entering that layer
        comes back (the whole forward runs; as TransformerLens' forward takes and gives them)."""
        if kwargs:
            raise BackendError(f"the nnsight backend's forward takes no {', '.join(sorted(kwargs))}")
        if stop_at_layer is None:
            logits = self._trace(tokens, start_at_layer=start_at_layer)[0]
            return None if return_type is None else logits
        stop = int(stop_at_layer) % (self.arch.n_layers + 1) if stop_at_layer < 0 else int(stop_at_layer)
        name = "hook_embed" if stop == 0 else f"blocks.{stop - 1}.hook_resid_post"
        return self._trace(tokens, save=[name], start_at_layer=start_at_layer, logits_to_keep=None)[1][name]

    def traced_grads(self, tokens, fwd_hooks: list, names: list[str], metric, position: int | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any], Any]:
        """(activations at ``names``, d sum(metric) / d activation there, metric [batch]) from one trace: the
        forward with ``fwd_hooks`` (and those of open ``hooks`` blocks), ``metric`` of the logits at
        ``position`` (the last when None), and its backward inside the same trace (nnsight's backward
        tracing: on NDIF the backward runs there too)."""
        _, saved = self._trace(tokens, fwd_hooks=list(fwd_hooks), backward=(metric, position, list(names)))
        return ({n: saved[n] for n in names}, {n: saved["grad:" + n] for n in names}, saved["metric"])

    def run_with_hooks(self, tokens, fwd_hooks=(), bwd_hooks=(), **kwargs):
        """Logits of a forward with TransformerLens-style forward hooks at the hook names this backend has."""
        return_type = kwargs.pop("return_type", "logits")
        if bwd_hooks or kwargs:
            raise BackendError("the nnsight backend runs forward hooks only (no backward hooks or options); "
                               "gradients come from traced_grads")
        # no logits wanted (the hooks are the point): nothing is unembedded (a 262k vocabulary)
        logits = self._trace(tokens, fwd_hooks=list(fwd_hooks), logits_to_keep=None if return_type is None else 0)[0]
        return None if return_type is None else logits

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
        """Within the block every head reads its own q/k/v input and every MLP its own input, as
        HookedModel.split_inputs (core/models/nnsight_split.py computes the attention from them in the trace)."""
        self._need_internals("per-head inputs (edge-level circuits)")
        before, self._split = self._split, True
        try:
            yield self
        finally:
            self._split = before

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
        names = list(GLOBAL_HOOKS[self.layout])
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
        self._param_cache, self._rope_cache = None, {}
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
