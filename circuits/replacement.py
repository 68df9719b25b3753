"""The replacement model of a prompt and its attribution graph by the plain backward pass (circuit-tracer's
method), for a set of transcoders (one per layer: ``workbench sae build-set``) or a cross-layer transcoder
(``workbench sae build-clt``: each layer's features also write into every later MLP output; ``writers`` lists what
writes into an MLP, and an error node is what all of it misses).

The replacement model: every MLP with a transcoder is replaced by its features (their activations held as
leaves of the autograd graph), its decoder bias, its live skip term and an error node per position (the true
MLP output minus the reconstruction, a constant leaf), so the forward reproduces the clean run exactly;
attention patterns and every norm scale are frozen at their clean values. What remains between leaves is
linear, so a target node's backward pass gives every source's exact contribution: source value x gradient
(a feature: activation x d target / d activation; an error or embedding vector: its dot product with the
gradient there). A layer without a transcoder (or with a damaged one, named by the caller) keeps its MLP output
as one error node per position. Position 0 (the attention sink, on which no transcoder here is trained) is all
error, as in circuits/feature_graph.py.

Targets: the logit node (target minus foil, or the target's logit minus the mean logit, as circuit-tracer
demeans) and, from the top layer down, the ``per_layer`` features of largest influence on the logits so far,
each its own backward pass from its encoder direction at the MLP input (its pre-activation). The rows are kept
as one dense matrix over all sources, so influence for choosing the next targets counts every active feature.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float, Int

if TYPE_CHECKING:
    from attribution.sae.dictionary import Dictionary
    from core.models.hooked import HookedModel


@dataclass
class Replacement:
    """The clean run's frozen pieces and the leaves of the replacement model (batch 1)."""

    tokens: Int[torch.Tensor, "1 pos"]
    frozen: dict[str, torch.Tensor]  # mixed shapes: hook name -> clean value (patterns, norm scales)
    emb: Float[torch.Tensor, "pos d_model"]  # leaf at hook_embed
    layers: dict[int, dict[str, Any]]  # layer -> {dic, pos, feat, acts (leaf), err (leaf), first}
    # layers with no transcoder: their MLP output as an error leaf
    error_only: dict[int, Float[torch.Tensor, "pos d_model"]]
    source_names: list[str]
    source_kinds: list[str]
    n_features: int


def _clean(model: HookedModel, tokens: torch.Tensor, dicts: dict[int, Dictionary], n_layers: int) -> dict[str, Any]:
    names = {"hook_embed"} | ({"hook_pos_embed"} if "hook_pos_embed" in model.hook_names() else set())
    for name in model.hook_names():
        if name.endswith(("hook_scale", "attn.hook_pattern")):
            names.add(name)
    for layer in range(n_layers):
        names.add(f"blocks.{layer}.hook_mlp_out")
        if layer in dicts:
            names.add(dicts[layer].hook)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=sorted(names))
    return {k: v.detach() for k, v in cache.items()}


def writers(dicts: dict[int, Any], layer: int) -> list[tuple[int, Float[torch.Tensor, "feature d_model"]]]:
    """(source layer, decoder into ``layer``'s MLP output) for every dictionary that writes there: a per-layer
    transcoder's own decoder, or every layer <= ``layer`` of the same cross-layer transcoder."""
    from attribution.sae.clt import cross_layer

    d = dicts[layer]
    clt = cross_layer(d)
    if clt is None:
        return [(layer, d.W_dec)]
    return [(s, clt.writes_into(s, layer)) for s in range(layer + 1)
            if s in dicts and cross_layer(dicts[s]) is clt]


def decoded(layers: dict[int, dict[str, Any]], dicts: dict[int, Any], layer: int, seq: int
            ) -> Float[torch.Tensor, "pos d_model"]:
    """What the active features of every writer into ``layer`` add there (sum of act x decoder row), from the
    layers' (pos, feat, acts) entries: only the active rows are read (a CLT has L(L+1)/2 decoders)."""
    out = None
    for s, w in writers(dicts, layer):
        lay = layers[s]
        part = torch.zeros(seq, w.shape[-1]).index_add(0, lay["pos"], lay["acts"][:, None] * w[lay["feat"]].float())
        out = part if out is None else out + part
    return out


def feature_writes(d: Any, feature: int, act: float) -> list[tuple[str, Float[torch.Tensor, " d_model"]]]:
    """(hook, vector) for everything one active feature adds: act x its decoder direction at its own MLP output,
    and, for a cross-layer transcoder, at every later layer's MLP output too."""
    from attribution.sae.clt import cross_layer, output_hook

    clt = cross_layer(d)
    if clt is None:
        return [(d.hook_out, d.W_dec[int(feature)].float() * act)]
    s = int(d.layer)
    return [(output_hook(t), clt.writes_into(s, t)[int(feature)].float() * act) for t in range(s, clt.n_layers)]


def build_replacement(model: HookedModel, tokens: Int[torch.Tensor, "1 pos"], dicts: dict[int, Dictionary],
                      keep_first: bool = False) -> Replacement:
    n_layers = model.arch.n_layers
    cache = _clean(model, tokens, dicts, n_layers)
    # learned position embeddings (toy models) are held like biases: constants, not nodes
    frozen = {k: v for k, v in cache.items() if k.endswith(("hook_scale", "hook_pattern", "hook_pos_embed"))}
    emb = cache["hook_embed"][0].float().clone().requires_grad_(True)
    first = 0 if keep_first else 1
    layers: dict[int, dict[str, Any]] = {}
    error_only: dict[int, torch.Tensor] = {}
    names: list[str] = []
    kinds: list[str] = []
    for layer in range(n_layers):
        mlp_out = cache[f"blocks.{layer}.hook_mlp_out"][0].float()
        d = dicts.get(layer)
        if d is None:
            error_only[layer] = mlp_out.clone().requires_grad_(True)
            continue
        x = cache[d.hook][0].float()
        with torch.no_grad():
            f = d.encode(x).float()
            f[:first] = 0.0
            pos, feat = torch.nonzero(f, as_tuple=True)
            tag = f"L{layer}T"
            layers[layer] = {"dic": d, "pos": pos, "feat": feat, "acts": f[pos, feat], "first": first, "tag": tag}
            # every dictionary writing into this MLP output: its own, and a cross-layer transcoder's earlier layers
            recon = decoded(layers, dicts, layer, len(x)) + d.decode(torch.zeros(1, d.d_sae)).float() + d.skip(x)
        err = mlp_out - recon
        err[:first] = mlp_out[:first]  # the sink position: the whole MLP output is error
        names += [f"{tag}.f{int(j)}@p{int(p)}" for p, j in zip(pos.tolist(), feat.tolist(), strict=True)]
        kinds += ["feature"] * len(pos)
        layers[layer] |= {"acts": layers[layer]["acts"].clone().requires_grad_(True),
                          "err": err.clone().requires_grad_(True)}
    n_features = len(names)
    seq = tokens.shape[1]
    for layer in range(n_layers):
        tag = f"L{layer}T" if layer in layers else f"L{layer}M"
        names += [f"{tag}.err@p{p}" for p in range(seq)]
        kinds += ["error"] * seq
    names += [f"emb@p{p}" for p in range(seq)]
    kinds += ["token"] * seq
    return Replacement(tokens, frozen, emb, layers, error_only, names, kinds, n_features)


def replacement_forward(model: HookedModel, rep: Replacement
                        ) -> tuple[Float[torch.Tensor, "pos vocab"], dict[int, Float[torch.Tensor, "pos d_model"]]]:
    """Logits [pos, vocab] of the replacement model (equal to the clean run's) and the live MLP inputs of the
    transcoder layers (what each feature's encoder reads), all differentiable in the leaves."""
    live: dict[int, torch.Tensor] = {}
    by_layer = {x: lay["dic"] for x, lay in rep.layers.items()}

    def put(value: Float[torch.Tensor, "1 ..."]):  # any frozen hook's value (or the embedding), batch 1
        return lambda act, hook: value.to(act.dtype).reshape(act.shape)  # noqa: ARG005

    def grab(layer: int):
        def hook(act, hook):  # noqa: ARG001
            live[layer] = act[0]
            return act
        return hook

    def mlp(layer: int):
        def hook(act, hook):  # noqa: ARG001
            if layer in rep.error_only:
                return rep.error_only[layer][None].to(act.dtype)
            lay = rep.layers[layer]
            d = lay["dic"]
            seq = act.shape[1]
            x = live[layer]
            skip = d.skip(x.float())
            skip = torch.cat([torch.zeros_like(skip[: lay["first"]]), skip[lay["first"]:]])
            bias = d.decode(torch.zeros(1, d.d_sae)).float()
            bias = bias.expand(seq, -1).clone()
            bias[: lay["first"]] = 0.0
            out = decoded(rep.layers, by_layer, layer, seq) + bias + skip + lay["err"]
            return out[None].to(act.dtype)
        return hook

    hooks = [(name, put(v)) for name, v in rep.frozen.items()]
    hooks.append(("hook_embed", put(rep.emb[None])))
    for layer in range(model.arch.n_layers):
        if layer in rep.layers:
            hooks.append((rep.layers[layer]["dic"].hook, grab(layer)))
        hooks.append((f"blocks.{layer}.hook_mlp_out", mlp(layer)))
    with torch.enable_grad():
        logits = model.run_with_hooks(rep.tokens, fwd_hooks=hooks)
    return logits[0], live


def leaves(rep: Replacement) -> list[torch.Tensor]:  # mixed shapes: acts [active], errors and emb [pos d_model]
    n_layers = len(rep.layers) + len(rep.error_only)
    acts = [rep.layers[x]["acts"] for x in sorted(rep.layers)]
    errs = [rep.layers[x]["err"] if x in rep.layers else rep.error_only[x] for x in range(n_layers)]
    return acts + errs + [rep.emb]


def row(target: Float[torch.Tensor, ""], rep: Replacement, retain: bool = True) -> Float[torch.Tensor, " source"]:
    """One target's exact contributions from every source (rep.source_names' order): act x gradient for
    features, value . gradient for error and embedding vectors."""
    ls = leaves(rep)
    grads = torch.autograd.grad(target, ls, retain_graph=retain, allow_unused=True)
    n_acts = len(rep.layers)
    parts = []
    for i, (leaf, g) in enumerate(zip(ls, grads, strict=True)):
        if g is None:
            g = torch.zeros_like(leaf)
        parts.append((leaf.detach() * g) if i < n_acts else (leaf.detach() * g).sum(-1))
    return torch.cat([p.reshape(-1) for p in parts]).double()


@dataclass
class GradientRows:
    """Rows of the expanded targets over all sources, and what the feature graph needs to describe its nodes (the
    backward passes' raw output, not a graph result: circuits.feature_graph builds the Subgraph from it)."""

    rep: Replacement
    rows: dict[str, Float[torch.Tensor, " source"]]  # target id -> its contribution from every source
    target_value: dict[str, float]  # target id -> its value (logit difference, or pre-activation)
    n_passes: int
    seconds: float


def gradient_graph(model: HookedModel, rep: Replacement, logit_direction: Float[torch.Tensor, " vocab"],
                   per_layer: int = 16,
                   logit_id: str = "logits") -> GradientRows:
    """Expand the logit node, then top-down the ``per_layer`` most influential features of every layer."""
    started = time.perf_counter()
    logits, live = replacement_forward(model, rep)
    value = logits[-1].float() @ logit_direction.float()
    rows = {logit_id: row(value, rep)}
    values = {logit_id: float(value.detach())}
    n_src = len(rep.source_names)
    infl = torch.zeros(n_src, dtype=torch.float64)
    r = rows[logit_id].abs()
    infl += r / r.sum().clamp_min(1e-30)
    index = {n: i for i, n in enumerate(rep.source_names)}
    offset = 0
    spans = {}
    for layer in sorted(rep.layers):
        n = len(rep.layers[layer]["acts"])
        spans[layer] = (offset, offset + n)
        offset += n
    n_passes = 1
    for layer in sorted(rep.layers, reverse=True):
        a, b = spans[layer]
        if b == a:
            continue
        cand = infl[a:b]
        k = min(per_layer, int((cand > 0).sum()))
        if k == 0:
            continue
        picked = (cand.topk(k).indices + a).tolist()
        lay = rep.layers[layer]
        w_enc = lay["dic"].W_enc.float()
        for i in picked:
            j = i - a
            p, f = int(lay["pos"][j]), int(lay["feat"][j])
            pre = live[layer][p].float() @ w_enc[:, f]
            name = rep.source_names[i]
            rows[name] = row(pre, rep)
            values[name] = float(pre.detach())
            n_passes += 1
            w = float(infl[index[name]])
            r = rows[name].abs()
            infl += w * r / r.sum().clamp_min(1e-30)
    return GradientRows(rep, rows, values, n_passes, time.perf_counter() - started)


def predicted_effects(graph: Any) -> dict[str, float]:
    """What a feature graph predicts for zeroing each feature node: the change of the logit node, summed over the
    graph's kept paths (each edge n -> m is n's contribution to m's input; a feature's activation moves one for
    one with its input, so d logit / d a_m = T(m) / a_m, taken top-down). ``graph``: a feature graph's
    Subgraph."""
    by_dst: dict[str, dict[str, float]] = {}
    for e in graph.edges:
        by_dst.setdefault(e.target, {})[e.source] = float(e.score)
    nodes = {n.id: n for n in graph.nodes}
    total: dict[str, float] = {}
    per_unit: dict[str, float] = {"logits": 1.0}  # d logit / d (the node's input or activation)
    order = sorted((n for n in nodes.values() if n.kind == "feature"), key=lambda n: -float(n.layer))
    # edges point upward, so a node's targets all sit on higher rows (or are the logits)
    for n in order:
        t = 0.0
        for dst, row in by_dst.items():
            if n.id in row and dst in per_unit:
                t += row[n.id] * per_unit[dst]
        total[n.id] = t
        act = n.metadata.get("activation") or 0.0
        per_unit[n.id] = t / act if act else 0.0
    return {k: -v for k, v in total.items()}


def intervention_check(model: HookedModel, graph: Any, dictionaries: list[Dictionary], top: int = 10,
                       ) -> dict[str, Any]:
    """Zero each of the graph's ``top`` feature nodes (by influence) in the real model, one at a time: subtract
    activation x decoder direction where its dictionary writes, at its position, with nothing frozen; compare the
    logit node's real change with the graph's prediction (predicted_effects). Pearson correlation, mean absolute
    error, and the pairs."""
    by_name = {d.name: d for d in dictionaries}
    enc = model.encode(graph.prompt if graph.token_ids is None else graph.token_ids, graph.target, graph.foil)
    tokens = enc.tokens
    vocab = model.arch.d_vocab
    target_id = graph.target_id if graph.target_id is not None else enc.target_id

    def metric(logits: Float[torch.Tensor, "1 pos vocab"]) -> float:
        last = logits[0, -1].double()
        if enc.foil_id is not None:
            return float(last[target_id] - last[enc.foil_id])
        return float(last[target_id] - last.sum() / vocab)

    with torch.no_grad():
        base = metric(model.logits(tokens))
    predicted = predicted_effects(graph)
    feats = sorted((n for n in graph.nodes if n.kind == "feature"),
                   key=lambda n: -float(n.metadata["influence"]))[:top]
    pairs = []
    for n in feats:
        d = by_name.get(n.metadata.get("dictionary"))
        if d is None:
            continue
        pos = int(n.position)

        def ablate(direction, pos=pos):
            def hook(act, hook):  # noqa: ARG001
                out = act.clone()
                out[:, pos] -= direction.detach().to(out.dtype)
                return out
            return hook

        with torch.no_grad():  # a cross-layer transcoder's feature is taken out of every MLP output it writes
            hooks = [(h, ablate(v)) for h, v in feature_writes(d, int(n.feature), float(n.metadata["activation"]))]
            real = metric(model.run_with_hooks(tokens, fwd_hooks=hooks)) - base
        pairs.append({"node": n.id, "predicted": predicted.get(n.id, 0.0), "real": real})
    pred = torch.tensor([p["predicted"] for p in pairs], dtype=torch.float64)
    real = torch.tensor([p["real"] for p in pairs], dtype=torch.float64)
    corr = None
    if len(pairs) >= 3 and float(pred.std()) > 0 and float(real.std()) > 0:
        corr = float(torch.corrcoef(torch.stack([pred, real]))[0, 1])
    return {"pairs": pairs, "correlation": corr,
            "mean_abs_error": float((pred - real).abs().mean()) if pairs else None,
            "mean_abs_real": float(real.abs().mean()) if pairs else None, "metric": base}
