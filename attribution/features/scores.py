"""Feature-level DPA: the target (minus foil) attributed to dictionary features, per position.

One forward and one DPA top-down pass give the target vector t at every residual point (DPA spec); a
dictionary at a point splits its hook_out activation x_p into active features, decoder bias, skip term
(transcoders) and error, so the layer's share of the target, sum_p t_p . x_p, splits exactly into

    feature (p, f):  act_pf x (d_f . t_p)          (d_f: the decoder direction in hook_out space)
    error p:         (x_p - reconstruction_p) . t_p
    bias p, skip p:  b_dec . t_p, skip_p . t_p

For a residual SAE that share is DPA's whole account of the target at that depth (with the complete
path weights, COMPLETE, it equals the target logit minus the offsets above it); for a transcoder it is
the MLP's share, the sum of DPA's neuron scores of that layer plus its output bias.

``gradient_feature_scores`` scores the same features by gradient x activation (act_pf x d_f . grad_p),
the baseline of the feature-level faithfulness curve.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float, Int

from attribution.baselines.common import grads
from attribution.dpa.params import DPAParams
from attribution.dpa.pullback import dpa_cache, logit_target, targets_at
from attribution.dpa.steps import Cache
from attribution.features.placement import Placement, Sources, check_dictionaries, placement, sources
from core.models.hooked import require
from core.options import check_finite

if TYPE_CHECKING:
    from attribution.sae.dictionary import Dictionary
    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


@dataclass
class LayerFeatures:
    """One dictionary's share of the target on one prompt. Features: the active (position, feature) pairs."""

    name: str
    kind: str
    tag: str
    hook_out: str
    positions: Int[torch.Tensor, " active"]
    features: Int[torch.Tensor, " active"]
    acts: Float[torch.Tensor, " active"]
    scores: Float[torch.Tensor, " active"]
    error: Float[torch.Tensor, " pos"]
    bias: Float[torch.Tensor, " pos"]
    skip: Float[torch.Tensor, " pos"]
    share: Float[torch.Tensor, " pos"]  # t_p . x_p, the layer's share of the target at each position

    def completeness_error(self) -> float:
        """sum(features) + error + bias + skip - the layer's share (float noise: the split is exact)."""
        total = self.scores.double().sum() + self.error.double().sum() + self.bias.double().sum() \
            + self.skip.double().sum()
        return float(total - self.share.double().sum())

    def top(self, k: int = 10, tokens: list[str] | None = None) -> list[dict[str, Any]]:
        """The k features of largest |score|: feature, position, token, activation, score."""
        order = torch.argsort(self.scores.abs(), descending=True)[:k].tolist()
        return [{"feature": int(self.features[i]), "position": int(self.positions[i]),
                 "token": tokens[int(self.positions[i])] if tokens else None, "activation": float(self.acts[i]),
                 "score": float(self.scores[i])} for i in order]

    def to_json(self, k: int = 20, tokens: list[str] | None = None) -> dict[str, Any]:
        return {"dictionary": self.name, "kind": self.kind, "tag": self.tag, "hook_out": self.hook_out,
                "share": float(self.share.sum()), "features_total": float(self.scores.sum()),
                "error": float(self.error.sum()), "bias": float(self.bias.sum()), "skip": float(self.skip.sum()),
                "error_by_position": [float(v) for v in self.error], "n_active": int(len(self.scores)),
                "top": self.top(k, tokens)}


@dataclass
class FeatureAttribution:
    """Feature-level DPA of one prompt over several dictionaries (``layers`` in depth order)."""

    model: str
    tokens: list[str]
    target: str | None
    foil: str | None
    target_logit: float
    layers: list[LayerFeatures]
    seconds: float
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self, k: int = 20) -> dict[str, Any]:
        return {"model": self.model, "tokens": self.tokens, "target": self.target, "foil": self.foil,
                "target_logit": self.target_logit, "seconds": self.seconds, "params": self.params,
                "layers": [lf.to_json(k, self.tokens) for lf in self.layers]}

    def table(self, k: int = 20):
        import pandas as pd

        rows = [dict(row, dictionary=lf.name) for lf in self.layers for row in lf.top(k, self.tokens)]
        return pd.DataFrame(rows)


def score_sources(src: Sources, t: Float[torch.Tensor, "pos d_model"], lf_meta: dict[str, Any]) -> LayerFeatures:
    """LayerFeatures of one dictionary against one target t [pos, d_model] at its hook_out."""
    tb = t[None]
    return LayerFeatures(
        positions=src.positions, features=src.features, acts=src.acts, scores=src.feature_scores(tb)[0],
        error=Sources.per_position(src.error, tb)[0], bias=Sources.per_position(src.bias, tb)[0],
        skip=Sources.per_position(src.skip, tb)[0], share=Sources.per_position(src.x_out, tb)[0], **lf_meta)


def _meta(d: Dictionary, place: Placement) -> dict[str, Any]:
    return {"name": d.name, "kind": d.kind, "tag": place.tag, "hook_out": d.hook_out}


def hooks_of(dicts: list[Dictionary]) -> list[str]:
    return [h for d in dicts for h in dict.fromkeys((d.hook, d.hook_out))]


def dpa_feature_scores(model: HookedModel, enc: Encoding, dicts: list[Dictionary], keep_first: bool = False,
                       p: DPAParams | None = None,
                       cache: Cache | None = None) -> tuple[list[LayerFeatures], float]:
    """Feature-level DPA for dictionaries that fit the model; returns (per dictionary, target logit)."""
    p = p or DPAParams()
    places = [placement(d) for d in dicts]
    cache = cache if cache is not None else dpa_cache(model, enc.tokens, p, hooks_of(dicts))
    t, logit = logit_target(model, enc, cache)
    top = (model.arch.n_layers - 1, "post")
    at = targets_at(model, cache, t, top, [pl.write for pl in places], p)
    out = [score_sources(sources(d, cache, keep_first), at[pl.write][0], _meta(d, pl))
           for d, pl in zip(dicts, places, strict=True)]
    return out, logit


def gradient_feature_scores(model: HookedModel, enc: Encoding, dicts: list[Dictionary],
                            keep_first: bool = False) -> list[LayerFeatures]:
    """The same split scored with the true gradient of the target (minus foil) logit at each hook_out
    (gradient x activation); ``share`` is then grad . x, which sums to nothing in particular."""
    names = list(dict.fromkeys(hooks_of(dicts)))
    acts, g, _ = grads(model, enc, names)
    out = []
    for d in dicts:
        src = sources(d, {n: a.float() for n, a in acts.items()}, keep_first)
        out.append(score_sources(src, g[d.hook_out][0].float(), _meta(d, placement(d))))
    return out


def feature_attribution(model: HookedModel, prompt: str, dictionaries: list[Dictionary],
                        target: str | None = None, foil: str | None = None, keep_first: bool = False,
                        **params: Any) -> FeatureAttribution:
    """Feature-level DPA of ``prompt`` over ``dictionaries`` (sorted by depth); DPA parameters as dpa's."""
    require(model, "feature attribution")
    p = DPAParams.from_kwargs(**params)
    enc = model.encode(prompt, target, foil)
    places = check_dictionaries(model, list(dictionaries))
    dicts = [d for _, d in sorted(zip(places, dictionaries, strict=True), key=lambda pd: pd[0].order)]
    started = time.perf_counter()
    layers, logit = dpa_feature_scores(model, enc, dicts, keep_first, p)
    seconds = time.perf_counter() - started
    for lf in layers:
        check_finite(f"{lf.name} feature scores", lf.scores)
    check_finite("the target logit", logit)
    return FeatureAttribution(model=model.name, tokens=list(enc.str_tokens), target=target, foil=foil,
                              target_logit=logit, layers=layers, seconds=seconds, params=p.to_dict())
