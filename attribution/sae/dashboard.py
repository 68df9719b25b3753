"""Per-feature dashboard data, as users know it from SAE dashboards.

For each feature: density (fraction of tokens where it fires), an activation histogram of its
non-zero activations, top-activating contexts sampled by activation quantile (top, then lower
bins) with the feature's activation on every token of the context (for highlighting), and the
top / bottom logit effects of its decoder direction read through the unembedding W_U.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

QUANTILE_BINS = ((0.9, 1.0, "top 10%"), (0.5, 0.9, "50-90%"), (0.0, 0.5, "bottom 50%"))


@dataclass
class FeatureCard:
    feature: int
    density: float
    max_activation: float
    mean_activation: float  # over tokens where it fires
    histogram: dict[str, list[float]]  # {"edges": [...], "counts": [...]}
    contexts: list[dict[str, Any]] = field(default_factory=list)
    top_logits: list[tuple[str, float]] = field(default_factory=list)
    bottom_logits: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class Dashboard:
    sae: str
    model: str
    hook: str
    n_tokens: int
    features: list[FeatureCard]

    def to_json(self) -> dict[str, Any]:
        return {
            "sae": self.sae,
            "model": self.model,
            "hook": self.hook,
            "n_tokens": self.n_tokens,
            "features": [asdict(f) for f in self.features],
        }

    def table(self):
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "feature": f.feature,
                    "density": f.density,
                    "max_activation": f.max_activation,
                    "top_logits": " ".join(t for t, _ in f.top_logits[:5]),
                }
                for f in self.features
            ]
        )

    def plot(self, feature: int | None = None):
        import plotly.graph_objects as go

        card = next((f for f in self.features if f.feature == feature), self.features[0])
        e = card.histogram["edges"]
        fig = go.Figure(
            go.Bar(x=[(a + b) / 2 for a, b in zip(e[:-1], e[1:], strict=False)], y=card.histogram["counts"])
        )
        fig.update_layout(
            title=f"feature {card.feature}: activation histogram (density {card.density:.4f})",
            xaxis_title="activation",
            yaxis_title="tokens",
            template="plotly_white",
        )
        return fig


def feature_acts(sae: Any, acts, chunk: int = 4096):
    """[token, feature] SAE activations (dense float32)."""
    import torch

    out = []
    with torch.no_grad():
        for s in range(0, acts.shape[0], chunk):
            out.append(sae.encode(acts[s : s + chunk].float()))
    return torch.cat(out)


def logit_effects(model: Any, sae: Any, features: list[int], k: int = 10) -> dict[int, tuple[list, list]]:
    """{feature: (top, bottom)} tokens by decoder direction @ W_U (direct effect, norm ignored)."""
    import torch

    with torch.no_grad():
        eff = sae.W_dec[features].float() @ model.W_U.float()
    out = {}
    for row, f in zip(eff, features, strict=False):
        top, bot = row.topk(k), (-row).topk(k)
        out[f] = (
            [(model.decode([int(i)]), float(v)) for v, i in zip(top.values, top.indices, strict=False)],
            [(model.decode([int(i)]), -float(v)) for v, i in zip(bot.values, bot.indices, strict=False)],
        )
    return out


def _context(model: Any, cache: Any, fa_col, index: dict, tok: int, radius: int) -> dict[str, Any]:
    w, p = (int(v) for v in cache.where[tok])
    ids = cache.windows[w]
    lo, hi = max(0, p - radius), min(int((ids >= 0).sum()), p + 4)
    tokens = [model.decode([int(i)]) for i in ids[lo:hi]]
    acts = [float(fa_col[index[(w, q)]]) if (w, q) in index else 0.0 for q in range(lo, hi)]
    return {"tokens": tokens, "acts": acts, "position": p - lo, "activation": float(fa_col[tok])}


def build_dashboard(
    model: Any,
    sae: Any,
    cache: Any,
    features: list[int] | None = None,
    top: int = 10,
    n_contexts: int = 5,
    radius: int = 12,
    bins: int = 20,
    seed: int = 0,
    sae_name: str = "",
) -> Dashboard:
    """Dashboard cards for ``features`` (default: the ``top`` most frequently firing features)."""
    import torch

    from attribution.sae.train import check_fits

    check_fits(sae, cache.d_in, cache.hook)
    fa = feature_acts(sae, cache.acts)
    fired = (fa > 0).float()
    density = fired.mean(0)
    if features is None:
        features = density.topk(min(top, fa.shape[1])).indices.tolist()
    else:
        from workbench.errors import RangeError

        for f in features:
            if not 0 <= f < fa.shape[1]:
                raise RangeError(f"feature {f} out of range: the SAE has {fa.shape[1]} features")
    index = {(int(w), int(p)): i for i, (w, p) in enumerate(cache.where.tolist())}
    effects = logit_effects(model, sae, features) if hasattr(model, "W_U") else {}
    gen = torch.Generator().manual_seed(seed)
    cards = []
    for f in features:
        col = fa[:, f]
        nz = col[col > 0]
        if len(nz):
            counts, edges = torch.histogram(nz, bins=bins)
            hist = {"edges": edges.tolist(), "counts": counts.tolist()}
        else:
            hist = {"edges": [], "counts": []}
        contexts = []
        if len(nz):
            order = col.argsort(descending=True)[: len(nz)]  # firing tokens, strongest first
            for lo, hi, label in QUANTILE_BINS:
                a, b = (
                    int(len(order) * (1 - hi)),
                    max(int(len(order) * (1 - lo)), int(len(order) * (1 - hi)) + 1),
                )
                pool = order[a:b]
                take = (
                    pool[:n_contexts]
                    if label.startswith("top")
                    else pool[torch.randperm(len(pool), generator=gen)[:n_contexts]]
                )
                for tok in take.tolist():
                    contexts.append({"quantile": label, **_context(model, cache, col, index, tok, radius)})
        top_l, bot_l = effects.get(f, ([], []))
        cards.append(
            FeatureCard(
                f,
                float(density[f]),
                float(col.max()),
                float(nz.mean()) if len(nz) else 0.0,
                hist,
                contexts,
                top_l,
                bot_l,
            )
        )
    return Dashboard(sae_name, cache.model, cache.hook, cache.n_tokens, cards)
