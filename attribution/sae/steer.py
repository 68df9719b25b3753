"""Steering and ablation of one unit: a dictionary feature (SAE, transcoder) or an MLP neuron.

Two interventions, both written as a change of the unit's activation times its decoder direction,
added where the dictionary writes (``hook_out``: the residual stream for an SAE, the MLP output for a
transcoder or a neuron), so everything the dictionary does not explain stays as it was:

- add (``alpha``): ``out += alpha * W_dec[f]``, i.e. the unit's activation raised by ``alpha``;
- clamp (``value``): ``out += (value - f(x)) * W_dec[f]`` where ``f(x)`` is the unit's own activation
  at that position (read at ``hook``). Ablation is the clamp to 0.

Position 0 (the attention sink) is left alone by default. Generation is greedy, with the intervention
on at every forward (the whole sequence is recomputed each step, so every position is steered).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from attribution.sae.units import check_unit
from core.errors import RangeError
from core.options import check_finite, check_number

if TYPE_CHECKING:
    from core.models.hooked import HookedModel


def _first(act: Any, skip_first: int) -> int:
    """The first position of ``act`` to steer: ``skip_first`` on a whole sequence; 0 on a one-position
    activation, which is a KV-cached generation step (a position after the prompt, never a skipped one)."""
    return skip_first if act.shape[1] > 1 else 0


def steering_hooks(d: Any, unit: int, alpha: float | None = None, value: float | None = None,
                   skip_first: int = 1) -> list[tuple[str, Any]]:
    """TransformerLens forward hooks that add ``alpha`` to unit ``unit`` (or clamp it to ``value``)."""
    check_unit(d, unit)
    if (alpha is None) == (value is None):
        raise RangeError("give exactly one of alpha (add) or value (clamp)")
    direction = d.W_dec[unit].detach().float()
    if alpha is not None:
        check_number("alpha", alpha)

        def add(act, hook):  # noqa: ARG001 - TransformerLens passes the hook point
            out = act.clone()
            out[:, _first(act, skip_first):] += (alpha * direction).to(act.dtype).to(act.device)
            return out

        return [(d.hook_out, add)]
    check_number("value", value)
    seen: dict[str, Any] = {}

    def own(x):
        return d.encode(x.flatten(2) if x.dim() > 3 else x)[..., unit].float()

    def write(act, hook):  # noqa: ARG001
        f_old = seen.pop("f") if "f" in seen else own(act)
        first = _first(act, skip_first)
        delta = (value - f_old)[:, first:, None] * direction.to(act.device)
        out = act.clone()
        out[:, first:] += delta.to(act.dtype)
        return out

    if d.hook == d.hook_out:
        return [(d.hook_out, write)]

    def read(act, hook):  # noqa: ARG001
        seen["f"] = own(act)
        return act

    return [(d.hook, read), (d.hook_out, write)]


@dataclass
class SteerResult:
    dictionary: str
    feature: int
    mode: str  # add | clamp | ablate
    strength: float  # alpha (add) or the clamped value
    prompt: str
    target: str | None
    clean_text: str
    steered_text: str
    clean_activation: float  # the unit's activation at the last prompt position, unsteered
    target_logit_clean: float | None = None
    target_logit_steered: float | None = None
    target_prob_clean: float | None = None
    target_prob_steered: float | None = None
    top_clean: list[tuple[str, float]] = field(default_factory=list)
    top_steered: list[tuple[str, float]] = field(default_factory=list)

    @property
    def logit_change(self) -> float | None:
        if self.target_logit_clean is None:
            return None
        return self.target_logit_steered - self.target_logit_clean

    @property
    def prob_change(self) -> float | None:
        if self.target_prob_clean is None:
            return None
        return self.target_prob_steered - self.target_prob_clean

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "logit_change": self.logit_change, "prob_change": self.prob_change}


def _generate(model: HookedModel, tokens: Any, n_new: int) -> list[int]:
    """Greedy continuation ids (HookedModel.greedy, TransformerLens' loop at the faster thread count): with
    the KV cache the steering hooks see the prompt in the first pass and then each new position alone (see
    _first). A one-token prompt, whose first pass would look like a cached step, recomputes the whole
    sequence each step."""
    return model.greedy(tokens, n_new, kv_cache=tokens.shape[1] > 1)


MAX_NEW_TOKENS = 512  # greedy steps of one steering call (two continuations)


def check_new_tokens(n_new: int) -> int:
    """RangeError unless 0 <= n_new <= MAX_NEW_TOKENS."""
    if isinstance(n_new, bool) or not isinstance(n_new, int) or not 0 <= n_new <= MAX_NEW_TOKENS:
        raise RangeError(f"--tokens {n_new} is out of range: steering generates 0..{MAX_NEW_TOKENS} tokens")
    return n_new


def steer(model: HookedModel, d: Any, unit: int, prompt: str, alpha: float | None = None,
          value: float | None = None, target: str | None = None, n_new: int = 20,
          skip_first: int = 1, k: int = 5) -> SteerResult:
    """The greedy continuation of ``prompt`` with and without the intervention, side by side, and the
    target's logit and probability at the last prompt position both ways."""
    import torch

    from core.models.hooked import require

    require(model, "sae steering")
    hooks = steering_hooks(d, unit, alpha, value, skip_first)
    check_new_tokens(n_new)
    tokens = model.to_tokens(prompt)  # generation stops at the model's context (_generate)
    t_id = model.token_id(target) if target is not None else None
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=[d.hook])
        a = cache[d.hook]
        clean_act = float(d.encode(a.flatten(2) if a.dim() > 3 else a)[0, -1, unit])
        clean = model(tokens)[0, -1].float()
        with model.hooks(fwd_hooks=hooks):
            steered = model(tokens)[0, -1].float()
            steered_ids = _generate(model, tokens, n_new)
        clean_ids = _generate(model, tokens, n_new)
    p_clean, p_steer = torch.softmax(clean, -1), torch.softmax(steered, -1)

    def top(p):
        v = p.topk(k)
        return [(model.decode([int(i)]), float(x)) for x, i in zip(v.values, v.indices, strict=True)]

    mode = "add" if alpha is not None else ("ablate" if value == 0 else "clamp")
    res = SteerResult(
        dictionary=d.name, feature=int(unit), mode=mode, strength=float(alpha if alpha is not None else value),
        prompt=prompt, target=target, clean_text=model.decode(clean_ids), steered_text=model.decode(steered_ids),
        clean_activation=clean_act, top_clean=top(p_clean), top_steered=top(p_steer),
    )
    if t_id is not None:
        res.target_logit_clean, res.target_logit_steered = float(clean[t_id]), float(steered[t_id])
        res.target_prob_clean, res.target_prob_steered = float(p_clean[t_id]), float(p_steer[t_id])
    check_finite("the steering result", res.to_json())
    return res


def ablate(model: HookedModel, d: Any, unit: int, prompt: str, target: str | None = None,
           n_new: int = 20) -> SteerResult:
    """The unit clamped to 0 at every position after the first; the target's logit change."""
    return steer(model, d, unit, prompt, value=0.0, target=target, n_new=n_new)
