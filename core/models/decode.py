"""Greedy and sampled decoding for HookedModel, with the thread count each step is fastest at.

Why not TransformerLens' ``generate`` as it stands: a decode step is about 200 small matrix-vector
products (smollm2-135m), each a parallel region that waits for its slowest thread. On a machine whose
cores are shared (two cores, several busy processes), a thread that is descheduled holds every region
up: measured on smollm2-135m at load 5-7, 2 threads took 0.6-3.5 s a token where 1 thread took
60-270 ms; on an idle machine 2 threads are the faster. So when every core but one is taken by other
work (``busy``), the whole generation runs at one thread; otherwise the loop times its steps
and keeps the faster of the process's thread count and one thread, trying the other again now and
then (a step tried at the slower count costs one slow step; under load one such step cost 2 s).

The loop is TransformerLens' own (HookedTransformer.generate 3.9, greedy and batch 1): the same calls
with the same arguments (embedding of the whole sequence each step, the attention mask, the KV cache),
so the tokens are its tokens and every hook fires as it would (tests/test_generation.py holds them
equal). ``torch.set_num_threads`` is process-wide: other threads of the process (the app's) run at
the chosen count while a generation is under way; the count is restored at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int

# after this many steps at the chosen count, one step at the other count checks the choice still holds
RECHECK_EVERY = 16


def busy() -> bool:
    """Whether other work leaves this process less than two idle cores' worth: at this instant every core
    but one runs another task (/proc/loadavg's runnable count, less this one), or over the last minute the
    load average exceeded the cores by one. The instant count keeps a generation's own recent load (a
    dedicated machine generating for a minute) from reading as someone else's."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        fields = Path("/proc/loadavg").read_text().split()
        load, others_now = float(fields[0]), int(fields[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this system
            return False
        others_now = load
    return others_now >= cores - 1 or load >= cores + 1


class ThreadChooser:
    """Picks, step by step, the thread count (the process's or 1) whose last step was the faster."""

    def __init__(self, threads: int | None = None) -> None:
        self.saved = torch.get_num_threads()
        self.options = sorted({self.saved if threads is None else int(threads), 1}, reverse=True)
        self.seconds: dict[int, float] = {}
        self.step = 0
        self.current = self.options[0]

    def next_count(self) -> int:
        """The count to run the next step at: each option once, then the faster, with a recheck."""
        untried = [n for n in self.options if n not in self.seconds]
        if untried:
            choice = untried[0]
        else:
            best = min(self.seconds, key=self.seconds.__getitem__)
            other = [n for n in self.options if n != best]
            choice = other[0] if other and self.step % RECHECK_EVERY == RECHECK_EVERY - 1 else best
        self.step += 1
        self.current = choice
        if torch.get_num_threads() != choice:
            torch.set_num_threads(choice)
        return choice

    def record(self, seconds: float) -> None:
        self.seconds[self.current] = seconds

    def restore(self) -> None:
        if torch.get_num_threads() != self.saved:
            torch.set_num_threads(self.saved)


def timed_steps(chooser: ThreadChooser | None) -> Callable[[Callable[[], Any]], Any]:
    """Runs one decode step under the chooser's thread count and records its time (plain call without)."""

    def run(step: Callable[[], Any]) -> Any:
        if chooser is None:
            return step()
        chooser.next_count()
        started = time.perf_counter()
        out = step()
        chooser.record(time.perf_counter() - started)
        return out

    return run


def decode(tl: Any, tokens: Int[torch.Tensor, "1 pos"], max_new_tokens: int, eos: int | None = None,
           temperature: float | None = None, adapt_threads: bool = True, lean: bool = True) -> list[int]:
    """New token ids after ``tokens`` [1, pos] from a HookedTransformer with a tokenizer, with a KV cache:
    greedy when ``temperature`` is None, else sampled (TransformerLens' sample_logits). Stops after
    ``eos``. The first pass runs the whole prompt; each later one the newest position. The lean forward
    (LeanDecoder) runs it unless ``lean`` is False or ``lean_refusal`` names a reason, then TransformerLens'
    own loop does. ``adapt_threads``: one thread throughout on a busy machine, else the faster count step by
    step (the module docstring)."""
    from transformer_lens.utilities import get_attention_mask

    cfg = tl.cfg
    saved = torch.get_num_threads()
    adapt = adapt_threads and saved > 1
    one_thread = adapt and busy()
    if one_thread:
        torch.set_num_threads(1)
    chooser = ThreadChooser() if adapt and not one_thread else None
    step = timed_steps(chooser)
    mask0 = None
    if tl.tokenizer is not None and tl.tokenizer.pad_token_id is not None:  # no pad token: nothing is padding
        mask0 = get_attention_mask(tl.tokenizer, tokens, cfg.default_prepend_bos)
    tl.eval()
    try:
        with torch.inference_mode():
            if lean and lean_refusal(tl, mask0) is None:
                return _lean_loop(tl, tokens, max_new_tokens, eos, temperature, step)
            return _tl_loop(tl, tokens, max_new_tokens, eos, temperature, step, mask0)
    finally:
        if torch.get_num_threads() != saved:
            torch.set_num_threads(saved)


def _next_id(final: torch.Tensor, temperature: float | None, seen: torch.Tensor) -> torch.Tensor:
    from transformer_lens.utilities import sample_logits

    if temperature is None:
        return final.argmax(-1)
    return sample_logits(final, temperature=temperature, tokens=seen)


def _lean_loop(tl: Any, tokens: torch.Tensor, max_new_tokens: int, eos: int | None, temperature: float | None,
               step: Callable[[Callable[[], Any]], Any]) -> list[int]:
    device = tokens.device
    decoder = LeanDecoder(tl, tokens.shape[0], tokens.shape[1] + max_new_tokens, device)
    new: list[int] = []
    seen = tokens
    final = decoder.step(tokens, 0)  # the prompt pass is not a decode step: the process's count, untimed
    for index in range(max_new_tokens):
        if index > 0:
            final = step(lambda seen=seen: decoder.step(seen[:, -1:], seen.shape[1] - 1))
        nxt = _next_id(final, temperature, seen).to(device)
        new.append(int(nxt[0]))
        if eos is not None and new[-1] == eos:
            break
        seen = torch.cat([seen, nxt.view(-1, 1)], dim=1)
    return new


def _tl_loop(tl: Any, tokens: torch.Tensor, max_new_tokens: int, eos: int | None, temperature: float | None,
             step: Callable[[Callable[[], Any]], Any], mask0: torch.Tensor | None) -> list[int]:
    """TransformerLens' generate loop (3.9, batch 1), call for call."""
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    cfg = tl.cfg
    device = tokens.device
    cache = TransformerLensKeyValueCache.init_cache(cfg, cfg.device, tokens.shape[0])
    embeds = tl.embed(tokens)
    new: list[int] = []
    seen = tokens
    for index in range(max_new_tokens):
        mask = None
        if mask0 is not None:
            mask = mask0.to(device) if not new else torch.cat(
                [mask0.to(device), torch.ones(1, len(new), dtype=mask0.dtype, device=device)], dim=1)

        def forward(index: int = index, mask: Any = mask,
                    embeds: Float[torch.Tensor, "batch pos d_model"] = embeds) -> Float[torch.Tensor, "batch d_vocab"]:
            residual, shortformer = tl.get_residual(embeds, tl.get_pos_offset(cache, 1),
                                                    return_shortformer_pos_embed=True, device=device,
                                                    attention_mask=mask)
            return tl.forward(residual[:, -1:] if index > 0 else residual, return_type="logits",
                              past_kv_cache=cache, start_at_layer=0, shortformer_pos_embed=shortformer,
                              attention_mask=mask)[:, -1, :]

        # the prompt pass is not a decode step: it runs at the process's count, untimed
        final = step(forward) if index > 0 else forward()
        nxt = _next_id(final, temperature, seen).to(device)
        new.append(int(nxt[0]))
        if eos is not None and new[-1] == eos:
            break
        seen = torch.cat([seen, nxt.view(1, 1)], dim=1)
        embeds = torch.hstack([embeds, tl.embed(nxt.unsqueeze(-1))])
    return new


# -- the lean decode forward ----------------------------------------------------------------------------
# TransformerLens' forward spends about half a decode step in Python around the products (per-module calls,
# einops, rotary over every cached key each step, copies of transposed weights, the unembedding of every
# prompt position): measured with cProfile on smollm2-135m, 1.5 s of 3.1 s in F.linear. The lean forward
# below makes the same products on the same weight tensors (views, no copies), in the same order, and
# keeps its own preallocated KV cache of rotated keys (rotation is elementwise, so a key rotated when it is
# made equals the one TransformerLens rotates again each step). Hooks on the hook points it passes fire as
# TransformerLens fires them (same tensor, same shape); a hook anywhere else, or a configuration it does not
# reproduce, sends the generation to TransformerLens' loop (``lean_refusal`` says why).

# the hook points the lean forward fires (TransformerLens names, with the block index as {l})
LEAN_HOOKS = ("blocks.{l}.hook_resid_pre", "blocks.{l}.hook_attn_out", "blocks.{l}.hook_resid_mid",
              "blocks.{l}.ln2.hook_normalized", "blocks.{l}.attn.hook_z", "blocks.{l}.mlp.hook_pre",
              "blocks.{l}.mlp.hook_pre_linear", "blocks.{l}.mlp.hook_post", "blocks.{l}.hook_mlp_out",
              "blocks.{l}.hook_resid_post")

# configuration flags whose computation the lean forward does not reproduce (each must be falsy)
_UNSUPPORTED_FLAGS = ("use_split_qkv_input", "use_attn_in", "use_attn_result", "use_hook_mlp_in",
                      "ungroup_grouped_query_attention", "use_hook_tokens", "load_in_4bit", "use_logn_attn",
                      "use_dynamic_ntk_rope", "use_attention_sinks", "parallel_attn_mlp", "attn_only",
                      "post_embedding_ln", "clip_qkv")


def lean_refusal(tl: Any, mask: Int[torch.Tensor, "batch pos"] | None = None) -> str | None:
    """Why the lean forward cannot stand in for ``tl``'s (a hook it does not fire, a configuration it does
    not reproduce, a padded prompt), or None when it can."""
    from transformer_lens.components import GatedMLP, RMSNorm

    cfg = tl.cfg
    for flag in _UNSUPPORTED_FLAGS:
        if getattr(cfg, flag, None):
            return f"cfg.{flag}"
    if cfg.positional_embedding_type != "rotary" or cfg.normalization_type != "RMS":
        return f"{cfg.positional_embedding_type} positions, {cfg.normalization_type} norm"
    if getattr(cfg, "n_devices", 1) != 1 or cfg.original_architecture in _post_norm_architectures():
        return "several devices or a post-norm architecture"
    if getattr(cfg, "attention_dir", "causal") != "causal":
        return "attention not causal"
    if mask is not None and not bool(mask.all()):
        return "a prompt with padding"
    for block in tl.blocks:
        if type(block.mlp) is not GatedMLP or not isinstance(block.ln2, RMSNorm):
            return "an MLP or norm other than a gated MLP and RMSNorm"
        if getattr(block.attn, "_attention_dir_override", None) not in (None, "causal"):
            return "attention not causal"
        if getattr(block.mlp, "hook_mid", None) is not None and cfg.is_layer_norm_activation():
            return "a layer-norm activation"
    if torch.nn.modules.module._global_forward_hooks or torch.nn.modules.module._global_forward_pre_hooks:
        return "a global forward hook"
    allowed = {name.format(l=layer) for layer in range(cfg.n_layers) for name in LEAN_HOOKS}
    for name, module in tl.named_modules():
        if module._forward_pre_hooks or (module._forward_hooks and name not in allowed):
            return f"a hook on {name or 'the model'}"
    return None


def _post_norm_architectures() -> tuple[str, ...]:
    try:
        from transformer_lens.components.transformer_block import POST_NORM_ARCHITECTURES
    except ImportError:  # an older TransformerLens without post-norm blocks
        return ()
    return tuple(POST_NORM_ARCHITECTURES)


def _fire(hook_point: Any, x: torch.Tensor) -> torch.Tensor:
    """The hook point's hooks on ``x`` when it has any (TransformerLens' own call), else ``x`` untouched."""
    return hook_point(x) if hook_point._forward_hooks else x


def _rms(norm: Any, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """TransformerLens' RMSNorm, op for op, firing its hook_normalized only (the lean set's)."""
    if dtype not in (torch.float32, torch.float64):
        x = x.to(torch.float32)
    scale = (x.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
    return _fire(norm.hook_normalized, x / scale).to(dtype) * norm.w


class LeanDecoder:
    """TransformerLens' forward for rotary, RMSNorm, gated-MLP models (Llama, Mistral, Qwen, Gemma 2/3, ...)
    with a preallocated KV cache: ``step(ids, offset)`` runs the positions offset.. of a sequence and gives the
    last position's logits [batch, vocab]. Weights are the module's own tensors (views)."""

    def __init__(self, tl: Any, batch: int, total: int, device: torch.device) -> None:
        cfg = tl.cfg
        self.tl, self.cfg, self.dtype = tl, cfg, cfg.dtype
        self.layers = []
        for block in tl.blocks:
            attn, mlp = block.attn, block.mlp
            grouped = hasattr(attn, "_W_K")
            w_k, w_v = (attn._W_K, attn._W_V) if grouped else (attn.W_K, attn.W_V)
            b_k, b_v = (attn._b_K, attn._b_V) if grouped else (attn.b_K, attn.b_V)
            n_kv = w_k.shape[0]
            if attn.rotary_cos.shape[0] < total:  # as TransformerLens extends them when a sequence outgrows them
                attn._extend_rotary_embeddings(min(cfg.n_ctx, max(total, 2 * attn.rotary_cos.shape[0])))
            self.layers.append(dict(
                block=block, attn=attn, mlp=mlp,
                # [(head d_head), d_model] as TransformerLens' simple_attn_linear rearranges them
                w_q=attn.W_Q.permute(0, 2, 1).reshape(-1, cfg.d_model), b_q=attn.b_Q.reshape(-1),
                w_k=w_k.permute(0, 2, 1).reshape(-1, cfg.d_model), b_k=b_k.reshape(-1),
                w_v=w_v.permute(0, 2, 1).reshape(-1, cfg.d_model), b_v=b_v.reshape(-1),
                w_o=attn.W_O.permute(2, 0, 1).reshape(cfg.d_model, -1).contiguous(),
                w_gate=mlp.W_gate.T.contiguous(), w_in=mlp.W_in.T.contiguous(), w_out=mlp.W_out.T.contiguous(),
                n_kv=n_kv, repeat=cfg.n_heads // n_kv,
                window=cfg.window_size if getattr(attn, "attn_type", "global") == "local" else None,
                keys=torch.empty(batch, total, n_kv, cfg.d_head, dtype=self.dtype, device=device),
                values=torch.empty(batch, total, n_kv, cfg.d_head, dtype=self.dtype, device=device)))
        self.w_u = tl.unembed.W_U.T.contiguous()  # a view when the weights are stored as HF's (tied or not)

    def _trig(self, attn: Any, offset: int, n: int, trig: dict[int, tuple[torch.Tensor, torch.Tensor]]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary cos and sin rows of positions offset.. [1, n, 1, rotary_dim], once a step per table
        (local and global layers may have their own)."""
        key = id(attn.rotary_cos)
        if key not in trig:
            trig[key] = (attn.rotary_cos[None, offset: offset + n, None, :],
                         attn.rotary_sin[None, offset: offset + n, None, :])
        return trig[key]

    def _rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """TransformerLens' apply_rotary (rotate_every_two by its rule; the same values, fewer copies)."""
        dim = self.cfg.rotary_dim
        x_rot = x[..., :dim]
        if self.cfg.rotary_adjacent_pairs:
            flip = torch.stack((-x_rot[..., 1::2], x_rot[..., ::2]), dim=-1).flatten(-2)
        else:
            half = dim // 2
            flip = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
        rotated = x_rot * cos + flip * sin
        return rotated if dim == x.shape[-1] else torch.cat([rotated, x[..., dim:]], dim=-1)

    def _attention(self, layer: dict, x: torch.Tensor, offset: int,
                   trig: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        from torch.nn import functional as F
        from transformer_lens.utilities.activation_functions import apply_softcap

        cfg, attn = self.cfg, layer["attn"]
        batch, n = x.shape[:2]
        q = F.linear(x, layer["w_q"], layer["b_q"]).reshape(batch, n, cfg.n_heads, cfg.d_head)
        k = F.linear(x, layer["w_k"], layer["b_k"]).reshape(batch, n, layer["n_kv"], cfg.d_head)
        v = F.linear(x, layer["w_v"], layer["b_v"]).reshape(batch, n, layer["n_kv"], cfg.d_head)
        if cfg.use_qk_norm:
            q = _rms(attn.q_norm, q.reshape(-1, cfg.d_head), self.dtype).reshape(q.shape)
            k = _rms(attn.k_norm, k.reshape(-1, cfg.d_head), self.dtype).reshape(k.shape)
        end = offset + n
        cos, sin = self._trig(attn, offset, n, trig)
        layer["keys"][:, offset:end] = self._rotary(k, cos, sin)
        layer["values"][:, offset:end] = v
        keys, values = layer["keys"][:, :end], layer["values"][:, :end]
        if layer["repeat"] > 1:
            keys = keys.repeat_interleave(layer["repeat"], dim=2)
            values = values.repeat_interleave(layer["repeat"], dim=2)
        q = self._rotary(q, cos, sin)
        scores = q.permute(0, 2, 1, 3) @ keys.permute(0, 2, 3, 1) / attn.attn_scale
        scores = apply_softcap(scores, cfg.attn_scores_soft_cap)
        if n > 1 or (layer["window"] is not None and end > layer["window"]):
            query_pos = torch.arange(offset, end, device=x.device)[:, None]
            key_pos = torch.arange(end, device=x.device)[None, :]
            allowed = key_pos <= query_pos
            if layer["window"] is not None:
                allowed = allowed & (key_pos > query_pos - layer["window"])
            scores = torch.where(allowed[None, None], scores, attn.IGNORE)
        pattern = F.softmax(scores, dim=-1).to(values.dtype)
        z = _fire(attn.hook_z, (pattern @ values.permute(0, 2, 1, 3)).permute(0, 2, 1, 3))
        return F.linear(z.reshape(batch, n, -1), layer["w_o"], attn.b_O)

    def _mlp(self, layer: dict, x: torch.Tensor) -> torch.Tensor:
        from torch.nn import functional as F

        mlp = layer["mlp"]
        pre = _fire(mlp.hook_pre, F.linear(x, layer["w_gate"]))
        pre_linear = _fire(mlp.hook_pre_linear, F.linear(x, layer["w_in"]))
        post = _fire(mlp.hook_post, mlp.act_fn(pre) * pre_linear + mlp.b_in)
        return F.linear(post, layer["w_out"], mlp.b_out)

    def step(self, ids: Int[torch.Tensor, "batch new"], offset: int) -> Float[torch.Tensor, "batch vocab"]:
        """Logits [batch, vocab] of the last of the positions offset.. (ids [batch, n]), the cache updated."""
        from torch.nn import functional as F
        from transformer_lens.utilities.activation_functions import apply_softcap

        cfg, dtype = self.cfg, self.dtype
        residual = self.tl.embed.W_E[ids, :]
        trig: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for layer in self.layers:
            block = layer["block"]
            residual = _fire(block.hook_resid_pre, residual)
            attn_out = self._attention(layer, _rms(block.ln1, residual, dtype), offset, trig)
            if cfg.use_normalization_before_and_after:
                attn_out = _rms(block.ln1_post, attn_out, dtype)
            residual = _fire(block.hook_resid_mid, residual + _fire(block.hook_attn_out, attn_out))
            mlp_out = self._mlp(layer, _rms(block.ln2, residual, dtype))
            if cfg.use_normalization_before_and_after:
                mlp_out = _rms(block.ln2_post, mlp_out, dtype)
            residual = _fire(block.hook_resid_post, residual + _fire(block.hook_mlp_out, mlp_out))
        # norms act position by position: the last position alone gives the logits TransformerLens takes
        last = _rms(self.tl.ln_final, residual[:, -1:], dtype)
        logits = F.linear(last, self.w_u, self.tl.unembed.b_U)
        return apply_softcap(logits, cfg.output_logits_soft_cap)[:, -1, :]
