"""Weight spectra: singular values and effective rank of W_QK, W_OV (per head) and W_O (per
layer, all heads stacked), for a model or across its training snapshots.

Effective rank (Roy & Vetterli 2007): exp of the entropy of the normalised singular values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.models.hooked import HookedModel

MATRICES = ("W_QK", "W_OV", "W_O")


def effective_rank(s) -> float:
    p = s / s.sum().clamp(min=1e-12)
    p = p[p > 0]
    return float((-(p * p.log()).sum()).exp())


def _head_matrices(wq, wk, wv, wo):
    """Per-head thin factors: W_QK = W_Q W_K^T and W_OV = W_V W_O; singular values through QR."""
    out = []
    for h in range(wq.shape[0]):
        out.append((h, "W_QK", _svals(wq[h], wk[h].T)))
        out.append((h, "W_OV", _svals(wv[h], wo[h])))
    return out


def _svals(left, right):
    """Singular values of left @ right (left [d, r], right [r, d]) in O(d r^2)."""
    import torch

    ql, rl = torch.linalg.qr(left.float())
    qr, rr = torch.linalg.qr(right.float().T)
    return torch.linalg.svdvals(rl @ rr.T)


def spectra_from_weights(weights: dict[str, Any], n_layers: int, step: int | None = None, top: int = 8):
    """Rows (step, layer, head, matrix, effective_rank, top singular values) from a state dict."""
    import pandas as pd
    import torch

    rows = []
    for layer in range(n_layers):
        pre = f"blocks.{layer}.attn."
        wq, wk, wv, wo = (weights[pre + k].float() for k in ("W_Q", "W_K", "W_V", "W_O"))
        if wk.shape[0] != wq.shape[0]:  # grouped-query weights stored per kv head
            rep = wq.shape[0] // wk.shape[0]
            wk, wv = wk.repeat_interleave(rep, 0), wv.repeat_interleave(rep, 0)
        for h, name, s in _head_matrices(wq, wk, wv, wo):
            rows.append(
                {
                    "step": step,
                    "layer": layer,
                    "head": h,
                    "matrix": name,
                    "effective_rank": effective_rank(s),
                    "top_sv": s[:top].tolist(),
                    "frobenius": float(s.norm()),
                }
            )
        s = torch.linalg.svdvals(wo.reshape(-1, wo.shape[-1]))
        rows.append(
            {
                "step": step,
                "layer": layer,
                "head": -1,
                "matrix": "W_O",
                "effective_rank": effective_rank(s),
                "top_sv": s[:top].tolist(),
                "frobenius": float(s.norm()),
            }
        )
    return pd.DataFrame(rows)


def weight_spectra(model: HookedModel, top: int = 8):
    """Spectra of a loaded HookedModel (kv heads repeated)."""
    weights = {}
    for layer in range(model.arch.n_layers):
        w = model.weights(layer)
        for k in ("W_Q", "W_K", "W_V", "W_O"):
            weights[f"blocks.{layer}.attn.{k}"] = w[k].detach()
    return spectra_from_weights(weights, model.arch.n_layers, None, top)


def plot_over_training(table, value: str = "effective_rank"):
    import plotly.express as px

    t = table.copy()
    t["component"] = t.apply(
        lambda r: f"L{r.layer}" + (f"H{r['head']}" if r["head"] >= 0 else "") + f" {r.matrix}", 1
    )
    return px.line(
        t,
        x="step",
        y=value,
        color="component",
        markers=True,
        title=f"{value} of attention weights over training",
    )
