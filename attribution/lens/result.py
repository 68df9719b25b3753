"""LensResult: a lens's reading of one prompt on named axes (layer, position, rank) that tables, plots and saves
itself."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import RangeError
from core.figures import save_figure
from core.options import check_finite
from core.store import RunDraft, RunStore

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding

AXES = ("layer", "position", "rank")


@dataclass
class LensResult:
    """One lens on one prompt.

    layers: row names ("embed", then "L{l}" = the residual after block l; the last row is the model's own
    output). topk_ids / topk_probs: [layer, position, rank] the k most probable next tokens at each layer and
    position (rank 0 = top), topk_tokens the same as strings. With a target: target_rank [layer] (1 = the
    lens's top token) and target_prob [layer] at ``position`` (an index from the start; the last by default).
    """

    model: str
    kind: str
    tokens: list[str]
    layers: list[str]
    topk_ids: Int[torch.Tensor, "layer pos rank"]
    topk_probs: Float[torch.Tensor, "layer pos rank"]
    topk_tokens: list[list[list[str]]]
    position: int
    target: str | None = None
    target_rank: Int[torch.Tensor, " layer"] | None = None
    target_prob: Float[torch.Tensor, " layer"] | None = None
    prompt: str | None = None
    seconds: float = 0.0
    axes: tuple[str, ...] = field(default=AXES)

    @property
    def top_tokens(self) -> list[list[str]]:
        """[layer][position]: each cell's most probable next token."""
        return [[cell[0] for cell in row] for row in self.topk_tokens]

    @property
    def probs(self) -> list[list[float]]:
        """[layer][position]: the probability of each cell's top token."""
        return self.topk_probs[..., 0].tolist()

    def cell(self, layer: int, position: int) -> list[dict[str, Any]]:
        """The top-k list of one cell: [{"token", "id", "prob"}], most probable first."""
        return [{"token": t, "id": int(i), "prob": float(p)} for t, i, p in zip(
            self.topk_tokens[layer][position], self.topk_ids[layer, position], self.topk_probs[layer, position],
            strict=True)]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model, "kind": self.kind, "prompt": self.prompt, "tokens": self.tokens,
            "layers": self.layers, "top_tokens": self.top_tokens, "probs": self.probs,
            "top_k": int(self.topk_ids.shape[-1]), "topk_tokens": self.topk_tokens,
            "topk_probs": self.topk_probs.tolist(), "position": self.position, "seconds": self.seconds,
        }
        if self.target is not None:
            out.update(target=self.target, target_rank=self.target_rank.tolist(),
                       target_prob=self.target_prob.tolist())
        return out

    def table(self):
        """Long-format pandas table: one row per (layer, position) with its top token and probability."""
        import pandas as pd

        return pd.DataFrame([{"layer": name, "position": p, "token": self.tokens[p], "top": top[p], "prob": pr[p]}
                             for name, top, pr in zip(self.layers, self.top_tokens, self.probs, strict=True)
                             for p in range(len(self.tokens))])

    def plot(self, skip_first: bool = False):
        """Layers x positions heat map of the top token's probability, each cell labelled with that token.
        skip_first leaves position 0 (the attention sink) out of the colour scale; its cells are kept."""
        import plotly.graph_objects as go

        z = self.topk_probs[..., 0].tolist()
        xs = [f"{i}:{t}" for i, t in enumerate(self.tokens)]
        lo = 1 if skip_first and len(self.tokens) > 1 else 0
        zmax = float(self.topk_probs[:, lo:, 0].max()) if self.topk_probs[:, lo:].numel() else 1.0
        hover = [[f"{self.layers[l]} · {xs[p]}<br>" + "<br>".join(
            f"{t!r} {pr:.3f}" for t, pr in zip(self.topk_tokens[l][p], self.topk_probs[l, p].tolist(), strict=True))
            for p in range(len(xs))] for l in range(len(self.layers))]
        fig = go.Figure(go.Heatmap(z=z, x=xs, y=self.layers, text=self.top_tokens, texttemplate="%{text}",
                                   customdata=hover, hovertemplate="%{customdata}<extra></extra>",
                                   colorscale="Blues", zmin=0, zmax=max(zmax, 1e-6),
                                   colorbar={"title": "p(top)"}))
        fig.update_layout(title=f"{self.kind} lens · {self.model}", xaxis_title="position",
                          yaxis_title="layer", height=max(300, 22 * len(self.layers) + 120))
        fig.update_xaxes(type="category", tickmode="array", tickvals=xs, ticktext=xs)
        fig.update_yaxes(type="category", tickmode="array", tickvals=self.layers, ticktext=self.layers)
        return fig

    def plot_target(self):
        """The target's probability and rank per layer at ``position``."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        fig = make_subplots(specs=[[{"secondary_y": True}]])
        if self.target is not None:
            fig.add_trace(go.Scatter(x=self.layers, y=self.target_prob.tolist(), name="probability"))
            fig.add_trace(go.Scatter(x=self.layers, y=self.target_rank.tolist(), name="rank", line={"dash": "dot"}),
                          secondary_y=True)
            fig.update_yaxes(title_text="rank (1 = top)", type="log", autorange="reversed", secondary_y=True)
        fig.update_yaxes(title_text="probability", range=[0, 1], secondary_y=False)
        fig.update_xaxes(type="category")
        fig.update_layout(title=f"{self.target!r} at {self.position}:{self.tokens[self.position]!r} per layer")
        return fig

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:  # noqa: ANN001
        # notebooks show the figure through plotly's own renderer (its plotly.js ships with Jupyter's extension;
        # an HTML page that loads plotly.js from a CDN is blank offline)
        return self.plot()._repr_mimebundle_(include, exclude)

    def save_figure(self, path: Any, skip_first: bool = False) -> Any:
        """Save ``plot(skip_first)`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        return save_figure(self.plot(skip_first), path)

    def save(self, store=None):
        """Store as a run (kind "lens"); returns the Run."""
        tensors = {"topk_ids": self.topk_ids, "topk_probs": self.topk_probs.float()}
        if self.target is not None:
            tensors.update(target_rank=self.target_rank, target_prob=self.target_prob.float())
        store = store or RunStore()
        return store.save(RunDraft(
            kind="lens", model=self.model, method=self.kind,
            args={"prompt": self.prompt, "kind": self.kind, "target": self.target, "position": self.position,
                  "top_k": int(self.topk_ids.shape[-1])},
            timings={"lens_seconds": self.seconds},
            result={k: v for k, v in self.to_json().items() if k not in ("topk_probs",)},
            tensors=tensors, figures={"lens": self.plot()},
        ))


def layer_labels(model: HookedModel) -> list[str]:
    """Row names of a residual stack: the embedding, then each block's output (L0 = after block 0)."""
    return ["embed"] + [f"L{layer}" for layer in range(model.arch.n_layers)]


def read(model: HookedModel, kind: str, enc: Encoding, resid: Float[torch.Tensor, "layer pos d_model"],
         top_k: int, position: int | None, prompt: str | None) -> LensResult:
    """The LensResult of a (translated) residual stack of one prompt, one layer's logits at a time so a long
    prompt never holds [layer, pos, vocab]."""
    import torch

    started = time.perf_counter()
    n = enc.seq_len
    if position is None:
        position = n - 1
    if isinstance(position, bool) or not -n <= int(position) < n:
        raise RangeError(f"position {position} out of range: the prompt has {n} tokens (valid {-n}..{n - 1})")
    position = int(position) % n
    k = max(1, min(int(top_k), model.arch.d_vocab))
    ids, probs, ranks, tprobs = [], [], [], []
    with torch.no_grad():
        for row in resid:
            logp = torch.log_softmax(model.read_out(row).float(), dim=-1)  # [pos, vocab]
            top = logp.topk(k, dim=-1)
            ids.append(top.indices)
            probs.append(top.values.exp())
            if enc.target_id is not None:
                own = logp[position, enc.target_id]
                ranks.append(int((logp[position] > own).sum()) + 1)
                tprobs.append(float(own.exp()))
    topk_ids, topk_probs = torch.stack(ids), torch.stack(probs)
    check_finite("lens probabilities", topk_probs)
    vocab = {i: model.decode([i]) for i in topk_ids.unique().tolist()}
    tokens = [[[vocab[i] for i in cell] for cell in row] for row in topk_ids.tolist()]
    has_target = enc.target_id is not None
    return LensResult(
        model=model.name, kind=kind, tokens=enc.str_tokens, layers=layer_labels(model), topk_ids=topk_ids,
        topk_probs=topk_probs, topk_tokens=tokens, position=position, target=enc.target,
        target_rank=torch.tensor(ranks) if has_target else None,
        target_prob=torch.tensor(tprobs) if has_target else None, prompt=prompt,
        seconds=time.perf_counter() - started)
