"""Information flow by token: Ferrando and Voita's information flow routes (2024) per position, the graph the LLM
Transparency Tool draws.

Nodes are the residual stream at (state, position): the embedding ``E@p``, after layer l's attention ``A{l}@p``
and after layer l's MLP ``M{l}@p``, with the MLP itself ``F{l}@p`` between the last two. Each sum in the residual
stream is split into its parts and each part scored by its L1 proximity share of the sum (IFR's, computed once
in ``attribution.baselines.ifr.layer_shares`` and ``circuits.edges.ifr.shares``):

- resid_mid_i = resid_pre_i + sum_{h, j} A^h_ij v^h_j W_O^h: an attention edge ``M{l-1}@j -> A{l}@i`` (its
  share summed over heads; per head in ``attn``) and a residual edge ``M{l-1}@i -> A{l}@i``;
- resid_post_i = resid_mid_i + MLP(resid_mid_i): the MLP edges ``A{l}@i -> F{l}@i -> M{l}@i`` and a residual
  edge ``A{l}@i -> M{l}@i``.

A receiver's shares sum to 1 (0 where no part is near it). ``graph`` prunes as the paper does: from the last
layer's node at one position, walk down the edges whose share exceeds a threshold; only nodes reachable from that
prediction stay. IFR is prediction-agnostic (no target, one forward, no gradient).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float

from attribution.baselines.ifr import layer_shares, share_hooks
from circuits.edges.ifr import shares
from circuits.subgraph import SUBGRAPH_KIND, GraphEdge, GraphNode, Provenance, Subgraph
from core.errors import MethodError, PromptError, RangeError

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from core.store import Run

THRESHOLD = 0.04  # the LLM Transparency Tool's default contribution threshold
METHOD = "ifr-flow"


def node_id(state: str, layer: int, position: int) -> str:
    """``E@3`` (the embedding), ``A5@3`` (after layer 5's attention), ``F5@3`` (layer 5's MLP), ``M5@3`` (after
    layer 5)."""
    return f"E@{position}" if state == "E" else f"{state}{layer}@{position}"


def parse_node(name: str) -> tuple[str, int, int]:
    """(state, layer, position) of a node id; a RangeError for anything else."""
    try:
        head, pos = name.split("@")
        state, layer = head[0], (-1 if head == "E" else int(head[1:]))
        if state not in "EAFM" or (state == "E") != (head == "E"):
            raise ValueError
        return state, layer, int(pos)
    except (ValueError, IndexError):
        raise RangeError(f"not a flow node: {name!r} (E@p, A{{l}}@p, F{{l}}@p or M{{l}}@p)") from None


@dataclass
class Flow:
    """One prompt's per-position shares. attn [layer, query, head, key]: each head's share of resid_mid at the query
    from the key; resid_attn [layer, pos]: the residual's share of resid_mid; mlp / resid_mlp [layer, pos]: the
    MLP's and the residual's shares of resid_post. states: the residual stream itself, in the order E, A0, M0, A1,
    M1, ... (``state_index``), read by the logit lens on demand (``lens``: a 262k vocabulary at every state costs
    more than the forward). predictions: each position's top next token."""

    model: str
    prompt: str
    tokens: list[str]
    attn: Float[torch.Tensor, "layer query head key"]
    resid_attn: Float[torch.Tensor, "layer pos"]
    mlp: Float[torch.Tensor, "layer pos"]
    resid_mlp: Float[torch.Tensor, "layer pos"]
    states: Float[torch.Tensor, "state pos d_model"]
    predictions: list[str]
    seconds: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    threshold: float = THRESHOLD  # what graph, plot, to_json and save use when given none (``at``)
    position: int | None = None
    hooked: Any = field(default=None, repr=False, compare=False)  # the model, for the lens; None once saved

    @property
    def n_layers(self) -> int:
        return int(self.attn.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.attn.shape[2])

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def prediction(self) -> str:
        """The model's top next token after the prompt."""
        return self.predictions[-1]

    def state_index(self, state: str, layer: int) -> int:
        """The row of ``states`` of a residual state (E, A or M; an MLP node reads its output's, M)."""
        return 0 if state == "E" else 2 * layer + (1 if state == "A" else 2)

    def _position(self, position: int | None) -> int:
        p = self.n_tokens - 1 if position is None else int(position)
        if not -self.n_tokens <= p < self.n_tokens:
            raise RangeError(f"position {position} is outside the prompt's {self.n_tokens} tokens")
        return p % self.n_tokens

    def at(self, threshold: float | None = None, position: int | None = None) -> Flow:
        """This flow with another default threshold and position (what ``.save()`` and ``.plot()`` then draw)."""
        import dataclasses

        t = self.threshold if threshold is None else float(threshold)
        self._check(t)
        return dataclasses.replace(self, threshold=t, position=self._position(position if position is not None
                                                                                else self.position))

    @staticmethod
    def _check(threshold: float) -> None:
        if not 0.0 <= float(threshold) <= 1.0:
            raise RangeError(f"threshold {threshold} is outside [0, 1]: it is a share of a residual sum")

    # -- the pruned graph ------------------------------------------------------------------------------------
    def importance(self, position: int | None = None) -> dict[str, Float[torch.Tensor, "layer pos"]]:
        """Each node's share of the prediction at ``position`` (default the last), walked down the unpruned
        shares: ``A``, ``F``, ``M`` [layer, pos] and ``E`` [1, pos]. The embeddings' row is IFR's token level."""
        p = self._position(position)
        n, s = self.n_layers, self.n_tokens
        out = {k: torch.zeros(n, s) for k in "AFM"}
        w = torch.zeros(s)
        w[p] = 1.0
        for l in reversed(range(n)):
            out["M"][l] = w
            out["F"][l] = w * self.mlp[l]
            a = w * self.resid_mlp[l] + out["F"][l]  # the MLP reads all of A: its share passes on whole
            out["A"][l] = a
            w = a * self.resid_attn[l] + a @ self.attn[l].sum(1)  # [q] @ [q, k]
        out["E"] = w[None]
        return out

    def graph(self, threshold: float | None = None, position: int | None = None) -> Subgraph:
        """The routes to the prediction at ``position`` (default the last): the nodes reachable from it down edges
        whose share exceeds ``threshold``, as the one graph type (node positions and rows set; edge roles attn,
        resid and mlp; node metadata: token, importance, top lens tokens)."""
        threshold = self.threshold if threshold is None else threshold
        self._check(threshold)
        p = self._position(self.position if position is None else position)
        imp = self.importance(p)
        t = float(threshold)
        edges: list[GraphEdge] = []
        live = {p}  # positions live at the current M row
        head_sum = self.attn.sum(2)  # [layer, query, key]
        for l in reversed(range(self.n_layers)):
            below: set[int] = set()
            for i in sorted(live):
                m, a, f = node_id("M", l, i), node_id("A", l, i), node_id("F", l, i)
                if self.resid_mlp[l, i] > t:
                    edges.append(GraphEdge(a, m, float(self.resid_mlp[l, i]), "resid"))
                if self.mlp[l, i] > t:
                    edges += [GraphEdge(f, m, float(self.mlp[l, i]), "mlp"),
                              GraphEdge(a, f, float(self.mlp[l, i]), "mlp")]
                if self.resid_mlp[l, i] <= t and self.mlp[l, i] <= t:
                    continue
                src = (lambda j, l=l: node_id("M", l - 1, j)) if l else (lambda j: node_id("E", 0, j))
                if self.resid_attn[l, i] > t:
                    edges.append(GraphEdge(src(i), a, float(self.resid_attn[l, i]), "resid"))
                    below.add(i)
                for j in (head_sum[l, i, : i + 1] > t).nonzero().flatten().tolist():  # a long prompt: no loop over keys
                    edges.append(GraphEdge(src(j), a, float(head_sum[l, i, j]), "attn"))
                    below.add(j)
            live = below
        ids = {node_id("M", self.n_layers - 1, p)} | {e.source for e in edges} | {e.target for e in edges}
        nodes = [self._node(name, imp) for name in sorted(ids, key=_order)]
        prov = Provenance(self.model, METHOD, "flow", [{"prompt": self.prompt, "target": None, "foil": None}],
                          {"threshold": t, "position": p, **self.params})
        return Subgraph(nodes, edges, prov, metadata={"flow_tokens": list(self.tokens), "prediction": self.prediction,
                                                      "seconds": self.seconds})

    def _node(self, name: str, imp: dict[str, torch.Tensor]) -> GraphNode:
        state, layer, pos = parse_node(name)
        row = {"E": -1.0, "A": layer - 0.5, "F": layer - 0.25, "M": float(layer)}[state]
        kind = {"E": "token", "A": "resid", "F": "mlp", "M": "resid"}[state]
        md: dict[str, Any] = {"token": self.tokens[pos], "state": state, "block": layer,
                              "importance": float(imp[state][max(layer, 0), pos])}
        return GraphNode(name, kind, row, pos, _label(state, layer, pos, self.tokens), md)

    # -- one node, one edge ----------------------------------------------------------------------------------
    def heads_into(self, layer: int, query: int, key: int | None = None) -> list[dict[str, Any]]:
        """Each head's share of resid_mid at ``query`` after ``layer``'s attention (from ``key``, or summed over
        keys, with the key it takes most from), largest first."""
        shares_ = self.attn[layer, query]  # [head, key]
        rows = []
        for h in range(self.n_heads):
            v = shares_[h, key] if key is not None else shares_[h].sum()
            top = int(shares_[h].argmax())
            rows.append({"head": f"L{layer}.H{h}", "share": float(v), "top key": top,
                         "top key token": self.tokens[top], "top key share": float(shares_[h, top])})
        return sorted(rows, key=lambda r: -r["share"])

    def lens(self, name: str, top_k: int = 5) -> list[dict[str, Any]]:
        """A node's top tokens by the logit lens (an MLP node: the residual it writes into); [] once the model is
        gone (a flow read back from a run)."""
        state, layer, pos = parse_node(name)
        if self.hooked is None:
            return []
        x = self.states[self.state_index("M" if state == "F" else state, layer), pos]
        return _top_tokens(self.hooked, x[None], top_k)[0]

    def describe(self, name: str, top_k: int = 5) -> dict[str, Any]:
        """What a click on node ``name`` shows: what it is, its top tokens by the logit lens, and (after an
        attention) each head's share and (after an MLP) the MLP's share."""
        state, layer, pos = parse_node(name)
        if not 0 <= pos < self.n_tokens or (state != "E" and not 0 <= layer < self.n_layers):
            raise RangeError(f"no node {name!r}: the prompt has {self.n_tokens} tokens and the model "
                             f"{self.n_layers} layers")
        tok = repr(self.tokens[pos])
        what = {"E": f"the embedding of {tok} (position {pos})",
                "A": f"the residual stream at position {pos} ({tok}) after layer {layer}'s attention",
                "F": f"layer {layer}'s MLP at position {pos} ({tok})",
                "M": f"the residual stream at position {pos} ({tok}) after layer {layer}"}[state]
        out: dict[str, Any] = {"id": name, "what": what, "position": pos, "token": self.tokens[pos],
                               "lens": self.lens(name, top_k)}
        if state == "A":
            out["residual share"] = float(self.resid_attn[layer, pos])
            out["heads"] = self.heads_into(layer, pos)
        if state in ("M", "F"):
            out["mlp share"] = float(self.mlp[layer, pos])
            out["residual share"] = float(self.resid_mlp[layer, pos])
        return out

    # -- drawn, written, saved -------------------------------------------------------------------------------
    def plot(self, threshold: float | None = None, position: int | None = None, selected: str | None = None,
             title: str | None = None) -> go.Figure:
        """The graph laid out by token position (x) and layer (y), edge width by share (circuits.flow_plot)."""
        from circuits.flow_plot import flow_figure

        return flow_figure(self, self.graph(threshold, position), selected=selected, title=title)

    def save_figure(self, path: Any, **plot_args: Any) -> Any:
        from core.figures import save_figure

        return save_figure(self.plot(**plot_args), path)

    def to_json(self, threshold: float | None = None, position: int | None = None) -> dict[str, Any]:
        """The pruned graph and what it was drawn from (model, prompt, tokens, prediction, threshold, seconds)."""
        g = self.graph(threshold, position)
        return {"model": self.model, "prompt": self.prompt, "tokens": self.tokens, "prediction": self.prediction,
                "threshold": g.provenance.params["threshold"], "position": g.provenance.params["position"],
                "seconds": round(self.seconds, 3), "n_nodes": len(g.nodes), "n_edges": len(g.edges),
                "nodes": [{"id": n.id, "row": n.layer, "position": n.position, "label": n.label,
                           "importance": n.metadata["importance"]} for n in g.nodes],
                "edges": [{"source": e.source, "target": e.target, "role": e.role, "score": e.score}
                          for e in g.edges]}

    def save(self, store: Any = None, threshold: float | None = None, position: int | None = None) -> Run:
        """A ``subgraph`` run (the Runs page and ``circuits.runs.subgraph_of`` reopen it): the pruned graph, this
        figure, and the dense shares as tensors."""
        import json

        from core.store import RunDraft, RunStore

        store = store if isinstance(store, RunStore) else RunStore(store)
        g = self.graph(threshold, position)
        return store.save(RunDraft(
            kind=SUBGRAPH_KIND, model=self.model, method=METHOD, args={"source": "flow", "params": g.provenance.params},
            timings={"seconds": self.seconds},
            result={"n_nodes": len(g.nodes), "n_edges": len(g.edges), **g.to_json()},
            tensors={"attn": self.attn, "resid_attn": self.resid_attn, "mlp": self.mlp, "resid_mlp": self.resid_mlp,
                     "states": self.states},
            figures={"graph": self.plot(threshold, position)},
            files={"subgraph.json": json.dumps(g.to_json(), allow_nan=False)}))


def _order(name: str) -> tuple[float, int]:
    state, layer, pos = parse_node(name)
    return ({"E": -1.0, "A": layer - 0.5, "F": layer - 0.25, "M": float(layer)}[state], pos)


def _label(state: str, layer: int, pos: int, tokens: list[str]) -> str:
    return repr(tokens[pos]) if state == "E" else f"{state}{layer}@{pos}"


def flow(model: Any, prompt: str) -> Flow:
    """Every per-position share of one prompt, from one cached forward (no target, no gradient), the residual
    states for the lens, and each position's top next token."""
    if getattr(model, "kind", "llm") == "vit" or not hasattr(model, "norm_sites"):
        raise MethodError(f"{getattr(model, 'name', 'this model')} is not a language model: information flow "
                          "routes follow tokens")
    if not isinstance(prompt, str) or not prompt.strip():
        raise PromptError("empty prompt: give at least one token")
    from core.models.hooked import require

    require(model, "information flow")
    start = time.perf_counter()
    tokens = model.to_tokens(prompt)
    n = model.arch.n_layers
    names = share_hooks(model) + [f"blocks.{l}.hook_resid_post" for l in range(n)]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=names, return_type=None)
        s = tokens.shape[1]
        attn = torch.zeros(n, s, model.arch.n_heads, s)
        resid_attn, mlp, resid_mlp = torch.zeros(n, s), torch.zeros(n, s), torch.zeros(n, s)
        states = [cache["blocks.0.hook_resid_pre"][0].float()]
        for l in range(n):
            resid_attn[l], attn[l] = layer_shares(model, cache, l)
            # resid_mid as layer_shares sums it (parallel blocks have none: their MLP adds to the same sum)
            mid = cache[f"blocks.{l}.hook_resid_pre"][0].float() + cache[f"blocks.{l}.hook_attn_out"][0].float()
            post = cache[f"blocks.{l}.hook_resid_post"][0].float()
            two = shares(post[None], torch.stack([mid, post - mid])[:, None])[:, 0]  # [2, pos]
            resid_mlp[l], mlp[l] = two[0], two[1]
            states += [mid, post]
        predictions = [row[0]["token"] for row in _top_tokens(model, states[-1], 1)]
    return Flow(getattr(model, "name", "model"), prompt, list(model.to_str_tokens(tokens)), attn, resid_attn, mlp,
                resid_mlp, torch.stack(states), predictions, time.perf_counter() - start, hooked=model)


def _top_tokens(model: Any, x: Float[torch.Tensor, "n d_model"], k: int) -> list[list[dict[str, Any]]]:
    """The logit lens' top ``k`` tokens (and probabilities) of each row of ``x``."""
    if not 1 <= int(k) <= 100:
        raise RangeError(f"top_k {k} is outside 1..100")
    dtype = getattr(model, "weight_dtype", torch.float32)
    with torch.no_grad():
        logits = model.read_out(x.to(dtype)).float()
        top = logits.topk(min(int(k), logits.shape[-1]), dim=-1)
        probs = (top.values - logits.logsumexp(-1, keepdim=True)).exp()
    return [[{"token": model.decode([int(i)]), "probability": float(p)} for i, p in zip(ids, ps, strict=True)]
            for ids, ps in zip(top.indices.tolist(), probs.tolist(), strict=True)]
