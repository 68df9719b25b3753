"""Fourier analysis of modular-addition models: embeddings and MLP neurons.

A real orthonormal Fourier basis of Z_p (constant, cos k, sin k for k = 1..(p-1)/2) turns each
neuron's activation table over all (a, b) into 2-D coefficients; frequency pair (k_a, k_b).

- per-neuron concentration: for each neuron, the largest share of its (centred) energy in one
  frequency family S_k = {(k_a, k_b): k_a, k_b in {0, k}}; averaged over active neurons.
  High when neurons are single-frequency units (dense ReLU models).
- subspace concentration: the share of the whole layer's energy in the key-frequency subspace
  {(k_a, k_b): k_a, k_b in K u {0}}, K = the key frequencies of the embedding. High when the
  computation stays on the key frequencies even if individual neurons mix them (GLU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import RangeError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

    from core.models.hooked import HookedModel


def fourier_basis(p: int):
    """(basis [p, p] rows orthonormal, frequency of each row)."""
    import math

    import torch

    x = torch.arange(p, dtype=torch.float64)
    rows, freqs = [torch.ones(p, dtype=torch.float64) / math.sqrt(p)], [0]
    for k in range(1, (p - 1) // 2 + 1):
        for fn in (torch.cos, torch.sin):
            v = fn(2 * math.pi * k * x / p)
            rows.append(v / v.norm())
            freqs.append(k)
    return torch.stack(rows).float(), torch.tensor(freqs)


def embedding_spectrum(model: HookedModel, p: int | None = None) -> Float[torch.Tensor, " freq"]:
    """Share of W_E's energy (over the p number tokens) in each frequency 1..(p-1)/2."""
    import torch

    p = p or _p(model)
    basis, freqs = fourier_basis(p)
    coef = basis @ model.W_E[:p].detach().float()  # [p, d_model]
    energy = coef.pow(2).sum(1)
    per_k = torch.zeros(int(freqs.max()) + 1).index_add_(0, freqs, energy)
    return per_k[1:] / per_k[1:].sum()


def key_frequencies(model: HookedModel, p: int | None = None, share: float = 0.8, max_k: int = 8) -> list[int]:
    """The fewest embedding frequencies holding ``share`` of its energy (at most max_k)."""
    spec = embedding_spectrum(model, p)
    order = spec.argsort(descending=True)
    cum = spec[order].cumsum(0)
    n = min(int((cum < share).sum()) + 1, max_k)
    return sorted(int(k) + 1 for k in order[:n])


def neuron_activations(model: HookedModel, layer: int = 0, p: int | None = None) -> Float[torch.Tensor, "p p neuron"]:
    """MLP hidden activations at the answer position for all p^2 inputs: [p, p, neurons]
    (MoE models: every expert's neurons, weighted by the router, side by side)."""
    import torch

    p = p or _p(model)
    a = torch.arange(p).repeat_interleave(p)
    b = torch.arange(p).repeat(p)
    tokens = torch.stack([a, b, torch.full_like(a, p)], 1).to(model.device)
    if not model.has_mlp(layer):
        raise RangeError(f"{model.name} has no MLP")
    experts = model.n_experts(layer)
    if experts is None:
        names = [f"blocks.{layer}.mlp.hook_post"]
    else:
        names = [f"blocks.{layer}.mlp.experts.{e}.hook_post" for e in range(experts)]
        names.append(f"blocks.{layer}.mlp.hook_router_weights")
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=names)
    if experts is None:
        acts = cache[names[0]][:, -1]
    else:
        w = cache[names[-1]][:, -1]
        acts = torch.cat([cache[n][:, -1] * w[:, e : e + 1] for e, n in enumerate(names[:-1])], 1)
    return acts.reshape(p, p, -1).float()


@dataclass
class FourierResult:
    per_neuron: float
    subspace: float
    key_freqs: list[int]
    neuron_concentration: Float[torch.Tensor, " neuron"]
    neuron_freq: Int[torch.Tensor, " neuron"]  # best frequency
    embedding_spectrum: Float[torch.Tensor, " freq"] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "per_neuron_concentration": self.per_neuron,
            "subspace_concentration": self.subspace,
            "key_freqs": self.key_freqs,
            "embedding_spectrum": None
            if self.embedding_spectrum is None
            else self.embedding_spectrum.tolist(),
        }

    def table(self):
        import pandas as pd

        return pd.DataFrame(
            {
                "neuron": range(len(self.neuron_freq)),
                "freq": self.neuron_freq.tolist(),
                "concentration": self.neuron_concentration.tolist(),
            }
        )

    def plot(self):
        import plotly.express as px

        return px.histogram(
            self.table(),
            x="concentration",
            nbins=20,
            title=f"per-neuron Fourier concentration (mean {self.per_neuron:.2f}, "
            f"subspace {self.subspace:.2f}, key freqs {self.key_freqs})",
        )


def concentration(acts: Float[torch.Tensor, "p p neuron"], key_freqs: list[int],
                  min_energy: float = 1e-3) -> FourierResult:
    """Per-neuron and subspace Fourier concentration of activations [p, p, neurons]."""
    import torch

    p = acts.shape[0]
    basis, freqs = fourier_basis(p)
    coef = torch.einsum("ia,abn,jb->nij", basis, acts, basis)  # [n, p, p]
    energy = coef.pow(2)
    energy[:, 0, 0] = 0  # centred: the mean carries no frequency
    total = energy.sum((1, 2))
    active = total > min_energy * total.max()
    fa, fb = freqs[:, None], freqs[None, :]
    n_k = int(freqs.max())
    fam = torch.stack([((fa == 0) | (fa == k)) & ((fb == 0) | (fb == k)) for k in range(1, n_k + 1)])
    per_k = torch.einsum("nij,kij->nk", energy, fam.float()) / total.clamp(min=1e-12)[:, None]
    best, best_k = per_k.max(1)
    keys = torch.tensor([0] + list(key_freqs))
    in_key = torch.isin(fa, keys) & torch.isin(fb, keys)
    subspace = float((energy * in_key).sum() / total.sum().clamp(min=1e-12))
    return FourierResult(
        float(best[active].mean()),
        subspace,
        list(key_freqs),
        best,
        best_k + 1,
        extra={"active_neurons": int(active.sum())},
    )


def fourier_analysis(model: HookedModel, layer: int = 0, key_freqs: list[int] | None = None) -> FourierResult:
    """Embedding spectrum, key frequencies, per-neuron and subspace concentration of a
    modular-addition model."""
    p = _p(model)
    keys = key_freqs or key_frequencies(model, p)
    res = concentration(neuron_activations(model, layer, p), keys)
    res.embedding_spectrum = embedding_spectrum(model, p)
    return res


def _p(model: HookedModel) -> int:
    task = model.info.get("task", {})
    if task.get("task") != "modadd":
        raise RangeError(f"{model.name} is not a modular-addition model (Fourier tools need task modadd)")
    return int(task["params"]["p"])
