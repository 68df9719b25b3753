"""Ablation of heads, attention layers, MLPs, experts and neurons (zero, mean, resample).

Components are strings: ``head:L.H``, ``attn:L``, ``mlp:L``, ``expert:L.E`` (MoE models),
``neuron:L.N`` (dense/GLU MLP neuron) or ``neuron:L.E.N`` (neuron N of expert E). ``mean``
replaces the activation by its mean over a reference batch (per position when the reference has
the same length), ``resample`` by the activation of a random reference prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from circuits.tools.common import as_tokens, logit_diff, prompts
from core.errors import MethodError, RangeError

if TYPE_CHECKING:
    from core.models.hooked import HookedModel

METHODS = ("zero", "mean", "resample")


@dataclass(frozen=True)
class Component:
    kind: str  # head | attn | mlp | expert | neuron
    layer: int
    index: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind}:" + ".".join(str(x) for x in (self.layer, *self.index))


def parse(spec: str | Component) -> Component:
    if isinstance(spec, Component):
        return spec
    try:
        kind, rest = spec.split(":")
        nums = tuple(int(x) for x in rest.split("."))
    except ValueError:
        raise RangeError(
            f"bad component {spec!r}: use head:L.H, attn:L, mlp:L, expert:L.E, neuron:L.N"
        ) from None
    arity = {"head": 2, "attn": 1, "mlp": 1, "expert": 2, "neuron": (2, 3)}
    want = arity.get(kind)
    if want is None:
        raise RangeError(f"unknown component kind {kind!r}: head, attn, mlp, expert or neuron")
    if len(nums) not in (want if isinstance(want, tuple) else (want,)):
        raise RangeError(f"component {spec!r} needs {want} indices")
    return Component(kind, nums[0], nums[1:])


def _site(model: HookedModel, c: Component) -> tuple[str, Callable[[Any], Any]]:
    """(hook name, selector of the component's slice from that hook's tensor)."""
    model.check_layer(c.layer)
    if c.kind == "head":
        model.check_head(c.index[0])
        return f"blocks.{c.layer}.attn.hook_z", lambda x: (..., c.index[0], slice(None))
    if c.kind == "attn":
        return f"blocks.{c.layer}.hook_attn_out", lambda x: (...,)
    if not model.has_mlp(c.layer):
        raise RangeError(f"{model.name} has no MLP in layer {c.layer}")
    experts = model.n_experts(c.layer)
    if c.kind == "mlp":
        return f"blocks.{c.layer}.hook_mlp_out", lambda x: (...,)
    if c.kind == "expert":
        if experts is None:
            raise RangeError(f"{model.name} has no experts (not an MoE model)")
        e = c.index[0]
        if not 0 <= e < experts:
            raise RangeError(f"expert {e} out of range: layer {c.layer} has {experts}")
        return f"blocks.{c.layer}.mlp.hook_expert_out", lambda x: (..., e, slice(None))
    if len(c.index) == 2:  # neuron of an expert
        if experts is None:
            raise RangeError(f"{model.name} has no experts: use neuron:L.N")
        e, n = c.index
        if not 0 <= e < experts:
            raise RangeError(f"expert {e} out of range")
        name = f"blocks.{c.layer}.mlp.experts.{e}.hook_post"
    else:
        if experts is not None:
            raise RangeError("an MoE neuron needs its expert: neuron:L.E.N")
        n = c.index[0]
        name = f"blocks.{c.layer}.mlp.hook_post"
    model.check_neuron(n)
    return name, lambda x: (..., n)


def ablation_hooks(
    model: HookedModel, components: list[str | Component], method: str = "zero", reference: Any = None, seed: int = 0
) -> list[tuple[str, Callable]]:
    """Forward hooks that ablate every component. ``reference`` (tokens) is needed for mean and
    resample."""
    import torch

    if method not in METHODS:
        raise MethodError(f"unknown ablation method {method!r}: {', '.join(METHODS)}")
    comps = [parse(c) for c in components]
    sites = [(_site(model, c)) for c in comps]
    cache = None
    if method != "zero":
        if reference is None:
            raise MethodError(f"{method} ablation needs a reference batch of prompts")
        with torch.no_grad():
            _, cache = model.run_with_cache(reference, names_filter=sorted({n for n, _ in sites}))
    gen = torch.Generator().manual_seed(seed)
    hooks = []
    for name, sel in sites:

        def hook(x, hook, sel=sel, name=name):
            idx = sel(x)
            if method == "zero":
                x[idx] = 0.0
                return x
            ref = cache[name]
            if method == "mean":
                same = ref.shape[1:] == x.shape[1:]
                m = (
                    ref.mean(0)
                    if same
                    else ref.flatten(0, 1).mean(0)[None].expand(x.shape[1], *ref.shape[2:])
                )
                x[idx] = m.to(x.dtype)[None].expand_as(x)[idx]
                return x
            rows = torch.randint(0, ref.shape[0], (x.shape[0],), generator=gen)
            if ref.shape[1] != x.shape[1]:
                raise MethodError("resample ablation needs reference prompts of the same length")
            x[idx] = ref[rows.to(ref.device)][idx]
            return x

        hooks.append((name, hook))
    return hooks


@dataclass
class AblationResult:
    components: list[str]
    method: str
    base: dict[str, float]
    scores: list[dict[str, float]]  # one metrics dict per component (or group)

    def to_json(self) -> dict[str, Any]:
        return {
            "components": self.components,
            "method": self.method,
            "base": self.base,
            "scores": self.scores,
        }

    def table(self):
        import pandas as pd

        return pd.DataFrame(
            [{"component": c, **s} for c, s in zip(self.components, self.scores, strict=False)]
        )

    def plot(self, metric: str | None = None):
        import plotly.graph_objects as go

        metric = metric or next(iter(self.base))
        fig = go.Figure(go.Bar(x=self.components, y=[s[metric] for s in self.scores]))
        fig.add_hline(y=self.base[metric], line_dash="dash", annotation_text="no ablation")
        fig.update_layout(title=f"{self.method} ablation: {metric}", yaxis_title=metric)
        return fig


def ablate_prompts(
    model: HookedModel,
    prompt: Any,
    target: Any,
    foil: Any = None,
    components: list[str | Component] | None = None,
    method: str = "zero",
    reference: Any = None,
    pos: int = -1,
) -> AblationResult:
    """Logit difference (target - foil) on prompts with each component ablated: for LLMs."""
    import torch

    p = prompts(model, prompt, target, foil, pos)
    ref = None if reference is None else as_tokens(model, reference)
    with torch.no_grad():
        base = {"logit_diff": float(logit_diff(model.logits(p.tokens), p).mean())}
        comps = components or [
            f"head:{layer}.{h}" for layer in range(model.arch.n_layers) for h in range(model.arch.n_heads)
        ]
        scores = []
        for c in comps:
            logits = model.run_with_hooks(p.tokens, fwd_hooks=ablation_hooks(model, [c], method, ref))
            scores.append({"logit_diff": float(logit_diff(logits, p).mean())})
    return AblationResult([str(parse(c)) for c in comps], method, base, scores)
