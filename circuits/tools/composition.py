"""QK and OV circuits and composition scores between heads.

Row-vector convention (TransformerLens): W_QK = W_Q W_K^T [d_model, d_model] (query side
first), W_OV = W_V W_O. The composition score of an earlier head A into a later head B is
||W_OV^A M_B||_F / (||W_OV^A||_F ||M_B||_F) with M_B = W_QK^B (Q-composition), (W_QK^B)^T
(K-composition) or W_OV^B (V-composition) (Elhage et al. 2021). Norms are taken through
the low-rank factors, so the 270 heads of smollm2 stay cheap. Norm weights are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from circuits.tools.common import frame, heatmap
from core.errors import RangeError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

    from core.models.hooked import HookedModel

KINDS = ("q", "k", "v")


def head_factors(model: HookedModel, layer: int) -> dict[str, Any]:
    """W_Q, W_K, W_V [head, d_model, d_head] and W_O [head, d_head, d_model] (kv heads repeated)."""
    w = model.weights(layer)
    return {k: w[k].detach().float() for k in ("W_Q", "W_K", "W_V", "W_O")}


def qk_circuit(
    model: HookedModel, layer: int, head: int, query_tokens: Int[torch.Tensor, " query"] | list[int] | None = None,
    key_tokens: Int[torch.Tensor, " key"] | list[int] | None = None, positional: bool = False
) -> Float[torch.Tensor, "query key"]:
    """Attention scores by token (W_E W_QK W_E^T) [query token, key token], or by position."""
    model.check_head(head)
    f = head_factors(model, layer)
    src = model.W_pos if positional else model.W_E
    if src is None:
        raise RangeError(f"{model.name} has no learned positional embedding")
    q_src = src if query_tokens is None else src[query_tokens]
    k_src = src if key_tokens is None else src[key_tokens]
    return (q_src.float() @ f["W_Q"][head]) @ (k_src.float() @ f["W_K"][head]).T


def ov_circuit(model: HookedModel, layer: int, head: int, tokens: Int[torch.Tensor, " src"] | list[int] | None = None,
               out_tokens: Int[torch.Tensor, " out"] | list[int] | None = None) -> Float[torch.Tensor, "src out"]:
    """What a head writes to the logits when it attends to a token: W_E W_OV W_U [src, out]."""
    model.check_head(head)
    f = head_factors(model, layer)
    src = model.W_E if tokens is None else model.W_E[tokens]
    wu = model.W_U if out_tokens is None else model.W_U[:, out_tokens]
    return ((src.float() @ f["W_V"][head]) @ f["W_O"][head]) @ wu.float()


def _fro(left, right):
    """||left @ right||_F for thin factors, via Gram matrices (never forms the d x d product)."""
    return (((left.T @ left) * (right @ right.T)).sum()).clamp(min=0).sqrt()


@dataclass
class CompositionResult:
    kind: str
    scores: Float[torch.Tensor, "layer_a head_a layer_b head_b"]  # nan where layer_b <= layer_a
    layers: list[int]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "layers": self.layers, "scores": self.scores.nan_to_num(-1).tolist()}

    def table(self):
        t = frame(self.scores, ("layer_a", "head_a", "layer_b", "head_b"), "score")
        t["layer_a"] = [self.layers[i] for i in t["layer_a"]]
        t["layer_b"] = [self.layers[i] for i in t["layer_b"]]
        return t.dropna()

    def plot(self):
        s = self.scores
        flat = s.reshape(s.shape[0] * s.shape[1], s.shape[2] * s.shape[3])
        labels = [f"L{lay}H{h}" for lay in self.layers for h in range(s.shape[1])]
        return heatmap(
            flat.nan_to_num(0), ("head_a", "head_b"), f"{self.kind.upper()}-composition", labels, labels
        )


def composition_scores(model: HookedModel, kind: str = "q", layers: list[int] | None = None) -> CompositionResult:
    """Composition scores for every head pair (A in an earlier layer, B later) among ``layers``."""
    import torch

    if kind not in KINDS:
        raise RangeError(f"composition kind must be q, k or v, not {kind!r}")
    layers = list(range(model.arch.n_layers)) if layers is None else [model.check_layer(x) for x in layers]
    H = model.arch.n_heads
    f = {layer: head_factors(model, layer) for layer in layers}
    out = torch.full((len(layers), H, len(layers), H), float("nan"))
    for i, la in enumerate(layers):
        for j, lb in enumerate(layers):
            if lb <= la:
                continue
            for ha in range(H):
                a_l, a_r = f[la]["W_V"][ha], f[la]["W_O"][ha]  # W_OV^A = a_l @ a_r
                na = _fro(a_l, a_r)
                for hb in range(H):
                    if kind == "q":
                        b_l, b_r = f[lb]["W_Q"][hb], f[lb]["W_K"][hb].T
                    elif kind == "k":
                        b_l, b_r = f[lb]["W_K"][hb], f[lb]["W_Q"][hb].T
                    else:
                        b_l, b_r = f[lb]["W_V"][hb], f[lb]["W_O"][hb]
                    nb = _fro(b_l, b_r)
                    # ||a_l (a_r b_l) b_r||_F through the thin factors
                    nab = _fro(a_l @ (a_r @ b_l), b_r)
                    out[i, ha, j, hb] = nab / (na * nb + 1e-12)
    return CompositionResult(kind, out, layers)
