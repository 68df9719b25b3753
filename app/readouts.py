"""Small reads of a loaded model through the HookedModel interface (run under the model's lock).

These are the few views no engine offers yet: top predictions, one head's attention pattern and
what that head writes to the target's logit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def top_predictions(loaded: Any, prompt: str, k: int = 8) -> list[tuple[str, float]]:
    with loaded.lock:
        return loaded.model.top_predictions(prompt, k=k)


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
    loaded: Any, prompt: str, layer: int, head: int, target: str, foil: str | None, k: int = 10
) -> HeadView:
    import torch

    model = loaded.model
    model.check_layer(layer)
    model.check_head(head)
    enc = model.encode(prompt, target, foil or None)
    names = [f"blocks.{layer}.attn.hook_pattern", f"blocks.{layer}.attn.hook_z", "ln_final.hook_scale"]
    with loaded.lock, torch.no_grad():
        _, cache = model.run_with_cache(enc.tokens, names_filter=lambda n: n in names)
        pattern = cache[names[0]][0, head]
        writes = model.head_writes(cache[names[1]], layer)[0, :, head]  # [pos, d_model]
        if "ln_final.hook_scale" in cache.cache_dict:  # the final norm divides by this scale
            writes = writes / cache["ln_final.hook_scale"][0]
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
