"""The feature graph: dictionary features at lower layers -> features at higher layers -> the logits, returned
as the one graph type (``circuits.subgraph.Subgraph``, built by ``feature_subgraph``; its metadata holds the
prompt's tokens, token ids, the target's id, probability and logit).

Nodes: ``L12.f345@p7`` (feature 345 of the residual SAE at layer 12, position 7; a transcoder's are
``L12T.f345@p7``), ``L12.err@p7`` (what that dictionary misses there: true activation minus
reconstruction), ``emb@p3`` (the input embedding) and ``logits`` (target minus foil).

Edges come from DPA top-down passes in the replacement model: a residual SAE cuts the stream (everything
below it reaches a higher node through its features and error), a transcoder's MLP is held fixed (its
output is its features, error, bias and skip; the skip term is linear in the MLP's input, so the target
passes through it to the stream below, as the replacement model's gradient does). A target node's pass
starts at its input hook with its encoder direction (the logits: DPA's own target vector) and goes down to
the nearest cut; every source it meets scores act x (decoder direction . target vector) (an error node:
error . target vector; an embedding: embedding . target vector). So one DPA pass per target node, batched
over targets, where circuit-tracer runs one backward pass per node.

Which targets get a pass: dictionaries are expanded from the top down, each keeping the
``per_layer`` features of largest influence on the logits so far (circuit-tracer's influence: each
target's incoming |edges| normalised to sum to one, propagated from the logits). Pruning keeps the
``max_nodes`` nodes of largest influence, the ``max_edges`` strongest edges among them (by edge influence),
then only what lies on a path to the logits.

DPA on a replacement model (every MLP a transcoder) is a different linearisation from the gradient graph's, by
design: DPA splits each attention layer's target between the value path (weight 0.5) and the query/key paths
(0.25 each), where the replacement model freezes the patterns (value path 1, no query/key paths). With
``w_q=0, w_k=0, w_v=1`` DPA's edges equal the gradient graph's exactly (norms are frozen in both); with its
default weights less of the logits' influence reaches the embeddings (replacement 0.26 against 0.40 on the README
IOI prompt over a smollm2-135m set: results/sae/replacement.md), so the feature-graph command's ``--method auto``
takes the gradient graph on a replacement model.

Scores (circuit-tracer's ``compute_graph_scores``, on the graph before pruning): the replacement score is the
share of end-to-end influence on the logits that reaches them from the token embeddings rather than from error
nodes; the completeness score is the share of incoming edge weight into feature and logit nodes that comes from
non-error nodes, weighted by each node's influence (``graph_scores``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from attribution.dpa.linear import norm_back
from attribution.dpa.params import DPAParams
from attribution.dpa.pullback import dpa_cache, embedding, logit_target, pull_back
from attribution.features.placement import (
    Placement,
    Sources,
    check_dictionaries,
    encoder_directions,
    read_target,
    sources,
)
from attribution.features.scores import dpa_feature_scores, hooks_of
from attribution.methods import FEATURE, view
from circuits.influence import graph_scores, node_influence, prune
from circuits.replacement import build_replacement, gradient_graph
from circuits.subgraph import FEATURE_GRAPH_KIND, Subgraph, feature_subgraph
from core.errors import MethodError, RangeError
from core.options import check_finite

if TYPE_CHECKING:
    from jaxtyping import Float

    from attribution.sae.dictionary import Dictionary
    from core.models.hooked import HookedModel

KIND = FEATURE_GRAPH_KIND


@dataclass
class _Layer:
    d: Dictionary
    place: Placement
    src: Sources
    names: list[str]  # feature node ids, then error node ids per position (Sources order)

    @property
    def n_features(self) -> int:
        return len(self.src.features)


def _layers(model: HookedModel, dicts: list[Dictionary], places: list[Placement], cache: dict[str, Any],
            keep_first: bool) -> list[_Layer]:
    out = []
    for d, pl in zip(dicts, places, strict=True):
        src = sources(d, cache, keep_first)
        seq = src.error.shape[0]
        names = [f"{pl.tag}.f{int(f)}@p{int(p)}" for p, f in zip(src.positions, src.features, strict=True)]
        names += [f"{pl.tag}.err@p{p}" for p in range(seq)]
        out.append(_Layer(d, pl, src, names))
    return out


def skip_back(model: HookedModel, cache: dict[str, Any], d: Dictionary, layer: int,
              t: Float[torch.Tensor, "batch pos d_model"], keep_first: bool = False,
              ) -> Float[torch.Tensor, "batch pos d_model"]:
    """What a transcoder's live skip term sends below its layer: the target at its output ([batch, pos, d_model],
    at resid_post) through W_skip and the frozen ln2 scale to resid_mid (read_target's path). The replacement
    model's skip is a linear function of the MLP input, so its share of a target belongs to what lies below it,
    as the gradient graph carries it; zero at the sink position when it is left out (its skip is error there)."""
    w = getattr(d.sae, "W_skip", None)
    if w is None:
        return torch.zeros_like(t)
    g = t @ w.float().to(t.device)  # skip(x) = x @ W_skip^T, so its transpose is t @ W_skip
    if not keep_first:
        g[:, :1] = 0.0
    g, _ = norm_back(g, cache.get(f"blocks.{layer}.ln2.hook_scale"), None, None,
                     model.arch.norm == "layernorm")
    return g


def _edges_from(model: HookedModel, cache: dict[str, Any], layers: list[_Layer], below: int, t: torch.Tensor,
                start: tuple[int, str], p: DPAParams, live_skip: bool = True,
                keep_first: bool = False) -> list[tuple[str, torch.Tensor]]:
    """One batched pass from targets t at ``start``: (source id, scores [batch]) for every source met in the
    layers with index < ``below``, down to the first residual SAE (a cut) or the embeddings. ``live_skip``: a
    transcoder's skip term passes the target on to the stream below it (False: it is held as a constant that no
    node carries, the behaviour before issue 53; kept for the study)."""
    frozen: set[int] = set()
    by_point: dict[tuple[int, str], list[_Layer]] = {}
    for lay in layers[:below]:
        by_point.setdefault(lay.place.write, []).append(lay)
    out: list[tuple[str, torch.Tensor]] = []
    t = t.clone()  # the skip updates below are written into the pass's own target tensor
    added: torch.Tensor | None = None
    for point, tv in pull_back(model, cache, t, start, p, frozen_mlps=frozen, lowest=(-1, "post")):
        if added is not None:
            # top_down hands the same tensor from a frozen MLP's post point to its mid point; the skip's update
            # was added into it in place (pull_back has no hook for a frozen MLP's own update)
            if tv is not added:
                raise RuntimeError("DPA's top-down pass no longer hands its target on in place; the skip update "
                                   "in circuits.feature_graph._edges_from must move into attribution.dpa.steps")
            added = None
        cut = False
        skip = None
        for lay in sorted(by_point.get(point, []), key=lambda x: x.place.order, reverse=True):
            s = lay.src
            scores = torch.cat([s.feature_scores(tv), Sources.per_position(s.error, tv)], dim=1)
            out += list(zip(lay.names, scores.T, strict=True))
            if lay.place.mlp is None:
                cut = True
                break
            frozen.add(lay.place.mlp)
            if live_skip:
                skip = skip_back(model, cache, lay.d, lay.place.mlp, tv, keep_first)
        if cut:
            return out
        if skip is not None:
            tv.add_(skip)
            added = tv
        if point == (-1, "post"):
            emb = Sources.per_position(embedding(cache)[0], tv)
            out += [(f"emb@p{q}", emb[:, q]) for q in range(emb.shape[1])]
    return out


METHODS: tuple[str, ...] = tuple(view(FEATURE))  # the method table's feature level: dpa, gradient


def choose_method(method: str, dictionaries: list[Dictionary], params: dict[str, Any] | None = None) -> str:
    """``auto``: the gradient graph on a replacement model (every dictionary a transcoder, no DPA parameter
    given), DPA otherwise. On a replacement model DPA's default path weights send the logits' influence through
    attention's query/key paths at half the value path's weight, so its graphs end mostly in error nodes
    (results/sae/replacement.md, "Why DPA's replacement score collapses"); the gradient graph is exact there."""
    if method != "auto":
        return method
    transcoders = bool(dictionaries) and all(d.hook_out != d.hook for d in dictionaries)
    return "gradient" if transcoders and not params else "dpa"


def check_thresholds(node_threshold: float | None, edge_threshold: float | None,
                     names: tuple[str, str] = ("node_threshold", "edge_threshold")) -> None:
    """Pruning thresholds are shares of cumulative influence: in (0, 1] (circuit-tracer's 0.8 and 0.98).
    ``names``: what the caller calls them (the CLI: its flags)."""
    import math

    for name, v in zip(names, (node_threshold, edge_threshold), strict=True):
        if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and 0 < v <= 1):
            raise RangeError(f"{name} must be in (0, 1] (got {v}); circuit-tracer's defaults are node 0.8, edge 0.98")


def feature_graph(model: HookedModel, prompt: str, dictionaries: list[Dictionary], target: str | None = None,
                  foil: str | None = None, per_layer: int = 16, max_nodes: int = 40, max_edges: int = 120,
                  keep_first: bool = False, batch_size: int = 32, method: str = "dpa",
                  node_threshold: float | None = None, edge_threshold: float | None = None,
                  live_skip: bool = True, **params: Any) -> Subgraph:
    """Build and prune the feature graph of ``prompt`` (target minus foil) over ``dictionaries``.

    method "dpa": DPA top-down passes (the module's docstring); "gradient": the plain backward pass through the
    replacement model of a transcoder set (circuits/replacement.py: attention patterns and norm scales frozen,
    every edge an exact linear effect). node_threshold / edge_threshold: prune by cumulative node and edge
    influence first (circuit-tracer's prune_graph; its defaults 0.8 and 0.98), then cap at max_nodes / max_edges."""
    for name, v in (("per_layer", per_layer), ("max_nodes", max_nodes), ("max_edges", max_edges),
                    ("batch_size", batch_size)):
        if int(v) < 1:
            raise RangeError(f"{name} must be at least 1 (got {v})")
    check_thresholds(node_threshold, edge_threshold)
    if method not in METHODS:
        raise RangeError(f"unknown feature-graph method {method!r}: {', '.join(METHODS)}")
    if method == "gradient":
        if params:
            raise RangeError(f"DPA parameters ({', '.join(params)}) do not apply to the gradient graph")
        return _gradient_feature_graph(model, prompt, list(dictionaries), target, foil, per_layer, max_nodes,
                                       max_edges, keep_first, node_threshold, edge_threshold)
    p = DPAParams.from_kwargs(**params)
    skip = live_skip and not model.arch.parallel  # a parallel block's MLP reads resid_pre: no mid point to add it at
    enc = model.encode(prompt, target, foil)
    places = check_dictionaries(model, list(dictionaries))
    pairs = sorted(zip(places, dictionaries, strict=True), key=lambda pd: pd[0].order)
    places, dicts = [pl for pl, _ in pairs], [d for _, d in pairs]
    started = time.perf_counter()
    cache = dpa_cache(model, enc.tokens, p, hooks_of(dicts))
    layers = _layers(model, dicts, places, cache, keep_first)
    full, logit = dpa_feature_scores(model, enc, dicts, keep_first, p, cache=cache)
    seq = enc.seq_len
    # edges[dst] = {src: score}; value[dst] = what the target node's edges explain (logit or activation)
    edges: dict[str, dict[str, float]] = {}
    t, _ = logit_target(model, enc, cache)
    top = (model.arch.n_layers - 1, "post")
    edges["logits"] = {n: float(v[0]) for n, v in _edges_from(model, cache, layers, len(layers), t, top, p, skip,
                                                                      keep_first)}
    influence = {"logits": 1.0}
    n_passes = 1
    for i in reversed(range(len(layers))):
        lay = layers[i]
        infl = node_influence(edges, influence)
        candidates = [(infl.get(n, 0.0), j) for j, n in enumerate(lay.names[:lay.n_features])]
        picked = [j for v, j in sorted(candidates, reverse=True)[:per_layer] if v > 0]
        if not picked:
            continue
        for start in range(0, len(picked), batch_size):
            chunk = torch.tensor(picked[start:start + batch_size])
            pos, feat = lay.src.positions[chunk], lay.src.features[chunk]
            dirs = encoder_directions(lay.d, lay.src.x_in, pos, feat)
            tv = read_target(model, lay.place, cache, dirs, pos, seq)
            found = _edges_from(model, cache, layers, i, tv, lay.place.read, p, skip, keep_first)
            for b, j in enumerate(chunk.tolist()):
                edges[lay.names[j]] = {n: float(v[b]) for n, v in found}
            n_passes += len(chunk)
        influence = node_influence(edges, {"logits": 1.0})
    influence = node_influence(edges, {"logits": 1.0})
    scores = graph_scores(edges)
    with torch.no_grad():  # the target's probability, for the graph-json logit node (circuit-tracer's token_prob)
        probs = model.logits(enc.tokens)[0, -1].double().softmax(-1)
    target_id = enc.target_id if enc.target_id is not None else int(probs.argmax())
    seconds = time.perf_counter() - started
    nodes, kept = prune(edges, influence, max_nodes, max_edges, node_threshold, edge_threshold)
    check_finite("the target logit", logit)
    info = _node_info(layers, full, enc.str_tokens, model.arch.n_layers)
    node_list = [dict(info[n], id=n, influence=influence.get(n, 0.0)) for n in nodes]
    node_list.sort(key=lambda n: (n["row"], n["position"] if n["position"] is not None else 10**9))
    edge_list = [{"src": s, "dst": d, "score": v} for (s, d), v in kept.items()]
    for e in edge_list:
        check_finite(f"edge {e['src']} -> {e['dst']}", e["score"])
    return feature_subgraph(
        model=model.name, prompt=prompt, tokens=list(enc.str_tokens), target=target, foil=foil,
        target_logit=logit, dictionaries=[{"name": d.name, "path": str(d.path), "tag": pl.tag, "kind": d.kind,
                                           "hook": d.hook, "hook_out": d.hook_out}
                                          for d, pl in zip(dicts, places, strict=True)],
        nodes=node_list, edges=edge_list, seconds=seconds, n_passes=n_passes,
        params={"method": "dpa", "per_layer": per_layer, "max_nodes": max_nodes, "max_edges": max_edges,
                "keep_first": keep_first, "node_threshold": node_threshold, "edge_threshold": edge_threshold,
                "live_skip": skip, "top_logits": _top_logits(model, probs), **p.to_dict()},
        scores=scores, token_ids=[int(t) for t in enc.tokens[0].tolist()], target_id=target_id,
        target_prob=float(probs[target_id]))


def _top_logits(model: HookedModel, probs: torch.Tensor, k: int = 10, mass: float = 0.95) -> list[dict[str, Any]]:
    """The next tokens by probability until ``mass`` of it or ``k`` of them (circuit-tracer's logit nodes)."""
    top = probs.topk(k)
    out, total = [], 0.0
    for p, i in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        out.append({"token": model.decode([int(i)]), "id": int(i), "prob": float(p)})
        total += p
        if total >= mass:
            break
    return out


def _gradient_feature_graph(model: HookedModel, prompt: str, dicts: list[Dictionary], target: str | None,
                            foil: str | None, per_layer: int, max_nodes: int, max_edges: int, keep_first: bool,
                            node_threshold: float | None, edge_threshold: float | None) -> Subgraph:
    """The replacement-model graph by backward passes (circuits/replacement.py)."""
    enc = model.encode(prompt, target, foil)
    places = check_dictionaries(model, dicts, cross_layer=True)
    by_layer: dict[int, Dictionary] = {}
    for d, pl in zip(dicts, places, strict=True):
        if pl.mlp is None:
            raise MethodError(f"{d.name} is a residual SAE: the gradient (replacement-model) graph takes transcoders "
                              "(a set from `workbench sae build-set`); use --method dpa for residual SAEs")
        by_layer[pl.mlp] = d
    started = time.perf_counter()
    with torch.no_grad():
        probs = model.logits(enc.tokens)[0, -1].double().softmax(-1)
    target_id = enc.target_id if enc.target_id is not None else int(probs.argmax())
    direction = torch.zeros(probs.shape[0])
    direction[target_id] += 1.0
    if enc.foil_id is not None:
        direction[enc.foil_id] -= 1.0
    else:  # circuit-tracer's logit node: the logit minus the mean logit
        direction -= 1.0 / probs.shape[0]
    rep = build_replacement(model, enc.tokens, by_layer, keep_first)
    g = gradient_graph(model, rep, direction, per_layer)
    targets = set(g.rows)
    edges: dict[str, dict[str, float]] = {}
    for dst, r in g.rows.items():
        idx = torch.nonzero(r, as_tuple=True)[0].tolist()
        edges[dst] = {rep.source_names[i]: float(r[i]) for i in idx
                      if rep.source_kinds[i] != "feature" or rep.source_names[i] in targets}
    influence = node_influence(edges, {"logits": 1.0})
    scores = graph_scores(edges)
    nodes, kept = prune(edges, influence, max_nodes, max_edges, node_threshold, edge_threshold)
    logit = g.target_value["logits"]
    check_finite("the target logit", logit)
    direct = edges["logits"]
    info = _replacement_info(rep, list(enc.str_tokens), model.arch.n_layers, direct)
    node_list = [dict(info[n], id=n, influence=influence.get(n, 0.0)) for n in nodes]
    node_list.sort(key=lambda n: (n["row"], n["position"] if n["position"] is not None else 10**9))
    edge_list = [{"src": s, "dst": d, "score": v} for (s, d), v in kept.items()]
    for e in edge_list:
        check_finite(f"edge {e['src']} -> {e['dst']}", e["score"])
    missing = [x for x in range(model.arch.n_layers) if x not in by_layer]
    return feature_subgraph(
        model=model.name, prompt=prompt, tokens=list(enc.str_tokens), target=target, foil=foil, target_logit=logit,
        dictionaries=[{"name": d.name, "path": str(d.path), "tag": pl.tag, "kind": d.kind, "hook": d.hook,
                       "hook_out": d.hook_out} for d, pl in zip(dicts, places, strict=True)],
        nodes=node_list, edges=edge_list, seconds=time.perf_counter() - started, n_passes=g.n_passes,
        params={"method": "gradient", "per_layer": per_layer, "max_nodes": max_nodes, "max_edges": max_edges,
                "keep_first": keep_first, "node_threshold": node_threshold, "edge_threshold": edge_threshold,
                "mlp_as_error": missing, "top_logits": _top_logits(model, probs)},
        scores=scores, token_ids=[int(t) for t in enc.tokens[0].tolist()], target_id=target_id,
        target_prob=float(probs[target_id]))


def _replacement_info(rep: Any, tokens: list[str], n_layers: int,
                      direct: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Node descriptions of a replacement-model graph (as _node_info); score = the node's direct effect on the
    logit node."""
    info: dict[str, dict[str, Any]] = {"logits": {"kind": "logits", "row": n_layers, "position": None,
                                                  "token": None, "dictionary": None, "feature": None,
                                                  "activation": None, "score": None, "label": "logits"}}
    for q, tok in enumerate(tokens):
        info[f"emb@p{q}"] = {"kind": "token", "row": -1, "position": q, "token": tok, "dictionary": None,
                             "feature": None, "activation": None, "score": direct.get(f"emb@p{q}"),
                             "label": f"{tok!r}@{q}"}
    for layer in range(n_layers):
        lay = rep.layers.get(layer)
        tag = lay["tag"] if lay else f"L{layer}M"
        name = lay["dic"].name if lay else None
        for q, tok in enumerate(tokens):
            n = f"{tag}.err@p{q}"
            info[n] = {"kind": "error", "row": layer - 0.5, "position": q, "token": tok, "dictionary": name,
                       "feature": None, "activation": None, "score": direct.get(n, 0.0), "label": f"{tag}.err@{q}"}
        if lay is None:
            continue
        for j, (q, f) in enumerate(zip(lay["pos"].tolist(), lay["feat"].tolist(), strict=True)):
            n = f"{tag}.f{f}@p{q}"
            info[n] = {"kind": "feature", "row": layer - 0.5, "position": q, "token": tokens[q], "dictionary": name,
                       "feature": f, "activation": float(lay["acts"][j].detach()), "score": direct.get(n, 0.0),
                       "label": f"{tag}.f{f}@{q}"}
    return info


def _node_info(layers: list[_Layer], full: list[Any], tokens: list[str], n_layers: int) -> dict[str, dict[str, Any]]:
    """Per node id: kind, drawing row, position, token, dictionary, feature, activation, DPA score, label."""
    info: dict[str, dict[str, Any]] = {"logits": {"kind": "logits", "row": n_layers, "position": None,
                                                  "token": None, "dictionary": None, "feature": None,
                                                  "activation": None, "score": None, "label": "logits"}}
    for q, tok in enumerate(tokens):
        info[f"emb@p{q}"] = {"kind": "token", "row": -1, "position": q, "token": tok, "dictionary": None,
                             "feature": None, "activation": None, "score": None, "label": f"{tok!r}@{q}"}
    for lay, lf in zip(layers, full, strict=True):
        layer = lay.place.write[0]
        row = layer - 0.5 if lay.place.mlp is not None else layer
        for j, name in enumerate(lay.names):
            if j < lay.n_features:
                q, f = int(lay.src.positions[j]), int(lay.src.features[j])
                info[name] = {"kind": "feature", "row": row, "position": q, "token": tokens[q],
                              "dictionary": lay.d.name, "feature": f, "activation": float(lay.src.acts[j]),
                              "score": float(lf.scores[j]), "label": f"{lay.place.tag}.f{f}@{q}"}
            else:
                q = j - lay.n_features
                info[name] = {"kind": "error", "row": row, "position": q, "token": tokens[q],
                              "dictionary": lay.d.name, "feature": None, "activation": None,
                              "score": float(lf.error[q]), "label": f"{lay.place.tag}.err@{q}"}
    return info
