"""Small reads of a loaded model through the HookedModel interface (run under the model's lock).

These are the few views no engine offers yet: top predictions, one head's attention pattern and
what that head writes to the target's logit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_HELD_SEQ = 64  # prompts up to this length keep every head's pattern and z from the one pass


@dataclass
class PromptPass:
    """One forward over a prompt: the top next tokens (at the last position and at every position), and
    (short prompts) every head's pattern and z."""

    top: list[tuple[str, float]]
    held: dict[str, Any]  # hook name -> tensor [batch=1, ...] on the CPU; empty for long prompts
    tops: list[list[tuple[str, float]]] = field(default_factory=list)  # [position] -> top next tokens there
    tokens: list[str] = field(default_factory=list)  # the prompt's tokens


def prompt_pass(loaded: Any, prompt: str, k: int = 8) -> PromptPass:
    """Top predictions and the activations the head view needs, from a single forward pass."""
    import torch

    model = loaded.model
    tokens = model.to_tokens(prompt)
    keep = tokens.shape[1] <= MAX_HELD_SEQ
    wanted = ("attn.hook_pattern", "attn.hook_z", "ln_final.hook_scale")
    with loaded.lock, torch.no_grad():
        if keep:
            logits, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith(wanted))
            held = {n: t.cpu() for n, t in cache.cache_dict.items()}
        else:
            logits, held = model.logits(tokens), {}
    probs = torch.softmax(logits[0].float(), -1).topk(k)  # [pos, k]
    tops = [[(model.decode([int(i)]), float(p)) for p, i in zip(ps, ids, strict=True)]
            for ps, ids in zip(probs.values, probs.indices, strict=True)]
    return PromptPass(tops[-1], held, tops, model.to_str_tokens(tokens))


def top_predictions(loaded: Any, prompt: str, k: int = 8) -> list[tuple[str, float]]:
    return prompt_pass(loaded, prompt, k).top


@dataclass
class HeadView:
    layer: int
    head: int
    tokens: list[str]
    pattern: Any  # [query, key]
    logit_effect: (
        float  # the head's write at the last position . (W_U[target] - W_U[foil]), after the final norm
    )
    promoted: list[tuple[str, float]]  # tokens whose logits the head's write raises most
    per_query: Any  # [query] the same effect for every position's write
    promoted_words: list[tuple[str, float]] = field(default_factory=list)  # the same, whole words only


def head_view(
    loaded: Any,
    prompt: str,
    layer: int,
    head: int,
    target: str,
    foil: str | None,
    k: int = 10,
    held: dict[str, Any] | None = None,
    position: int = -1,
) -> HeadView:
    """One head's pattern and logit write at ``position`` (the explained prediction; -1 the last); reuses
    ``held`` activations (PromptPass) when they cover it."""
    import torch

    model = loaded.model
    model.check_layer(layer)
    model.check_head(head)
    enc = model.encode(prompt, target, foil or None)
    names = [f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_z", "ln_final.hook_scale"]
    with loaded.lock, torch.no_grad():
        if held and all(n in held for n in names[:2]):
            cache = held
        else:
            _, run = model.run_with_cache(enc.tokens, names_filter=lambda n: n in names)
            cache = run.cache_dict
        device = model.W_U.device
        pattern = cache[names[0]][0, head]
        writes = model.head_writes(cache[names[1]].to(device), layer)[0, :, head]  # [pos, d_model]
        if names[2] in cache:  # the final norm divides by this scale
            writes = writes / cache[names[2]][0].to(device)
        gamma = model.final_norm_weight()
        if gamma is not None:
            writes = writes * gamma
        direction = model.W_U[:, enc.target_id]
        if enc.foil_id is not None:
            direction = direction - model.W_U[:, enc.foil_id]
        per_query = writes @ direction
        pushed = writes[position] @ model.W_U
        top = pushed.topk(k)
        words = whole_words(model)
        top_words = pushed.masked_fill(~words.to(pushed.device), float("-inf")).topk(min(k, int(words.sum())))
    promoted = [(model.decode([int(i)]), float(v)) for v, i in zip(top.values, top.indices, strict=True)]
    promoted_words = [(model.decode([int(i)]), float(v))
                      for v, i in zip(top_words.values, top_words.indices, strict=True)]
    return HeadView(
        layer, head, enc.str_tokens, pattern.cpu(), float(per_query[position]), promoted, per_query.cpu(),
        promoted_words
    )


_WORDS: dict[tuple[str, int], Any] = {}


def whole_words(model: Any):
    """A [vocab] bool mask of whole-word tokens: a word-start marker (a leading space, BPE's "Ġ" or
    SentencePiece's "▁") followed by at least two letters. Sub-word pieces ("ing", "ary") and punctuation
    are out, so "tokens it pushes up" reads as words. Toy vocabularies count every token."""
    import torch

    key = (model.name, int(model.arch.d_vocab))
    if key not in _WORDS:
        tok = model.tokenizer
        n = int(model.arch.d_vocab)
        if not hasattr(tok, "convert_ids_to_tokens"):
            _WORDS[key] = torch.ones(n, dtype=torch.bool)
        else:
            pieces = tok.convert_ids_to_tokens(list(range(min(n, len(tok)))))
            mask = [isinstance(p, str) and p[:1] in ("Ġ", "▁", " ") and len(p) > 2 and p[1:].isalpha()
                    for p in pieces]
            mask += [False] * (n - len(mask))
            _WORDS[key] = torch.tensor(mask, dtype=torch.bool)
    return _WORDS[key]
