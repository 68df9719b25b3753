"""Small reads of a loaded model through the HookedModel interface (run under the model's lock).

These are the few views no engine offers yet: top predictions, one head's attention pattern and
what that head writes to the target's logit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_HELD_SEQ = 64  # prompts up to this length keep every head's pattern and z from the one pass


@dataclass
class PromptPass:
    """One forward over a prompt: the top next tokens, and (short prompts) every head's pattern and z."""

    top: list[tuple[str, float]]
    held: dict[str, Any]  # hook name -> tensor [batch=1, ...] on the CPU; empty for long prompts


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
    probs = torch.softmax(logits[0, -1].float(), -1).topk(k)
    top = [(model.decode([int(i)]), float(p)) for p, i in zip(probs.values, probs.indices, strict=True)]
    return PromptPass(top, held)


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


def head_view(
    loaded: Any,
    prompt: str,
    layer: int,
    head: int,
    target: str,
    foil: str | None,
    k: int = 10,
    held: dict[str, Any] | None = None,
) -> HeadView:
    """One head's pattern and logit write; reuses ``held`` activations (PromptPass) when they cover it."""
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
        top = (writes[-1] @ model.W_U).topk(k)
    promoted = [(model.decode([int(i)]), float(v)) for v, i in zip(top.values, top.indices, strict=True)]
    return HeadView(
        layer, head, enc.str_tokens, pattern.cpu(), float(per_query[-1]), promoted, per_query.cpu()
    )
