"""The method table: name -> implementation, levels, one-line help.

Kept free of heavy imports so ``workbench attribute --help`` can list methods and levels fast.
Each implementation is ``fn(model: HookedModel, enc: Encoding, level: str, **params) -> Tensor``
with the score tensor laid out on the level's axes (see LEVEL_AXES).
"""

from __future__ import annotations

from dataclasses import dataclass

LEVEL_AXES: dict[str, tuple[str, ...]] = {
    "token": ("token",),
    "head": ("layer", "head", "query"),
    "edge": ("layer", "head", "query", "key"),
    "neuron": ("layer", "position", "neuron"),
}


@dataclass(frozen=True)
class MethodSpec:
    name: str
    impl: str  # "module:function"
    levels: tuple[str, ...]
    help: str


METHODS: dict[str, MethodSpec] = {}
ALIASES: dict[str, str] = {"ig": "integrated_gradients"}


def _add(name: str, impl: str, levels: tuple[str, ...], help: str) -> None:
    METHODS[name] = MethodSpec(name, impl, levels, help)


_add("dpa", "attribution.dpa.engine:dpa_scores", ("token", "head", "edge", "neuron"),
     "Dual Path Attribution: one forward + one top-down target propagation")
_add("random", "attribution.baselines.random:random_scores", ("token", "head", "edge", "neuron"),
     "uniform random scores (a floor)")
_add("gradient", "attribution.baselines.gradient:gradient_scores", ("token", "head", "neuron"),
     "gradient of the target logit, summed over the item's dimensions (signed)")
_add("gradient_norm", "attribution.baselines.gradient:gradient_norm_scores", ("token", "head", "neuron"),
     "saliency: the gradient's L2 norm over the item's dimensions (unsigned)")
_add("input_x_gradient", "attribution.baselines.gradient:input_x_gradient_scores",
     ("token", "head", "neuron"), "input (activation) times gradient")
_add("integrated_gradients", "attribution.baselines.integrated_gradients:ig_scores", ("token",),
     "integrated gradients from a zero embedding (steps, internal_batch_size)")
_add("attention_last", "attribution.baselines.attention:attention_last_scores", ("token", "edge"),
     "last-layer attention from the final position, mean over heads")
_add("attention_mean", "attribution.baselines.attention:attention_mean_scores", ("token", "edge"),
     "attention from the final position, mean over layers and heads")
_add("rollout", "attribution.baselines.attention:rollout_scores", ("token",),
     "attention rollout (Abnar and Zuidema 2020)")
_add("atp", "attribution.baselines.atp:atp_scores", ("token", "head", "edge", "neuron"),
     "attribution patching: activation x gradient (zero-ablation)")
_add("atp_foil", "attribution.baselines.atp:atp_foil_scores", ("token", "head", "neuron"),
     "attribution patching toward the foil counterfactual")
_add("ifr", "attribution.baselines.ifr:ifr_scores", ("token", "head", "edge"),
     "information flow routes (Ferrando and Voita 2024)")
_add("activation_patching", "attribution.baselines.patching:patching_scores", ("token", "head", "neuron"),
     "ground truth: ablate each item alone, one forward per item (batched)")


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def levels_help() -> str:
    return "; ".join(f"{m.name}: {'/'.join(m.levels)}" for m in METHODS.values())
