"""THE method table (``TABLE``): every method of the workbench declared once, whatever it scores — its name,
the levels it serves (token, head, qk, neuron on one prompt; edge of the component graph; dictionary feature;
image patch), where each level's implementation lives ("module:function", imported only when the method runs), and its
capabilities (signed, complete, counterfactual, cost class, ...). Declarations only: nothing heavy is imported,
so ``workbench attribute --help`` lists methods and levels fast, and the table sits low (attribution) while
naming implementations above it (circuits.edges) as strings.

The dispatchers read views of it: ``METHODS`` here (attribute's prompt levels), ``circuits.edges
.EDGE_METHODS`` (edge scorers), ``circuits.feature_graph.METHODS`` (dictionary features) and
``attribution.vit.methods.METHODS`` (ViT maps); ``view(family)`` makes each.

A prompt-level implementation is a ``Method``: ``fn(model: HookedModel, enc: Encoding, level: str, **params)``
returning the score tensor laid out on the level's axes (see LEVEL_AXES), or a ``Scored`` that also
carries the metric its own forward computed (so ``attribute`` need not run another forward) and, for
path methods, the completeness gap. A method with ``one_pass`` gives several levels from one pass:
``one_pass(model, enc, levels, **params) -> dict[level, Tensor | Scored]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

LEVEL_AXES: dict[str, tuple[str, ...]] = {
    "token": ("token",),
    "head": ("layer", "head", "query"),
    "qk": ("layer", "head", "query", "key"),  # a query-key pair of one head (its attention edge); once "edge"
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


# -- the levels ----------------------------------------------------------------------------------------------
# A level is what one score is about; its family fixes how a method's implementation for it is called:
#   prompt levels (LEVEL_AXES): fn(model, enc: Encoding, level, **params) -> scores on LEVEL_AXES[level]
#                               (or a Scored); attribution.attribute dispatches them
#   "edge": an edge of the component graph (circuits.graph.CircuitGraph): fn(model, graph, prompts, refs,
#           on_step=None, **params) -> scores [edge]; circuits.edges.EDGE_METHODS dispatches them
#   "feature": a dictionary feature (SAE or transcoder) at a position: fn(model, enc: Encoding, dictionaries,
#              keep_first, ...) -> one LayerFeatures per dictionary; circuits.feature_graph and the feature-level
#              faithfulness curve choose among them
#   "patch": an image patch of a ViT: fn(model, images, targets, **params) -> scores [image, patch] with the
#            module's DEFAULTS naming its parameters; attribution.vit.methods.explain dispatches them
EDGE = "edge"
FEATURE = "feature"
PATCH = "patch"
LEVEL_INPUTS: dict[str, str] = {
    "token": "model, Encoding", "head": "model, Encoding", "qk": "model, Encoding", "neuron": "model, Encoding",
    EDGE: "model, CircuitGraph, prompts, references", FEATURE: "model, Encoding, dictionaries",
    PATCH: "model, images, target classes",
}
LEVELS: tuple[str, ...] = tuple(LEVEL_INPUTS)
# "edge" was the name of the query-key level before "edge" came to mean one thing, the component graph's edge:
# wherever a prompt level is read (attribute, the CLI's --level, job specs, stored runs) it still means "qk"
LEVEL_ALIASES: dict[str, str] = {"edge": "qk"}


def prompt_level(level: str) -> str:
    """A prompt level as attribute reads it: the old spelling "edge" is the query-key level "qk"."""
    return LEVEL_ALIASES.get(level, level)


@dataclass(frozen=True)
class EdgeLevel:
    """What a method's edge level declares beyond its implementation (circuits.edges.EdgeMethod is its view).

    summary: its line in the CLI's help and the Circuits page. params: name -> default. cost: forward-equivalent
    passes per prompt (a backward counts as two), plus ``cost_per[param]`` passes per unit of that parameter;
    ``per_layer``: cost_per counts once per layer moved. exact: the ground truth (one ablated forward per edge).
    label: its name in the app. choices: text parameter -> allowed values. most: whole-number parameter -> its
    largest value."""

    summary: str
    params: dict[str, Any] = field(default_factory=dict)
    cost: float = 1.0
    cost_per: dict[str, float] = field(default_factory=dict)
    per_layer: bool = False
    exact: bool = False
    label: str = ""
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    most: dict[str, int] = field(default_factory=dict)


COST_CLASSES = ("forward", "backward", "steps", "per item", "trained")


@dataclass(frozen=True)
class MethodSpec:
    """One method, declared once (Captum-style): its levels, where each lives, what it can do.

    impls: level -> "module:function" (imported when the method runs; LEVEL_INPUTS[level] is the call).
    signed: its scores carry a sign (for or against the target); else they are magnitudes (>= 0).
    counterfactual: the levels at which it reads a reference run (counterfactual or mean activations) and scores
    against it (every edge scorer is handed one; IFR and random ignore it).
    cost: its cost class (COST_CLASSES): one forward-like pass, a forward and a backward, a path of ``steps``
    passes, one pass per scored item, or a training loop.
    one_pass: "module:function" giving several prompt levels from one pass (else each level is its own call).
    complete: its scores sum to the metric (DPA with its offsets; path methods up to their gap).
    convergence_delta: its results carry a completeness gap (Scored.convergence_delta).
    position: it explains the prediction at Encoding.position itself, on the whole prompt; the others get
    the prompt cut after that position (exact under causal attention: later tokens cannot reach it) and
    their scores are padded with zeros for the later positions.
    edge: the edge level's parameters, cost and label (with an "edge" implementation).
    """

    name: str
    help: str
    impls: dict[str, str]
    signed: bool = True
    counterfactual: tuple[str, ...] = ()
    cost: str = "forward"
    one_pass: str | None = None
    complete: bool = False
    convergence_delta: bool = False
    position: bool = False
    edge: EdgeLevel | None = None

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(lv for lv in LEVELS if lv in self.impls)

    @property
    def impl(self) -> str:
        """The prompt levels' implementation (one function serves them all)."""
        return next(v for k, v in self.impls.items() if k in LEVEL_AXES)

    def only(self, levels: tuple[str, ...]) -> MethodSpec:
        """This method restricted to ``levels`` (a dispatcher's view)."""
        return replace(self, impls={k: v for k, v in self.impls.items() if k in levels})


def _at(impl: str, *levels: str) -> dict[str, str]:
    return dict.fromkeys(levels, impl)


_PROMPT = tuple(LEVEL_AXES)
_DPA_W = {"w_q": 0.25, "w_k": 0.25, "w_v": 0.5, "w_gate": 0.5, "w_up": 0.5, "act_mode": "ratio"}
# the text parameters' values, as the scorers' modules spell them (tests/test_edges_mib.py holds them equal)
_DPA_CHOICES = {"act_mode": ("ratio", "derivative"), "norm": ("frozen", "aware")}

# THE method table: every method of the workbench, whatever it scores.
TABLE: dict[str, MethodSpec] = {m.name: m for m in (
    MethodSpec("dpa", "Dual Path Attribution: one forward + one top-down target propagation",
               {**_at("attribution.dpa.engine:dpa_scores", *_PROMPT), EDGE: "circuits.edges.dpa:score",
                FEATURE: "attribution.features.scores:dpa_feature_scores", PATCH: "attribution.vit.methods.dpa:run"},
               one_pass="attribution.dpa.engine:dpa_levels", complete=True, position=True, counterfactual=(EDGE,),
               edge=EdgeLevel("Dual Path Attribution: (clean - reference) output of the sender . DPA target at the "
                              "receiver input", dict(_DPA_W), cost=3.0, label="DPA", choices=_DPA_CHOICES)),
    MethodSpec("dpa_path", "DPA's targets averaged over `steps` points of the baseline -> input embedding path "
               "(integrated gradients' path; steps, baseline: zero|mean|bos|ID); steps=1 with the zero baseline is dpa",
               {"token": "attribution.dpa.path:dpa_path_scores", EDGE: "circuits.edges.dpa_path:score"},
               cost="steps", position=True, counterfactual=(EDGE,),
               edge=EdgeLevel("DPA integrated along the counterfactual -> clean path: targets averaged over `steps` "
                              "runs whose embedding is interpolated (alpha = 1/steps .. 1, as EAP-IG); steps=1 is dpa",
                              {"steps": 4, **_DPA_W}, cost=1.0, cost_per={"steps": 2.0}, label="DPA (path-integrated)",
                              choices=_DPA_CHOICES, most={"steps": 256})),
    MethodSpec("dpa_norm", "DPA with each norm's scale carried, not frozen (norm-aware)",
               {EDGE: "circuits.edges.dpa:score"}, counterfactual=(EDGE,),
               edge=EdgeLevel("DPA with each norm's scale carried, not frozen (norm-aware)",
                              {**_DPA_W, "norm": "aware"}, cost=3.0, label="DPA (norm-aware)", choices=_DPA_CHOICES)),
    MethodSpec("dpa_cf", "DPA with targets averaged over the clean and counterfactual runs",
               {EDGE: "circuits.edges.dpa:score_cf"}, counterfactual=(EDGE,),
               edge=EdgeLevel("DPA with targets averaged over the clean and counterfactual runs", dict(_DPA_W),
                              cost=4.0, label="DPA (counterfactual-aware)", choices=_DPA_CHOICES)),
    MethodSpec("random", "uniform random scores (a floor)",
               {**_at("attribution.baselines.random:random_scores", *_PROMPT),
                PATCH: "attribution.vit.methods.random_map:run"}, signed=False),
    MethodSpec("gradient", "gradient of the target logit, summed over the item's dimensions (signed)",
               {**_at("attribution.baselines.gradient:gradient_scores", "token", "head", "neuron"),
                FEATURE: "attribution.features.scores:gradient_feature_scores"},
               cost="backward", position=True),
    MethodSpec("gradient_norm", "saliency: the gradient's L2 norm over the item's dimensions (unsigned)",
               _at("attribution.baselines.gradient:gradient_norm_scores", "token", "head", "neuron"),
               signed=False, cost="backward", position=True),
    MethodSpec("input_x_gradient", "input (activation) times gradient",
               _at("attribution.baselines.gradient:input_x_gradient_scores", "token", "head", "neuron"),
               cost="backward", position=True),
    MethodSpec("integrated_gradients", "integrated gradients along embeddings (steps, baseline: zero|mean|bos|ID, "
               "keep_first, schedule); converges on smollm2 with baseline=mean keep_first=true",
               {"token": "attribution.baselines.integrated_gradients:ig_scores",
                PATCH: "attribution.vit.methods.ig:run"}, cost="steps", complete=True, convergence_delta=True),
    MethodSpec("attention_last", "last-layer attention from the final position, mean over heads",
               _at("attribution.baselines.attention:attention_last_scores", "token", "qk"), signed=False),
    MethodSpec("attention_mean", "attention from the final position, mean over layers and heads",
               _at("attribution.baselines.attention:attention_mean_scores", "token", "qk"), signed=False),
    MethodSpec("rollout", "attention rollout (Abnar and Zuidema 2020)",
               {"token": "attribution.baselines.attention:rollout_scores",
                PATCH: "attribution.vit.methods.rollout:run"}, signed=False),
    MethodSpec("atp", "attribution patching: activation x gradient (zero-ablation)",
               _at("attribution.baselines.atp:atp_scores", *_PROMPT), cost="backward", position=True),
    MethodSpec("atp_foil", "attribution patching toward the foil counterfactual",
               _at("attribution.baselines.atp:atp_foil_scores", "token", "head", "neuron"), cost="backward",
               position=True),
    MethodSpec("ifr", "information flow routes (Ferrando and Voita 2024)",
               {**_at("attribution.baselines.ifr:ifr_scores", "token", "head", "qk"),
                EDGE: "circuits.edges.ifr:score"}, signed=False, one_pass="attribution.baselines.ifr:ifr_levels",
               edge=EdgeLevel("information flow routes (Ferrando & Voita 2024): each sender's L1-proximity share of "
                              "the receiver's input on the clean run; unsigned (>= 0, no target or reference used)",
                              cost=1.0, label="IFR")),
    MethodSpec("dla", "direct logit attribution: each head's write read out through the frozen final norm at the "
               "explained position (TransformerLens' stack_head_results + apply_ln_to_stack); `workbench dla` for "
               "components and the accumulated residual", {"head": "attribution.dla:dla_scores"}, position=True),
    MethodSpec("activation_patching", "ground truth: ablate each item alone, one forward per item (batched)",
               {**_at("attribution.baselines.patching:patching_scores", "token", "head", "neuron"),
                EDGE: "circuits.edges.patching:score"}, cost="per item", counterfactual=(EDGE,),
               # exact: discover.estimate counts one forward per patched edge (per ``copies`` edges), not ``cost``
               edge=EdgeLevel("path patching: ablate one edge at a time and measure the metric (exact, one forward "
                              "per edge)", {"sample": 0, "seed": 0, "copies": 8}, exact=True,
                              label="activation patching")),
    MethodSpec("eap", "edge attribution patching: (clean - reference) output of the sender . gradient at the "
               "receiver input", {EDGE: "circuits.edges.eap:score"}, counterfactual=(EDGE,), cost="backward",
               edge=EdgeLevel("edge attribution patching: (clean - reference) output of the sender . gradient at "
                              "the receiver input", cost=4.0, label="EAP")),
    MethodSpec("eap_ig", "EAP with integrated gradients along the reference -> clean input path (Hanna et al. 2024)",
               {EDGE: "circuits.edges.eap_ig:score"}, counterfactual=(EDGE,), cost="steps",
               edge=EdgeLevel("EAP with integrated gradients along the reference -> clean input path (Hanna et al. "
                              "2024)", {"steps": 5}, cost=1.0, cost_per={"steps": 3.0}, label="EAP-IG")),
    MethodSpec("eap_ig_act", "EAP-IG-activations (MIB)", {EDGE: "circuits.edges.eap_ig_act:score"},
               counterfactual=(EDGE,), cost="steps",
               edge=EdgeLevel("EAP-IG-activations (MIB): integrated gradients moving one layer's output at a time "
                              "from its reference to its clean value; pool=own keeps only the sender's own layer's "
                              "passes", {"steps": 5, "pool": "all"}, cost=1.0, cost_per={"steps": 3.0},
                              per_layer=True, label="EAP-IG (activations)", choices={"pool": ("all", "own")})),
    MethodSpec("edge_pruning", "edge pruning: a hard-concrete mask over every edge learned on the prompts "
               "(Bhaskar et al. 2024)", {EDGE: "circuits.edges.edge_pruning:score"}, signed=False,
               counterfactual=(EDGE,), cost="trained",
               edge=EdgeLevel("edge pruning: a hard-concrete mask over every edge learned on the prompts (Bhaskar "
                              "et al. 2024)", {"steps": 20, "lr": 0.2, "l0": 0.01, "seed": 0, "loss": "kl"}, cost=8.0,
                              cost_per={"steps": 11.0}, label="Edge Pruning", choices={"loss": ("kl", "metric")})),
    MethodSpec("dap", "decision-aware attention propagation: attention rollout with a gradient decision prior",
               {PATCH: "attribution.vit.methods.dap:run"}, signed=False, cost="backward"),
    MethodSpec("attention", "one layer's attention pattern (the last by default), mean over heads, row CLS",
               {PATCH: "attribution.vit.methods.attention:run"}, signed=False),
    MethodSpec("gae", "generic attention explainability (Chefer et al. 2021)",
               {PATCH: "attribution.vit.methods.gae:run"}, signed=False, cost="backward"),
    MethodSpec("gradcam", "Grad-CAM on the last layer's attention", {PATCH: "attribution.vit.methods.gradcam:run"},
               signed=False, cost="backward"),
    MethodSpec("tam", "transition attention maps (Yuan et al. 2021)", {PATCH: "attribution.vit.methods.tam:run"},
               signed=False, cost="steps"),
)}
ALIASES: dict[str, str] = {"ig": "integrated_gradients"}
# Each dispatcher lists its methods in the order its users have always seen (help, pages, benchmark rows);
# a method of the table not named here follows in the table's order.
LISTED: dict[str, tuple[str, ...]] = {
    "prompt": ("dpa", "dpa_path", "random", "gradient", "gradient_norm", "input_x_gradient", "integrated_gradients",
               "attention_last", "attention_mean", "rollout", "atp", "atp_foil", "ifr", "dla", "activation_patching"),
    EDGE: ("eap", "eap_ig", "eap_ig_act", "ifr", "dpa", "dpa_norm", "dpa_cf", "dpa_path", "edge_pruning",
           "activation_patching"),
    FEATURE: ("dpa", "gradient"),
    PATCH: ("dap", "attention", "rollout", "gae", "gradcam", "tam", "ig", "random", "dpa"),  # ig: the ViT CLI's name
}


def view(family: str) -> dict[str, MethodSpec]:
    """The table as one dispatcher sees it: name (as that dispatcher spells it) -> the method restricted to the
    family's levels ("prompt": LEVEL_AXES; "edge"; "feature"; "patch"), in LISTED order."""
    levels = _PROMPT if family == "prompt" else (family,)
    names = [*LISTED[family], *(n for n in TABLE if n not in {canonical(x) for x in LISTED[family]})]
    return {n: TABLE[canonical(n)].only(levels) for n in names if any(lv in TABLE[canonical(n)].impls for lv in levels)}


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


METHODS: dict[str, MethodSpec] = view("prompt")  # attribute's methods (prompt levels only)


def levels_help() -> str:
    return "; ".join(f"{m.name}: {'/'.join(m.levels)}" for m in METHODS.values())


# parameters an implementation takes that are not the user's to give
_INTERNAL = frozenset({"model", "enc", "level", "levels", "on_step", "items"})


def prompt_params(name: str) -> tuple[str, ...]:
    """The parameters a prompt-level method takes, read from its implementation's source (not imported: the
    CLI refuses a bad ``--param`` before torch loads). A function with ``**params`` takes DPA's path weights."""
    impl = METHODS[canonical(name)].impl
    module, func = impl.split(":")
    names = _signature(_source(module), func)
    if names is None:
        return ()
    own, var_kw = names
    return tuple(own) + (_dataclass_fields(_source("attribution.dpa.params"), "DPAParams") if var_kw else ())


def check_prompt_params(name: str, params: dict[str, Any]) -> None:
    """MethodError naming what a method does not take (one line), before any model or engine is loaded."""
    known = prompt_params(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        takes = f"parameters: {', '.join(known)}" if known else "it takes no parameters"
        from core.errors import MethodError

        raise MethodError(f"{canonical(name)} has no parameter {', '.join(unknown)}; {takes}")


def _source(module: str) -> Any:
    import ast
    from pathlib import Path

    base = Path(__file__).resolve().parents[1].joinpath(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return ast.parse(path.read_text())


def _signature(tree: Any, func: str) -> tuple[list[str], bool] | None:
    import ast

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == func:
            a = node.args
            own = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in _INTERNAL]
            return own, a.kwarg is not None
    return None


def _dataclass_fields(tree: Any, cls: str) -> tuple[str, ...]:
    import ast

    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return tuple(s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
