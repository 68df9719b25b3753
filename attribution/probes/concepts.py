"""Concept vectors three ways, their agreement per layer, and steering with them.

- class-mean: mean activation of the concept class minus that of the other examples;
- probe: the logistic probe's weight direction, mapped back from standardised to activation units;
- SAE: decoder directions of the SAE features whose mean activation differs most between the
  classes, weighted by that difference (only at hooks with an SAE).

Steering adds ``scale * |typical activation| * unit(vector)`` at a hook, at every position, and
measures how the model's next-token logits move toward the concept: the projection of the logit
change onto the unit direction (mean logits of the concept class - mean logits of the others).
A random vector of the same norm is the baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from attribution.probes.probe import make_probe
from core.errors import DatasetError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

METHODS = ("mean", "probe", "sae")


def _split(X, labels, positive: str):
    import numpy as np

    y = np.asarray(labels) == positive
    if y.all() or not y.any():
        raise DatasetError(f"concept class {positive!r} needs examples in and out of the class")
    return X[y], X[~y]


def class_mean_vector(X: Float[torch.Tensor, "example d"], labels, positive: str) -> Float[torch.Tensor, " d"]:
    pos, neg = _split(X, labels, positive)
    return pos.mean(0) - neg.mean(0)


def probe_vector(X: Float[torch.Tensor, "example d"], labels, positive: str,
                 c: float = 1.0) -> Float[torch.Tensor, " d"]:
    import numpy as np
    import torch

    y = (np.asarray(labels) == positive).astype(int)
    pipe = make_probe("logistic", c).fit(X.numpy(), y)
    scaler, clf = pipe[0], pipe[-1]
    w = clf.coef_[0] / np.where(scaler.scale_ > 0, scaler.scale_, 1.0)  # d logit / d activation
    return torch.tensor(w, dtype=torch.float32)


def sae_vector(X: Float[torch.Tensor, "example d"], labels, positive: str, sae: Any,
               top: int = 8) -> tuple[Float[torch.Tensor, " d_out"], list[int]]:
    """Sum of the decoder rows of the ``top`` features most raised by the concept, weighted."""
    import torch

    with torch.no_grad():
        f = sae.encode(X.to(sae.W_dec.dtype))
    fp, fn = _split(f, labels, positive)
    diff = fp.mean(0) - fn.mean(0)
    idx = diff.topk(min(top, diff.numel())).indices
    vec = (diff[idx, None] * sae.W_dec.detach()[idx]).sum(0)
    return vec.float(), idx.tolist()


def cosine(a, b) -> float | None:
    import torch

    if a is None or b is None:
        return None
    return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


@dataclass
class LayerConcepts:
    layer: int | str
    hook: str
    cos_mean_probe: float
    cos_mean_sae: float | None
    cos_probe_sae: float | None
    sae_features: list[int] = field(default_factory=list)
    steering: dict[str, float] = field(default_factory=dict)  # method -> logit movement toward concept


@dataclass
class ConceptResult:
    model: str
    concept: str
    other: str
    pooling: str
    scale: float
    layers: list[LayerConcepts] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "concept": self.concept,
            "other": self.other,
            "pooling": self.pooling,
            "scale": self.scale,
            "layers": [asdict(r) for r in self.layers],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConceptResult:
        """Rebuild from ``to_json`` (a stored run's result)."""
        known = set(LayerConcepts.__dataclass_fields__)
        return cls(data["model"], data["concept"], data["other"], data["pooling"], float(data["scale"]),
                   [LayerConcepts(**{k: v for k, v in r.items() if k in known}) for r in data["layers"]])

    def table(self):
        import pandas as pd

        rows = []
        for r in self.layers:
            row = {k: v for k, v in asdict(r).items() if k not in ("steering", "sae_features")}
            row.update({f"steer_{k}": v for k, v in r.steering.items()})
            rows.append(row)
        return pd.DataFrame(rows)

    def plot(self):
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        x = [r.layer for r in self.layers]
        fig = make_subplots(
            rows=1,
            cols=2,
            subplot_titles=(
                "cosine similarity of concept vectors",
                "steering: logit movement toward concept",
            ),
        )
        for key, name in (
            ("cos_mean_probe", "mean vs probe"),
            ("cos_mean_sae", "mean vs SAE"),
            ("cos_probe_sae", "probe vs SAE"),
        ):
            ys = [getattr(r, key) for r in self.layers]
            if any(v is not None for v in ys):
                fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines+markers"), 1, 1)
        steered = [r for r in self.layers if r.steering]
        for method in sorted({m for r in steered for m in r.steering}):
            fig.add_trace(
                go.Scatter(
                    x=[r.layer for r in steered],
                    y=[r.steering.get(method) for r in steered],
                    name=f"steer {method}",
                    mode="lines+markers",
                ),
                1,
                2,
            )
        fig.update_layout(template="plotly_white", title=f"{self.concept} concept on {self.model}")
        return fig


def concept_direction_in_logits(model: Any, texts: list[str], labels, positive: str, batch_size: int = 16
                                ) -> tuple[Float[torch.Tensor, " vocab"], Float[torch.Tensor, "text vocab"]]:
    """Unit vector over the vocabulary: mean next-token logits of the concept class minus the others."""
    logits = last_logits(model, texts, batch_size=batch_size)
    d = class_mean_vector(logits, labels, positive)
    return d / d.norm().clamp_min(1e-12), logits


def last_logits(model: Any, texts: list[str], hook: str | None = None, vector: Float[torch.Tensor, " d"] | None = None,
                batch_size: int = 16) -> Float[torch.Tensor, "text vocab"]:
    """Next-token logits at each text's last position, optionally with ``vector`` added at ``hook``."""
    import torch

    toks = [model.to_tokens(t)[0] for t in texts]
    out = [None] * len(toks)
    order = sorted(range(len(toks)), key=lambda i: len(toks[i]))
    hooks = []
    if hook is not None:

        def add(act, hook):  # noqa: ARG001 - TransformerLens passes the hook point
            return act + vector.to(act.dtype).to(act.device)

        hooks = [(hook, add)]
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        width = max(len(toks[i]) for i in idx)
        batch = torch.stack([torch.cat([toks[i], toks[i][-1:].repeat(width - len(toks[i]))]) for i in idx])
        with torch.no_grad():
            logits = model.run_with_hooks(batch.to(model.device), fwd_hooks=hooks)
        for row, i in enumerate(idx):
            out[i] = logits[row, len(toks[i]) - 1].float().cpu()
    return torch.stack(out)


def steering_effect(
    model: Any, hook: str, vector: Float[torch.Tensor, " d"], texts: list[str],
    direction: Float[torch.Tensor, " vocab"], clean: Float[torch.Tensor, "text vocab"], norm: float, scale: float
) -> float:
    """Mean projection of the logit change onto the concept's logit direction."""
    v = vector / vector.norm().clamp_min(1e-12) * norm * scale
    steered = last_logits(model, texts, hook, v)
    return float(((steered - clean) @ direction).mean())


def concept_vectors(
    model: Any,
    acts: dict[str, Float[torch.Tensor, "example _d"]],
    labels,
    positive: str,
    texts: list[str],
    saes: dict[str, Any] | None = None,
    pooling: str = "last",
    steer_hooks: list[str] | None = None,
    scale: float = 1.0,
    n_steer: int = 32,
    seed: int = 0,
    layer_names: dict[str, Any] | None = None,
    on_hook: Callable[[], None] | None = None,
) -> ConceptResult:
    """Vectors at every hook in ``acts``; steering at ``steer_hooks`` on up to ``n_steer`` texts
    from outside the concept class, against a random vector of the same norm. ``on_hook()`` after each
    hook (a job's progress)."""
    import numpy as np
    import torch

    labels = np.asarray(labels)
    others = sorted(set(labels.tolist()) - {positive})
    result = ConceptResult(model.name, positive, others[0] if len(others) == 1 else "rest", pooling, scale)
    direction, clean_all = concept_direction_in_logits(model, texts, labels, positive)
    neg_idx = [i for i in np.flatnonzero(labels != positive)][:n_steer]
    steer_texts = [texts[i] for i in neg_idx]
    clean = clean_all[neg_idx]
    gen = torch.Generator().manual_seed(seed)
    for hook, X in acts.items():
        X = X.float()
        vecs = {"mean": class_mean_vector(X, labels, positive), "probe": probe_vector(X, labels, positive)}
        feats: list[int] = []
        if saes and hook in saes:
            vecs["sae"], feats = sae_vector(X, labels, positive, saes[hook])
        row = LayerConcepts(
            (layer_names or {}).get(hook, hook),
            hook,
            cosine(vecs["mean"], vecs["probe"]),
            cosine(vecs["mean"], vecs.get("sae")),
            cosine(vecs["probe"], vecs.get("sae")),
            feats,
        )
        if steer_hooks and hook in steer_hooks:
            norm = float(X.norm(dim=1).median())
            for name, vec in vecs.items():
                row.steering[name] = steering_effect(
                    model, hook, vec, steer_texts, direction, clean, norm, scale
                )
            rand = torch.randn(X.shape[1], generator=gen)
            row.steering["random"] = steering_effect(
                model, hook, rand, steer_texts, direction, clean, norm, scale
            )
        result.layers.append(row)
        if on_hook is not None:
            on_hook()
    return result
