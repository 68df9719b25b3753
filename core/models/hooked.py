"""The one interface engines see: a HookedModel.

It wraps a TransformerLens-style module (``HookedTransformer`` for converted LLMs and toy
models, or a ``TransformerBridge``) and gives engines tokenization with target and foil ids,
cached forwards under TransformerLens hook names, hooks for interventions, gradients, the
weights (grouped-query heads repeated to full heads), and the architecture facts. Engines
never reach into Hugging Face or nnsight internals.

Hook names (TransformerLens conventions)::

    hook_embed, blocks.{l}.hook_resid_pre, blocks.{l}.ln1.hook_scale,
    blocks.{l}.attn.hook_q / hook_k / hook_v / hook_pattern / hook_z, blocks.{l}.hook_attn_out,
    blocks.{l}.hook_resid_mid, blocks.{l}.ln2.hook_scale,
    blocks.{l}.mlp.hook_pre (gate, or the MLP input for non-GLU), blocks.{l}.mlp.hook_pre_linear (up),
    blocks.{l}.mlp.hook_post (act(gate) * up), blocks.{l}.hook_mlp_out, blocks.{l}.hook_resid_post,
    ln_final.hook_scale

Tensor shapes are in the signatures (jaxtyping); the test suite checks them at run time (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int

from core.errors import BackendError, PromptError, RangeError, TokenError, check_range
from core.models import bridge_rotary
from core.models.arch import POST_NORM_FAMILIES, ArchInfo, arch_from_cfg  # noqa: F401 - re-exported
from core.models.decode import decode
from core.models.tokens import Encoding, SymbolTokenizer, check_prompt, single_token

# What a forward takes: token ids, a residual stream (with start_at_layer), or prompt text as TransformerLens
# takes it (a string or a list of them; HookedModel.to_tokens tokenizes it)
ModelInput = str | list[str] | Int[torch.Tensor, "batch pos"] | Float[torch.Tensor, "batch pos _"]


def hooked_transformer(cfg: Any, **kwargs: Any) -> Any:
    """TransformerLens' ``HookedTransformer(cfg, **kwargs)``, without its deprecation warning.

    TransformerLens 3.x deprecates HookedTransformer in favour of TransformerBridge ("removed in 4.0"; we pin
    3.9). We keep it, knowingly: the bridge wraps a Hugging Face module and cannot be built from a config
    (every toy model here is one), and for LLMs it does not yet give what the engines need (see
    core/models/backends.py). So this one warning, and nothing else, is silenced where we construct the model.
    """
    import warnings

    from transformer_lens import HookedTransformer

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        return HookedTransformer(cfg, **kwargs)


def _is_texts(value: Any) -> bool:
    """Whether ``value`` is a non-empty list (or tuple) of prompt strings: a batch, as TransformerLens reads it."""
    return isinstance(value, list | tuple) and bool(value) and all(isinstance(v, str) for v in value)


def _decodes(tl: Any) -> bool:
    """Whether core.models.decode runs ``tl``: a HookedTransformer with an HF tokenizer."""
    from transformer_lens import HookedTransformer

    return isinstance(tl, HookedTransformer) and getattr(tl, "tokenizer", None) is not None


def _recompute_greedy(tl: Any, tokens: torch.Tensor, n: int, eos: int | None) -> list[int]:
    """Greedy ids by running the whole sequence at every step (no KV cache), stopping after end-of-text."""
    new: list[int] = []
    for _ in range(n):
        nxt = int(tl(tokens)[0, -1].argmax())
        new.append(nxt)
        if nxt == eos:
            break
        tokens = torch.cat([tokens, tokens.new_tensor([[nxt]])], dim=1)
    return new


def require(model: Any, engine: str) -> None:
    """A BackendError in one line, naming the engine and the backend, unless ``engine`` runs on ``model``'s
    backend (``model.refusal(engine)``: None where it runs, else what it needs)."""
    refusal = getattr(model, "refusal", None)
    why = refusal(engine) if callable(refusal) else None
    if why:
        raise BackendError(f"{engine} does not run on the {model.backend} backend ({model.name}): it needs {why}; "
                           "load the model with backend='transformer_lens'")


# What TransformerLens' TransformerBridge (3.9, compatibility mode) lacks for an engine: engine -> what it needs
_SPLIT = ("per-head q/k/v inputs, which the bridge gives by computing the attention from them for Llama-style "
          "and Gemma 3 attention only (its own split_qkv_input fails on grouped kv heads)")
BRIDGE_REFUSALS: dict[str, str] = {"circuit": _SPLIT}
# engines that read the norms around the sublayers, on families whose only norms follow them (OLMo-2): the bridge
# names those norms ln1/ln2 as if they came first, and these engines gave other numbers than TransformerLens'
_POST_ONLY = ("the norms after each sublayer (OLMo-2's placement), which the bridge's blocks present as norms before "
              "them")
BRIDGE_POST_ONLY_REFUSALS = frozenset({"dpa", "dpa_path", "ifr", "dla", "circuit", "information flow"})


# what HF MLPs call their activation, per family (TransformerLens' JointGateUpMLPBridge looks in the same places)
_HF_ACT_NAMES = ("act_fn", "activation_fn", "act", "activation")


def _bridge_arch(tl: Any, arch: ArchInfo) -> ArchInfo:
    """The bridge's architecture facts where its config understates them: the bridge's cfg does not say that
    Gemma 3 has post-norms (ln1_post / ln2_post) and per-head q/k norms, but its blocks hold them."""
    from dataclasses import replace

    block = tl.blocks[0]
    if arch.norm_placement == "pre" and getattr(block, "ln1_post", None) is not None:
        arch = replace(arch, norm_placement="pre+post")
    if arch.qk_norm == "none" and getattr(block.attn, "q_norm", None) is not None:
        arch = replace(arch, qk_norm="head")
    return arch


def _qk_norm_as_tl(cache: Any) -> Any:
    """The bridge's per-head q/k norm values ([batch, head, pos, x]) in ``cache`` laid out as TransformerLens
    caches them ([batch * pos * head, x]), as the engines read them."""
    for key in list(cache.cache_dict):
        if (".q_norm.hook_" in key or ".k_norm.hook_" in key) and cache.cache_dict[key].dim() == 4:
            value = cache.cache_dict[key]
            cache.cache_dict[key] = value.transpose(1, 2).reshape(-1, value.shape[-1])
    return cache


def _bridge_splits(arch: ArchInfo) -> bool:
    """Whether the bridge splits head inputs on ``arch`` (core.models.nnsight_split computes the attention):
    Llama-style attention, or Gemma 3's (per-head q/k norms, post-norms, sliding windows; no soft caps)."""
    from core.models.nnsight_split import llama_like

    return llama_like(arch) or (arch.norm == "rmsnorm" and arch.norm_placement in ("pre", "pre+post")
                                and arch.positional == "rope" and arch.qk_norm in ("none", "head")
                                and not arch.parallel and arch.attn_softcap is None)


def _qk_norm_hook(fn: Callable) -> Callable:
    """A hook on a bridge's per-head q/k norm value ([batch, head, pos, x]) that gets and gives it in
    TransformerLens' layout ([batch * pos * head, x])."""

    def hook(x: Any, hook: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            return fn(x, hook)
        b, h, p, d = x.shape
        out = fn(x.transpose(1, 2).reshape(-1, d), hook)
        return None if out is None else out.view(b, p, h, d).transpose(1, 2)

    return hook


@dataclass(frozen=True)
class NormSite:
    """One frozen norm of a block: the hook of its scale (1/rms or 1/std divides by it), weight, bias (over the
    width it normalises: d_model for the block norms, d_head or the whole projection for q/k norms)."""

    scale_hook: str
    w: Float[torch.Tensor, " d_norm"] | None
    b: Float[torch.Tensor, " d_norm"] | None


class HookedModel:
    """A hooked model for engines. ``tl`` is the TransformerLens-style module underneath."""

    def __init__(self, tl: Any, tokenizer: Any, name: str, kind: str = "llm",
                 backend: str = "transformer_lens", prepend_bos: bool = False,
                 arch: ArchInfo | None = None, info: dict[str, Any] | None = None) -> None:
        self.tl = tl
        self.tokenizer = tokenizer
        self.name = name
        self.kind = kind
        self.backend = backend
        self.prepend_bos = prepend_bos
        self.arch = arch or arch_from_cfg(tl.cfg)
        if backend == "bridge":
            self.arch = _bridge_arch(tl, self.arch)
        # a bridged fused-qkv rotary attention (Phi-3, GPT-NeoX) never fires hook_rot_q/k: core.models.bridge_rotary
        self._rot_unfired = backend == "bridge" and self.arch.positional == "rope" and not bridge_rotary.rot_fires(tl)
        self.info = info or {}

    def __repr__(self) -> str:
        a = self.arch
        return (f"HookedModel({self.name!r}, kind={self.kind}, backend={self.backend}, layers={a.n_layers}, "
                f"heads={a.n_heads}/{a.n_kv_heads}kv, d_model={a.d_model}, mlp={a.mlp}, norm={a.norm})")

    @property
    def device(self) -> torch.device:
        return next(self.tl.parameters()).device

    def refusal(self, engine: str) -> str | None:
        """Why ``engine`` does not run on this model's backend (what it needs), or None when it runs. The bridge
        splits head inputs itself (core/models/nnsight_split.py) for Llama-style and Gemma 3 attention only."""
        if self.backend != "bridge":
            return None
        if engine in BRIDGE_POST_ONLY_REFUSALS and getattr(self.tl.cfg, "architecture", None) in POST_NORM_FAMILIES:
            return _POST_ONLY
        if engine == "circuit" and _bridge_splits(self.arch):
            return None
        return BRIDGE_REFUSALS.get(engine)

    # -- tokens ---------------------------------------------------------------------------
    def _encode_text(self, text: str) -> list[int]:
        if isinstance(self.tokenizer, SymbolTokenizer):
            return self.tokenizer.encode(text)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def to_tokens(self, prompt: str | list[int] | list[str]) -> Int[torch.Tensor, "batch pos"]:
        """Token ids [1, seq] for a prompt (a string, or a list of ids for toy models), BOS first when the
        model's rule says so; a list of strings gives a batch [n, seq] (they must be as long in tokens)."""
        if _is_texts(prompt):
            rows = [self.to_tokens(text) for text in prompt]
            if len({row.shape[1] for row in rows}) > 1:
                raise PromptError(f"the {len(rows)} prompts are {sorted({row.shape[1] for row in rows})} tokens "
                                  "long: a batch needs prompts of one length (or tokenize them one at a time)")
            return torch.cat(rows)
        if isinstance(prompt, str):
            if not prompt.strip():
                raise PromptError("empty prompt: give at least one token")
            ids = self._encode_text(prompt)
            if self.prepend_bos and getattr(self.tokenizer, "bos_token_id", None) is not None:
                ids = [self.tokenizer.bos_token_id] + ids
        else:
            ids = [int(i) for i in prompt]
            for i in ids:
                check_range("token id", i, self.arch.d_vocab)
        check_prompt(str(prompt), len(ids), self.arch.n_ctx)
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    def to_str_tokens(self, tokens: str | Int[torch.Tensor, "1 pos"] | Int[torch.Tensor, " pos"] | list[int]
                      ) -> list[str]:
        """One string a token, for ids or for a prompt (tokenized as ``to_tokens`` does, BOS included)."""
        if isinstance(tokens, str):
            tokens = self.to_tokens(tokens)
        ids = tokens[0].tolist() if hasattr(tokens, "dim") and tokens.dim() == 2 else list(tokens)
        return [self.decode([int(i)]) for i in ids]

    def _tokens(self, tokens: Any) -> Any:
        """Text (a prompt, or a list of them) as token ids, as TransformerLens accepts it; anything else as is."""
        return self.to_tokens(tokens) if isinstance(tokens, str) or _is_texts(tokens) else tokens

    def decode(self, ids: list[int]) -> str:
        if isinstance(self.tokenizer, SymbolTokenizer):
            return " ".join(self.tokenizer.decode_one(i) for i in ids)
        return self.tokenizer.decode(ids)

    def token_id(self, text: str, role: str = "target") -> int:
        """The id of a single-token string (leading space included for LLMs)."""
        if not text:
            raise TokenError(f"{role} is empty")
        try:
            ids = self._encode_text(text)
        except PromptError as exc:
            raise TokenError(f"{role}: {exc}") from None
        return single_token(ids, text, role)

    def encode(self, prompt: str | list[int], target: str | int | None = None,
               foil: str | int | None = None) -> Encoding:
        tokens = self.to_tokens(prompt)
        t_id = self._as_id(target, "target")
        f_id = self._as_id(foil, "foil")
        if t_id is not None and f_id is not None and t_id == f_id:
            raise TokenError(f"foil {foil!r} is the same token as the target")
        return Encoding(tokens, self.to_str_tokens(tokens), t_id, f_id,
                        None if target is None else str(target), None if foil is None else str(foil))

    def _as_id(self, tok: str | int | None, role: str) -> int | None:
        if tok is None:
            return None
        if isinstance(tok, int):
            return check_range(f"{role} id", tok, self.arch.d_vocab)
        return self.token_id(tok, role)

    # -- running --------------------------------------------------------------------------
    def __call__(self, tokens: ModelInput,
                 **kwargs: Any) -> Any:
        """The module's forward (logits [batch, pos, vocab], or what stop_at_layer/return_type ask for);
        with start_at_layer, ``tokens`` is the residual stream [batch, pos, d_model] (toy regression models
        read vectors [batch, pos, d_in]). A prompt string (or a list of them) is tokenized by ``to_tokens``."""
        if self.backend == "bridge" and ("start_at_layer" in kwargs or "stop_at_layer" in kwargs):
            return self._bridge_partial(self._tokens(tokens), **kwargs)
        return self.tl(self._tokens(tokens), **kwargs)

    def _bridge_partial(self, x: Any, start_at_layer: int | None = None, stop_at_layer: int | None = None,
                        **kwargs: Any) -> Any:
        """TransformerLens' start_at_layer / stop_at_layer on a TransformerBridge, which runs HF's own layer
        loop and takes neither: the residual replaces block ``start_at_layer``'s input in a forward on
        placeholder ids of its shape (positions are the same), and the residual entering block
        ``stop_at_layer`` is what comes back (the rest of the forward runs, unread). Gradients flow through."""
        hooks: list[tuple[str, Callable]] = []
        if start_at_layer is not None:
            resid = x
            pad = getattr(self.tokenizer, "pad_token_id", None)
            x = torch.full(resid.shape[:2], 1 if pad == 0 else 0, dtype=torch.long, device=resid.device)
            start = self.check_layer(start_at_layer)
            # replaced where it is made (the block before's output, or the embedding), so that hooks a caller put
            # on this block's hook_resid_pre (a patch) still act on it afterwards; with learned positions the
            # token embedding takes it and the positional one adds nothing (GPT-2: the patch at layer 0 was lost)
            at = f"blocks.{start - 1}.hook_resid_post" if start > 0 else "hook_embed"
            hooks.append((at, lambda act, hook: resid.to(act.dtype)))
            if start == 0 and self.arch.positional == "learned":
                hooks.append(("hook_pos_embed", lambda act, hook: torch.zeros_like(act)))
        kept: dict[str, Any] = {}
        if stop_at_layer is not None:
            stop = int(stop_at_layer) % (self.arch.n_layers + 1) if stop_at_layer < 0 else int(stop_at_layer)
            name = "hook_embed" if stop == 0 else f"blocks.{stop - 1}.hook_resid_post"

            def keep(act: Any, hook: Any) -> Any:
                kept["resid"] = act
                return act

            hooks.append((name, keep))
        logits = self.tl.run_with_hooks(x, fwd_hooks=hooks, **kwargs)
        return kept["resid"] if stop_at_layer is not None else logits

    def logits(self, tokens: ModelInput) -> Float[torch.Tensor, "batch pos vocab"]:
        with torch.no_grad():
            return self.tl(self._tokens(tokens))

    def run_with_cache(self, tokens: ModelInput,
                       names_filter: Callable[[str], bool] | list[str] | None = None, **kwargs: Any) -> Any:
        """(logits, ActivationCache) under TransformerLens hook names (a prompt string is tokenized first)."""
        if isinstance(names_filter, list | tuple | set | frozenset):
            # TransformerLens tests a list filter by linear search at every hook point; a set is O(1)
            names_filter = frozenset(names_filter).__contains__
        rot = getattr(self, "_rot_unfired", False)
        if rot:  # the rotated q/k are made from hook_q / hook_k where the bridge's attention leaves them unfired
            asked = (names_filter if callable(names_filter) else (lambda _: True) if names_filter is None
                     else frozenset([names_filter]).__contains__)
            names_filter = bridge_rotary.with_unrotated(asked)
        out = self.tl.run_with_cache(self._tokens(tokens), names_filter=names_filter, **kwargs)
        if self.backend == "bridge" and self.arch.qk_norm == "head":
            _qk_norm_as_tl(out[1])
        if rot:
            bridge_rotary.fill_rotated(self, out[1], asked)
        return out

    def run_with_hooks(self, tokens: ModelInput, fwd_hooks=(), bwd_hooks=(), **kwargs: Any) -> Any:
        return self.tl.run_with_hooks(self._tokens(tokens), fwd_hooks=self._split_hooks(fwd_hooks),
                                      bwd_hooks=list(bwd_hooks), **kwargs)

    @contextmanager
    def hooks(self, fwd_hooks=(), bwd_hooks=()) -> Iterator[Any]:
        with self.tl.hooks(fwd_hooks=self._split_hooks(fwd_hooks), bwd_hooks=list(bwd_hooks)) as m:
            yield m

    def _split_hooks(self, fwd_hooks) -> list:
        """The hooks as given, or inside the bridge's split_inputs those that split head inputs themselves (and
        on a bridge that never fires hook_rot_q/k, hooks there moved to hook_q/k, core.models.bridge_rotary)."""
        if getattr(self, "_rot_unfired", False):
            fwd_hooks = bridge_rotary.rot_hooks(self, list(fwd_hooks))
        if self.backend == "bridge" and self.arch.qk_norm == "head":
            fwd_hooks = [(name, _qk_norm_hook(fn) if ".q_norm.hook_" in name or ".k_norm.hook_" in name else fn)
                         for name, fn in fwd_hooks]
        if not getattr(self, "_split_heads", False):
            return list(fwd_hooks)
        from core.models.nnsight_split import split_hooks

        return split_hooks(self, list(fwd_hooks))

    @contextmanager
    def split_inputs(self) -> Iterator[HookedModel]:
        """Within the block, every head reads its own query, key and value input
        (``blocks.{l}.hook_q_input`` / ``hook_k_input`` / ``hook_v_input``, [batch, pos, head, d_model], grouped
        kv heads ungrouped to one per query head) and every MLP its own ``blocks.{l}.hook_mlp_in``: the
        receiver inputs of the edge-level graph. Restores the model's settings on exit."""
        cfg = self.tl.cfg
        if self.backend == "bridge":  # HF attention on grouped kv heads: split_hooks computes it from the splits
            if not _bridge_splits(self.arch):
                raise BackendError(f"circuit does not run on the bridge backend ({self.name}): it needs {_SPLIT}")
            before, cfg.use_hook_mlp_in, self._split_heads = cfg.use_hook_mlp_in, True, True
            try:
                yield self
            finally:
                cfg.use_hook_mlp_in, self._split_heads = before, False
            return
        if not hasattr(self.tl, "set_use_split_qkv_input"):
            raise RangeError(f"{self.name} ({self.backend} backend) cannot split head inputs; "
                             "load it with the transformer_lens backend for edge-level circuits")
        saved = (cfg.use_split_qkv_input, cfg.use_hook_mlp_in, cfg.ungroup_grouped_query_attention)
        cfg.use_split_qkv_input = True
        cfg.use_hook_mlp_in = not cfg.attn_only
        cfg.ungroup_grouped_query_attention = cfg.n_key_value_heads is not None
        try:
            yield self
        finally:
            cfg.use_split_qkv_input, cfg.use_hook_mlp_in, cfg.ungroup_grouped_query_attention = saved

    def hook_names(self) -> list[str]:
        return list(self.tl.hook_dict.keys())

    def check_hook(self, name: str) -> str:
        if name not in self.tl.hook_dict:
            raise RangeError(f"hook {name!r} does not exist in {self.name}; e.g. blocks.0.hook_resid_post")
        return name

    def has_hook(self, name: str) -> bool:
        return name in self.tl.hook_dict

    @property
    def can_stop_at_layer(self) -> bool:
        """Whether a forward can stop early (``model(tokens, stop_at_layer=l)``): TransformerLens modules can."""
        import inspect

        try:
            return "stop_at_layer" in inspect.signature(getattr(self.tl, "forward", None)).parameters
        except (TypeError, ValueError):
            return False

    def has_mlp(self, layer: int) -> bool:
        return getattr(self.tl.blocks[self.check_layer(layer)], "mlp", None) is not None

    def n_experts(self, layer: int) -> int | None:
        """The number of experts of a layer's MoE MLP (None for a dense MLP or none)."""
        experts = getattr(getattr(self.tl.blocks[self.check_layer(layer)], "mlp", None), "experts", None)
        return None if experts is None else len(experts)

    def sample(self, tokens: Int[torch.Tensor, "1 pos"], max_new_tokens: int,
               temperature: float = 1.0) -> Int[torch.Tensor, "1 new_pos"]:
        """Sampled continuation: the prompt's ids followed by up to max_new_tokens new ones."""
        if not _decodes(self.tl):
            return self.tl.generate(tokens, max_new_tokens=max_new_tokens, temperature=temperature,
                                    verbose=False, use_past_kv_cache=True)

        new = decode(self.tl, tokens, max_new_tokens, temperature=temperature)
        return torch.cat([tokens, tokens.new_tensor([new])], dim=1)

    def state_dict(self) -> dict[str, torch.Tensor]:  # mixed shapes
        """The module's parameters and buffers (TransformerLens names)."""
        return self.tl.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor], strict: bool = True) -> Any:  # mixed shapes
        return self.tl.load_state_dict(state, strict=strict)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.tl.parameters())

    def top_predictions(self, prompt: str | list[int], k: int = 5) -> list[tuple[str, float]]:
        probs = torch.softmax(self.logits(self.to_tokens(prompt))[0, -1].float(), -1)
        top = probs.topk(k)
        return [(self.decode([int(i)]), float(p)) for p, i in zip(top.values, top.indices, strict=False)]

    def generate(self, prompt: str, max_new_tokens: int = 10) -> str:
        """Greedy continuation (the text after the prompt)."""
        return self.decode(self.greedy(self.to_tokens(prompt), max_new_tokens))

    def greedy(self, tokens: Int[torch.Tensor, "1 pos"], max_new_tokens: int, kv_cache: bool = True) -> list[int]:
        """Greedy continuation ids, up to the model's context, stopping after an end-of-text token. With
        the KV cache each step runs the new position only (core.models.decode: TransformerLens' loop, at the
        faster thread count; figures in results/models/generation.md); hooks see the prompt in the first
        pass, then one position a step. With ``kv_cache=False`` every step runs the whole sequence (hooks
        see every position each time)."""
        n = max(0, min(int(max_new_tokens), self.arch.n_ctx - tokens.shape[1]))
        if n == 0:
            return []
        eos = getattr(self.tokenizer, "eos_token_id", None)
        # TransformerLens' KV cache mis-sizes the positions of a model without its own HF tokenizer (the toys:
        # wrong tokens at step 2, a shape error at step 3); they are tiny, so they run without it
        if kv_cache and _decodes(self.tl):
            return decode(self.tl, tokens, n, eos)
        if kv_cache and getattr(self.tl, "tokenizer", None) is not None:  # the bridge: its own generate
            with torch.no_grad():
                out = self.tl.generate(tokens, max_new_tokens=n, do_sample=False, use_past_kv_cache=True,
                                       stop_at_eos=eos is not None, eos_token_id=eos, verbose=False,
                                       return_type="tokens")
            new = [int(i) for i in out[0, tokens.shape[1]:]]
            return new[: new.index(eos) + 1] if eos is not None and eos in new else new
        with torch.inference_mode():
            return _recompute_greedy(self.tl, tokens, n, eos)

    # -- checks and weights ---------------------------------------------------------------
    def _gain(self, w: Float[torch.Tensor, " d_norm"] | None) -> Float[torch.Tensor, " d_norm"] | None:
        """A norm's gain as TransformerLens holds it: the bridge keeps Gemma's raw w where the norm multiplies by
        1 + w (TransformerLens folds the 1 in)."""
        if w is None or self.backend != "bridge" or not getattr(self.tl.cfg, "rmsnorm_uses_offset", False):
            return w
        return w + 1

    def check_layer(self, layer: int) -> int:
        return check_range("layer", layer, self.arch.n_layers)

    def check_head(self, head: int) -> int:
        return check_range("head", head, self.arch.n_heads)

    def check_neuron(self, neuron: int) -> int:
        if not self.arch.d_mlp:
            raise RangeError(f"{self.name} has no MLP neurons")
        return check_range("neuron", neuron, self.arch.d_mlp)

    def weights(self, layer: int, repeat_kv: bool = True) -> dict[str, torch.Tensor | None]:  # mixed shapes
        """Layer weights in TransformerLens layout; every key is present (None where the model has none).

        W_Q [head, d_model, d_head], W_K/W_V [head or kv head, d_model, d_head], W_O [head, d_head, d_model],
        W_in (up or MLP in) and W_gate [d_model, d_mlp], W_out [d_mlp, d_model], ln1/ln2 weights [d_model].
        repeat_kv=False keeps grouped-query K/V at their kv heads (head h reads kv head h // (heads / kv
        heads)) instead of repeating them, which copies W_K and W_V on every call.
        """
        self.check_layer(layer)
        block = self.tl.blocks[layer]
        attn = block.attn
        w: dict[str, Any] = {key: getattr(attn, key, None) for key in ("W_Q", "W_O", "b_Q", "b_O")}
        for key in ("W_K", "W_V", "b_K", "b_V"):  # TL keeps grouped parameters as _W_K behind a repeating property
            grouped = not repeat_kv and hasattr(attn, "_" + key)
            w[key] = getattr(attn, "_" + key) if grouped else getattr(attn, key, None)
        for ln in ("ln1", "ln2"):
            norm = getattr(block, ln, None)
            w[f"{ln}.w"], w[f"{ln}.b"] = self._gain(getattr(norm, "w", None)), getattr(norm, "b", None)
        mlp = getattr(block, "mlp", None)
        for key in ("W_in", "W_gate", "W_out", "b_in", "b_out"):
            w[key] = getattr(mlp, key, None)
        return w

    def norm_sites(self, layer: int) -> dict[str, NormSite | None]:
        """The norms around a layer's sublayers: "attn_pre", "attn_post", "mlp_pre", "mlp_post" (None where
        the architecture has none). Pre-norms act on the sublayer's input, post-norms on its output before
        the residual add (Gemma 2/3's post-norms; OLMo-2's only norms)."""
        block = self.tl.blocks[self.check_layer(layer)]
        placement = self.arch.norm_placement

        def site(name: str) -> NormSite | None:
            norm = getattr(block, name, None)
            if norm is None or not hasattr(norm, "hook_scale"):
                return None
            return NormSite(f"blocks.{layer}.{name}.hook_scale", self._gain(getattr(norm, "w", None)),
                            getattr(norm, "b", None))

        sites: dict[str, NormSite | None] = {"attn_pre": None, "attn_post": None, "mlp_pre": None, "mlp_post": None}
        if placement in ("pre", "pre+post"):
            sites["attn_pre"], sites["mlp_pre"] = site("ln1"), site("ln2")
        if placement == "pre+post":
            sites["attn_post"], sites["mlp_post"] = site("ln1_post"), site("ln2_post")
        if placement == "post":
            sites["attn_post"], sites["mlp_post"] = site("ln1"), site("ln2")
        return sites

    def qk_norm_sites(self, layer: int) -> tuple[NormSite, NormSite] | None:
        """The q and k norms of a layer's attention (applied after hook_q / hook_k, before RoPE), or None.
        Their scales are [batch * pos * heads, 1] per head (arch.qk_norm "head") or [batch, pos, 1] over the
        whole projection ("full")."""
        if self.arch.qk_norm == "none":
            return None
        attn = self.tl.blocks[self.check_layer(layer)].attn
        b = f"blocks.{layer}.attn."
        return (NormSite(b + "q_norm.hook_scale", self._gain(attn.q_norm.w), None),
                NormSite(b + "k_norm.hook_scale", self._gain(attn.k_norm.w), None))

    def act_fn(self, layer: int
               ) -> Callable[[Float[torch.Tensor, "*batch d_mlp"]], Float[torch.Tensor, "*batch d_mlp"]]:
        """The MLP activation of a layer, as a function on tensors. On the bridge it is the HF MLP's own, under
        whichever name its family gives it (Phi-3: activation_fn, GPT-2 / GPT-NeoX: act), as the bridge reads it."""
        mlp = self.tl.blocks[self.check_layer(layer)].mlp
        if self.backend != "bridge":
            return mlp.act_fn
        hf = getattr(mlp, "original_component", None) or mlp
        for attr in _HF_ACT_NAMES:
            fn = getattr(hf, attr, None)
            if callable(fn):
                return fn
        raise BackendError(f"the bridge backend ({self.name}) gives no MLP activation for layer {layer}: its HF MLP "
                           f"({type(hf).__name__}) names none of {', '.join(_HF_ACT_NAMES)}")

    def attn_scale(self, layer: int) -> float:
        """The divisor of a layer's attention scores (sqrt(d_head) unless the model says otherwise)."""
        attn = self.tl.blocks[self.check_layer(layer)].attn
        if hasattr(attn, "attn_scale"):
            return float(attn.attn_scale)
        # TransformerBridge: its HF attention's own factor (Gemma's query_pre_attn_scalar included)
        scaling = getattr(getattr(attn, "original_component", None), "scaling", None)
        return 1.0 / float(scaling) if scaling else float(self.arch.d_head) ** 0.5

    def rope(self, layer: int, seq_len: int) -> tuple[Float[torch.Tensor, "pos rot"], Float[torch.Tensor, "pos rot"],
                                                      bool, int] | None:
        """(cos, sin) [seq_len, rotary_dim] of a layer's rotary embedding, whether rotated pairs are adjacent
        (GPT-J) rather than halves (NeoX/Llama), and rotary_dim; None for models without RoPE."""
        if self.arch.positional != "rope":
            return None
        attn = self.tl.blocks[self.check_layer(layer)].attn
        cfg = self.tl.cfg
        if not hasattr(attn, "rotary_cos") and hasattr(self.tl, "rotary_emb"):  # TransformerBridge: HF's tables
            pos = torch.arange(seq_len, device=self.device)[None]
            x = torch.zeros(1, seq_len, self.arch.d_head, device=self.device)
            kind = self._layer_type(layer)
            with torch.no_grad():  # Gemma 3: each layer kind (sliding, full) has its own tables
                cos, sin = self.tl.rotary_emb(x, pos) if kind is None else self.tl.rotary_emb(x, pos, kind)
            return cos[0], sin[0], False, int(cos.shape[-1])
        return (attn.rotary_cos[:seq_len], attn.rotary_sin[:seq_len], bool(cfg.rotary_adjacent_pairs),
                int(cfg.rotary_dim))

    def split_extra(self, layer: int) -> dict[str, Any]:
        """What core.models.nnsight_split.split_attention needs on the bridge beyond Llama's attention: the q/k
        norm gains, the scores' divisor and the sliding window of ``layer`` (Gemma 3); empty for Llama-style."""
        extra: dict[str, Any] = {"scale": self.attn_scale(layer)}
        sites = self.qk_norm_sites(layer)
        if sites is not None:
            extra["qk_norm"] = (sites[0].w, sites[1].w)
        types = getattr(self.tl.cfg, "layer_types", None)
        if types and types[layer] == "sliding_attention":  # a key is seen while query - key < window
            extra["window"] = int(self.tl.original_model.config.sliding_window)
        return extra

    def _layer_type(self, layer: int) -> str | None:
        """A bridged layer's attention kind ("sliding_attention", "full_attention") where its rotary embedding
        takes one (Gemma 3), else None."""
        import inspect

        emb = getattr(self.tl.rotary_emb, "original_component", None) or self.tl.rotary_emb  # HF's, under the bridge's
        if "layer_type" not in inspect.signature(emb.forward).parameters:
            return None
        types = getattr(self.tl.cfg, "layer_types", None)
        return str(types[layer]) if types else "full_attention"

    def final_logits(self, resid: Float[torch.Tensor, "batch pos d_model"]) -> Float[torch.Tensor, "batch vocab"]:
        """Last-position logits [B, vocab] from the final residual stream [B, S, d_model] (final norm, then
        unembedding of that one position only)."""
        x = resid[:, -1:]
        if getattr(self.tl.cfg, "normalization_type", None) is not None:
            x = self.tl.ln_final(x)
        return self.tl.unembed(x)[:, 0]

    def forward_logits(self, resid: Float[torch.Tensor, "*batch d_model"]) -> Float[torch.Tensor, "*batch vocab"]:
        """Logits of final residual vectors as the model's own forward makes them: the final norm, the
        unembedding and the soft cap where the model has one (read_out, the lens' reading, has no cap)."""
        from transformer_lens.utilities.activation_functions import apply_softcap

        x = self.tl.ln_final(resid) if getattr(self.tl.cfg, "normalization_type", None) is not None else resid
        return apply_softcap(self.tl.unembed(x), self.tl.cfg.output_logits_soft_cap)

    @property
    def weight_dtype(self) -> torch.dtype:
        """The weights' precision (float32 unless loaded with --dtype)."""
        return next(self.tl.parameters()).dtype

    def read_out(self, resid: Float[torch.Tensor, "*batch d_model"]) -> Float[torch.Tensor, "*batch vocab"]:
        """Logits of residual vectors of any leading shape: the final norm (each vector's own scale), then the
        unembedding; what the logit lens reads at every layer and position."""
        if getattr(self.tl.cfg, "normalization_type", None) is not None:
            resid = self.tl.ln_final(resid)
        logits = resid @ self.tl.W_U
        return logits if getattr(self.tl, "b_U", None) is None else logits + self.tl.b_U

    @property
    def W_U(self) -> Float[torch.Tensor, "d_model vocab"]:
        return self.tl.W_U

    @property
    def b_U(self) -> Float[torch.Tensor, " vocab"] | None:
        return self.tl.b_U

    @property
    def W_E(self) -> Float[torch.Tensor, "vocab d_model"]:
        return self.tl.W_E

    @property
    def W_pos(self) -> Float[torch.Tensor, "n_ctx d_model"] | None:
        """The learned positional embedding (None for models without one)."""
        return getattr(self.tl, "W_pos", None) if self.arch.positional == "learned" else None

    def final_norm_weight(self) -> Float[torch.Tensor, " d_model"] | None:
        return self._gain(getattr(getattr(self.tl, "ln_final", None), "w", None))

    def final_norm_bias(self) -> Float[torch.Tensor, " d_model"] | None:
        """The final LayerNorm's bias (None for RMSNorm or no final norm)."""
        return getattr(getattr(self.tl, "ln_final", None), "b", None)

    def head_writes(self, z: Float[torch.Tensor, "batch pos head d_head"], layer: int,
                    heads_first: bool = False) -> Float[torch.Tensor, "_ _ _ d_model"]:
        """Per-head writes into the residual from hook_z: [batch, pos, head, d_model], or with heads_first
        [head, batch, pos, d_model] (one batched product, no transpose afterwards)."""
        W_O = self.tl.blocks[layer].attn.W_O
        if not heads_first:
            return torch.einsum("bphd,hdm->bphm", z, W_O)
        n, seq, heads, d_head = z.shape
        flat = torch.bmm(z.permute(2, 0, 1, 3).reshape(heads, n * seq, d_head), W_O)
        return flat.view(heads, n, seq, W_O.shape[-1])

    def to(self, device: str) -> HookedModel:
        if hasattr(self.tl, "move_model_modules_to_device"):
            self.tl.to(device, print_details=False)
        else:
            self.tl.to(device)
        return self
