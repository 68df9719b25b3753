"""Direct logit attribution (DLA) of the target-minus-foil logit difference at one position, per component,
per head and along the accumulated residual stream, through TransformerLens' ActivationCache as its authors
intend (``decompose_resid``, ``stack_head_results``, ``accumulated_resid``, each put through
``apply_ln_to_stack``, which divides by the final norm's cached scale at that position).

The final norm is frozen at its cached scale, so the readout is linear in the residual: each component's
contribution is (x_c / scale [centred for LayerNorm]) . (gamma * (W_U[:, target] - W_U[:, foil])). The
components of ``decompose_resid`` sum to the final residual, so their contributions sum to the logit difference
minus ``offset`` = the final LayerNorm bias and unembedding bias terms (0 for an RMSNorm model without b_U).
Heads' contributions exclude the attention output bias b_O (each layer's "L{l}.attn" component includes it).

The one DLA of the workbench: ``workbench dla``, ``wb.dla``, the method table's ``dla`` (head level), the
Attribution page and, through ``circuits.tools.dla`` (a batch of prompts in circuits' forms), the circuit tools
and the Circuits page all read this module's DLAResult.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from attribution import encode_at
from attribution.methods import Scored
from core.errors import MethodError
from core.figures import save_figure
from core.models.hooked import require
from core.store import RunDraft, RunStore

if TYPE_CHECKING:
    from jaxtyping import Float, Int

    from core.models.hooked import HookedModel
    from core.models.tokens import Encoding


@dataclass
class DLAResult:
    """Direct logit attribution of logit(target) - logit(foil) (logit(target) without a foil) at ``position``.

    components / component_scores: the residual's parts ("embed", "pos_embed" for learned positions, then
      "L{l}.attn" and "L{l}.mlp" for every layer) and each one's direct contribution; they sum to
      logit_diff - offset.
    head_scores: [layer, head] each head's direct contribution (without b_O).
    accumulated / accumulated_scores: the residual stream summed up to each point ("L{l}.pre", "L{l}.mid",
      ..., "final") read out with the final norm's scale at ``position``: the logit difference built so far.
    logit_diff: the model's own logit(target) - logit(foil) at ``position``.
    offset: the final LayerNorm bias and unembedding bias terms (not attributable to a component).
    per_prompt: [prompt, component] each prompt's component scores when a batch was explained (dla_tokens);
      the fields above are then the means over the prompts, tokens are the first prompt's, and target / foil
      name the one token or count them. None for one prompt.
    """

    model: str
    tokens: list[str]
    position: int
    target: str
    foil: str | None
    components: list[str]
    component_scores: Float[torch.Tensor, " component"]
    head_scores: Float[torch.Tensor, "layer head"]
    accumulated: list[str]
    accumulated_scores: Float[torch.Tensor, " point"]
    logit_diff: float
    offset: float
    prompt: str | None = None
    seconds: float = 0.0
    per_prompt: Float[torch.Tensor, "prompt component"] | None = None

    def head(self, layer: int, head: int) -> float:
        """One head's direct contribution (without b_O)."""
        return float(self.head_scores[layer, head])

    def component(self, name: str) -> float | None:
        """One component's direct contribution ("embed", "L3.attn", "L3.mlp", ...), None if the model has none."""
        return float(self.component_scores[self.components.index(name)]) if name in self.components else None

    @property
    def residual_error(self) -> float:
        """sum(component_scores) + offset - logit_diff: float noise when the decomposition is complete."""
        return float(self.component_scores.double().sum()) + self.offset - self.logit_diff

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "prompt": self.prompt, "tokens": self.tokens, "position": self.position,
                "target": self.target, "foil": self.foil, "logit_diff": self.logit_diff, "offset": self.offset,
                "components": self.components, "component_scores": self.component_scores.tolist(),
                "head_scores": self.head_scores.tolist(), "accumulated": self.accumulated,
                "accumulated_scores": self.accumulated_scores.tolist(), "seconds": self.seconds}

    def table(self):
        """pandas: one row per component, sorted by |contribution|."""
        import pandas as pd

        df = pd.DataFrame({"component": self.components, "contribution": self.component_scores.tolist()})
        return df.reindex(df["contribution"].abs().sort_values(ascending=False).index).reset_index(drop=True)

    def plot(self):
        """Three panels: per-component bars, the per-head heat map, the accumulated residual's logit difference."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        metric = f"{self.target!r}" + (f" - {self.foil!r}" if self.foil else "")
        fig = make_subplots(rows=3, cols=1, subplot_titles=(
            "direct contribution per component", "direct contribution per head", "accumulated residual stream"),
            vertical_spacing=0.09)
        fig.add_trace(go.Bar(x=self.components, y=self.component_scores.tolist(), name="component"), row=1, col=1)
        n_layers, n_heads = self.head_scores.shape
        fig.add_trace(go.Heatmap(z=self.head_scores.tolist(), x=[f"H{h}" for h in range(n_heads)],
                                 y=[f"L{l}" for l in range(n_layers)], colorscale="RdBu", zmid=0,
                                 colorbar={"len": 0.3, "y": 0.5, "title": {"text": "direct<br>contribution"}}),
                      row=2, col=1)
        fig.add_trace(go.Scatter(x=self.accumulated, y=self.accumulated_scores.tolist(), mode="lines+markers",
                                 name="accumulated"), row=3, col=1)
        for row in (1, 2, 3):
            fig.update_xaxes(type="category", row=row, col=1)
        fig.update_yaxes(type="category", row=2, col=1)
        fig.update_layout(title=f"DLA of {metric} at {self.position}:{self.tokens[self.position]!r}",
                          height=420 + 14 * n_layers + 300, showlegend=False)
        return fig

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:  # noqa: ANN001
        # notebooks show the figure through plotly's own renderer (its plotly.js ships with Jupyter's extension;
        # an HTML page that loads plotly.js from a CDN is blank offline)
        return self.plot()._repr_mimebundle_(include, exclude)

    def save_figure(self, path: Any) -> Any:
        """Save ``plot()`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        return save_figure(self.plot(), path)

    def save(self, store=None):
        """Store as a run (kind "dla"); returns the Run."""
        store = store or RunStore()
        return store.save(RunDraft(
            kind="dla", model=self.model, method="dla",
            args={"prompt": self.prompt, "target": self.target, "foil": self.foil, "position": self.position},
            timings={"dla_seconds": self.seconds},
            result={k: v for k, v in self.to_json().items() if k not in ("head_scores",)},
            tensors={"component_scores": self.component_scores.float(), "head_scores": self.head_scores.float(),
                     "accumulated_scores": self.accumulated_scores.float()},
            figures={"dla": self.plot()},
        ))


def direct_logit_attribution(model: HookedModel, prompt: str | list[int], target: str | int | None = None,
                             foil: str | int | None = None, position: int | None = None) -> DLAResult:
    """DLA of the target (minus foil) logit at ``position`` (default the last; negative counts from the end;
    without a target, a position before the last explains the prompt's next token there, the last position
    the model's top prediction). See DLAResult for the fields."""
    import time

    started = time.perf_counter()
    enc = encode_at(model, prompt, target, foil, position)
    res = dla_encoded(model, enc)
    res.prompt = prompt if isinstance(prompt, str) else None
    res.seconds = time.perf_counter() - started
    return res


def _direction(model: HookedModel, target_id: int | None, foil_id: int | None,
               logits_at: torch.Tensor) -> tuple[torch.Tensor, float, int]:
    """The readout direction gamma * (W_U[:, t] - W_U[:, f]) in the normalised residual, the offset it leaves
    (final LayerNorm bias and b_U terms) and the target id (the top prediction when none is given)."""
    t = target_id if target_id is not None else int(logits_at.argmax())
    W_U, b_U = model.W_U, model.b_U
    u = W_U[:, t] - (W_U[:, foil_id] if foil_id is not None else 0.0)
    offset = 0.0
    if b_U is not None:
        offset += float(b_U[t] - (b_U[foil_id] if foil_id is not None else 0.0))
    beta = model.final_norm_bias()
    if beta is not None:
        offset += float(beta @ u)
    gamma = model.final_norm_weight()
    return (u * gamma if gamma is not None else u), offset, t


def dla_encoded(model: HookedModel, enc: Encoding) -> DLAResult:
    """DLA on an encoding already made (Encoding.position: the explained position)."""
    res = dla_tokens(model, enc.tokens, None if enc.target_id is None else [enc.target_id],
                     None if enc.foil_id is None else [enc.foil_id], enc.query)
    res.tokens = enc.str_tokens
    if enc.target is not None:
        res.target = enc.target
    res.foil = enc.foil
    return res


def dla_tokens(model: HookedModel, tokens: Int[torch.Tensor, "batch pos"], targets: Sequence[int] | None,
               foils: Sequence[int] | None, position: int) -> DLAResult:
    """DLA of each prompt of a batch (one forward with a cache) at ``position`` (negative counts from the end);
    targets / foils: one id per prompt (targets None: each prompt's top prediction). With one prompt the
    result is that prompt's; with several, the scores are their means and ``per_prompt`` holds each one's
    component scores (circuits.tools.dla reads circuits' prompt forms into this call)."""
    require(model, "dla")  # it reads a TransformerLens ActivationCache
    if getattr(model, "W_U", None) is None or model.kind == "vit":
        raise MethodError(f"{model.name} has no unembedding: direct logit attribution needs one")
    n = int(tokens.shape[0])
    p = position % int(tokens.shape[1])
    a = model.arch
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        parts, part_labels = cache.decompose_resid(layer=None, mode="all", apply_ln=True, pos_slice=p,
                                                   incl_embeds=True, return_labels=True)  # [comp, batch, d]
        heads, _ = cache.stack_head_results(layer=-1, pos_slice=p, apply_ln=False, return_labels=True)
        heads = cache.apply_ln_to_stack(_through_post_norms(model, cache, heads, p), layer=-1, pos_slice=p)
        # an attention-only model (the toys) has no resid_mid: its residual between blocks is all there is
        has_mid = not a.parallel and "blocks.0.hook_resid_mid" in cache.cache_dict
        points, point_labels = cache.accumulated_resid(layer=None, incl_mid=has_mid, apply_ln=False,
                                                       pos_slice=p, return_labels=True)
        points = cache.apply_ln_to_stack(points, layer=-1, pos_slice=p)  # every point at the final scale
        comps, head_rows, accs, diffs, offsets, t_ids = [], [], [], [], [], []
        for b in range(n):  # prompt by prompt: one prompt's numbers are those of a batch of one
            f_id = None if foils is None else int(foils[b])
            direction, offset, t_id = _direction(model, None if targets is None else int(targets[b]), f_id,
                                                 logits[b, p])
            comps.append(parts[:, b].float() @ direction.float())
            head_rows.append((heads[:, b].float() @ direction.float()).view(a.n_layers, a.n_heads))
            accs.append((points[:, b].float() @ direction.float()) + offset)
            diffs.append(float(logits[b, p, t_id] - (logits[b, p, f_id] if f_id is not None else 0.0)))
            offsets.append(offset)
            t_ids.append(t_id)
    one = n == 1
    names = sorted({model.decode([t]) for t in t_ids})
    f_names = sorted({model.decode([int(f)]) for f in foils}) if foils is not None else []
    return DLAResult(
        model=model.name, tokens=model.to_str_tokens(tokens[0]), position=p,
        target=names[0] if len(names) == 1 else f"{len(names)} targets",
        foil=None if not f_names else f_names[0] if len(f_names) == 1 else f"{len(f_names)} foils",
        components=[_name(x) for x in part_labels],
        component_scores=comps[0] if one else torch.stack(comps).mean(0),
        head_scores=head_rows[0] if one else torch.stack(head_rows).mean(0),
        accumulated=[_name(x) for x in point_labels],
        accumulated_scores=accs[0] if one else torch.stack(accs).mean(0),
        logit_diff=diffs[0] if one else sum(diffs) / n, offset=offsets[0] if one else sum(offsets) / n,
        per_prompt=None if one else torch.stack(comps))


def _through_post_norms(model: HookedModel, cache: Any, heads: torch.Tensor, p: int) -> torch.Tensor:
    """Each head's write [layer * head, 1, d] as the residual sees it: through its layer's attention post-norm
    (Gemma 2/3, OLMo-2), frozen at position p (TransformerLens' stack_head_results stops at W_O)."""
    H = model.arch.n_heads
    out = heads.clone()
    for layer in range(model.arch.n_layers):
        site = model.norm_sites(layer)["attn_post"]
        if site is not None:
            factor = site.w / cache[site.scale_hook][0, p]  # [d]
            out[layer * H:(layer + 1) * H] = out[layer * H:(layer + 1) * H] * factor
    return out


def _name(label: str) -> str:
    """TransformerLens labels ("3_attn_out", "3_mlp_out", "5_pre", "5_mid", "final_post") in workbench form."""
    if label in ("embed", "pos_embed"):
        return label
    if label == "final_post":
        return "final"
    layer, _, rest = label.partition("_")
    return f"L{layer}." + {"attn_out": "attn", "mlp_out": "mlp"}.get(rest, rest)


def dla_scores(model: HookedModel, enc: Encoding, level: str) -> Any:
    """Method-table entry (head level): each head's direct contribution at the explained query position, zero
    at the other query positions, laid out [layer, head, query]."""
    if level != "head":
        raise MethodError(f"dla has no {level} level; it has: head")
    res = dla_encoded(model, enc)
    scores = torch.zeros(model.arch.n_layers, model.arch.n_heads, enc.seq_len)
    scores[..., res.position] = res.head_scores
    return Scored(scores, target_logit=res.logit_diff)
