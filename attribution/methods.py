"""The method table: name -> implementation, levels, capabilities, one-line help.

Kept free of heavy imports so ``workbench attribute --help`` can list methods and levels fast.
Each implementation is a ``Method``: ``fn(model: HookedModel, enc: Encoding, level: str, **params)``
returning the score tensor laid out on the level's axes (see LEVEL_AXES), or a ``Scored`` that also
carries the metric its own forward computed (so ``attribute`` need not run another forward) and, for
path methods, the completeness gap. A method with ``one_pass`` gives several levels from one pass:
``one_pass(model, enc, levels, **params) -> dict[level, Tensor | Scored]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

LEVEL_AXES: dict[str, tuple[str, ...]] = {
    "token": ("token",),
    "head": ("layer", "head", "query"),
    "edge": ("layer", "head", "query", "key"),
    "neuron": ("layer", "position", "neuron"),
}


@dataclass
class Scored:
    """A method's scores with what its own forward measured.

    target_logit: the explained metric at the input, logit(target) (- logit(foil)).
    baseline_logit: the metric at the path's start (path methods such as integrated gradients).
    convergence_delta: completeness gap, sum(scores) - (target_logit - baseline_logit) (Captum's
    convergence delta); 0 for an exact path integral.
    """

    scores: Float[torch.Tensor, "*axes"]  # laid out on LEVEL_AXES[level]
    target_logit: float | None = None
    baseline_logit: float | None = None
    convergence_delta: float | None = None


class Method(Protocol):
    def __call__(self, model: HookedModel, enc: Encoding, level: str, /,
                 **params: Any) -> torch.Tensor | Scored: ...


def as_scored(out: Any) -> Scored:
    """A method's output (a bare score tensor or a Scored) as a Scored."""
    return out if isinstance(out, Scored) else Scored(out)


@dataclass(frozen=True)
class MethodSpec:
    """One method: where it lives, its levels and what it can do.

    one_pass: "module:function" giving several levels from one pass (else each level is its own call).
    complete: its scores sum to the metric (DPA with its offsets; path methods up to their gap).
    convergence_delta: its results carry a completeness gap (Scored.convergence_delta).
    position: it explains the prediction at Encoding.position itself, on the whole prompt; the others get
    the prompt cut after that position (exact under causal attention: later tokens cannot reach it) and
    their scores are padded with zeros for the later positions.
    """

    name: str
    impl: str  # "module:function"
    levels: tuple[str, ...]
    help: str
    one_pass: str | None = None
    complete: bool = False
    convergence_delta: bool = False
    position: bool = False


METHODS: dict[str, MethodSpec] = {}
ALIASES: dict[str, str] = {"ig": "integrated_gradients"}


def _add(name: str, impl: str, levels: tuple[str, ...], help: str, **caps: Any) -> None:
    METHODS[name] = MethodSpec(name, impl, levels, help, **caps)


_add("dpa", "attribution.dpa.engine:dpa_scores", ("token", "head", "edge", "neuron"),
     "Dual Path Attribution: one forward + one top-down target propagation",
     one_pass="attribution.dpa.engine:dpa_levels", complete=True, position=True)
_add("dpa_path", "attribution.dpa.path:dpa_path_scores", ("token",),
     "DPA's targets averaged over `steps` points of the baseline -> input embedding path (integrated gradients' "
     "path; steps, baseline: zero|mean|bos|ID); steps=1 with the zero baseline is dpa", position=True)
_add("random", "attribution.baselines.random:random_scores", ("token", "head", "edge", "neuron"),
     "uniform random scores (a floor)")
_add("gradient", "attribution.baselines.gradient:gradient_scores", ("token", "head", "neuron"),
     "gradient of the target logit, summed over the item's dimensions (signed)", position=True)
_add("gradient_norm", "attribution.baselines.gradient:gradient_norm_scores", ("token", "head", "neuron"),
     "saliency: the gradient's L2 norm over the item's dimensions (unsigned)", position=True)
_add("input_x_gradient", "attribution.baselines.gradient:input_x_gradient_scores",
     ("token", "head", "neuron"), "input (activation) times gradient", position=True)
_add("integrated_gradients", "attribution.baselines.integrated_gradients:ig_scores", ("token",),
     "integrated gradients along embeddings (steps, baseline: zero|mean|bos|ID, keep_first, schedule); "
     "converges on smollm2 with baseline=mean keep_first=true",
     complete=True, convergence_delta=True)
_add("attention_last", "attribution.baselines.attention:attention_last_scores", ("token", "edge"),
     "last-layer attention from the final position, mean over heads")
_add("attention_mean", "attribution.baselines.attention:attention_mean_scores", ("token", "edge"),
     "attention from the final position, mean over layers and heads")
_add("rollout", "attribution.baselines.attention:rollout_scores", ("token",),
     "attention rollout (Abnar and Zuidema 2020)")
_add("atp", "attribution.baselines.atp:atp_scores", ("token", "head", "edge", "neuron"),
     "attribution patching: activation x gradient (zero-ablation)", position=True)
_add("atp_foil", "attribution.baselines.atp:atp_foil_scores", ("token", "head", "neuron"),
     "attribution patching toward the foil counterfactual", position=True)
_add("ifr", "attribution.baselines.ifr:ifr_scores", ("token", "head", "edge"),
     "information flow routes (Ferrando and Voita 2024)", one_pass="attribution.baselines.ifr:ifr_levels")
_add("dla", "attribution.dla:dla_scores", ("head",),
     "direct logit attribution: each head's write read out through the frozen final norm at the explained "
     "position (TransformerLens' stack_head_results + apply_ln_to_stack); `workbench dla` for components and "
     "the accumulated residual", position=True)
_add("activation_patching", "attribution.baselines.patching:patching_scores", ("token", "head", "neuron"),
     "ground truth: ablate each item alone, one forward per item (batched)")


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def levels_help() -> str:
    return "; ".join(f"{m.name}: {'/'.join(m.levels)}" for m in METHODS.values())
