"""Representational geometry: GDV, RSA and low-dimensional projections.

GDV (Schilling et al. 2021): z-score every dimension and halve it, then
GDV = (mean intra-class distance - mean inter-class distance) / sqrt(D), averaged over classes
and class pairs. 0 = no separation; more negative = better separated classes.

RSA: each representation gives a dissimilarity matrix over the same stimuli (1 - Pearson
correlation between example vectors); two representations are compared by the Spearman
correlation of their upper triangles. Works across layers of one model and between models.
"""

from __future__ import annotations

from typing import Any


def _np(X: Any):
    import numpy as np

    return X.detach().float().cpu().numpy() if hasattr(X, "detach") else np.asarray(X, dtype=float)


def gdv(X: Any, labels: Any) -> float:
    import numpy as np
    from scipy.spatial.distance import cdist, pdist

    X = _np(X)
    y = np.asarray(labels)
    sd = X.std(0)
    Z = 0.5 * (X - X.mean(0)) / np.where(sd > 0, sd, 1.0)
    classes = sorted(set(y.tolist()))
    groups = [Z[y == c] for c in classes]
    intra = np.mean([pdist(g).mean() if len(g) > 1 else 0.0 for g in groups])
    inter = np.mean(
        [cdist(groups[i], groups[j]).mean() for i in range(len(groups)) for j in range(i + 1, len(groups))]
    )
    return float((intra - inter) / np.sqrt(X.shape[1]))


def rdm(X: Any):
    """[example, example] dissimilarities: 1 - Pearson correlation of example vectors."""
    import numpy as np

    X = _np(X)
    X = X - X.mean(1, keepdims=True)
    X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    return 1.0 - X @ X.T


def rsa(rdm_a: Any, rdm_b: Any) -> float:
    """Spearman correlation of two RDMs' upper triangles."""
    import numpy as np
    from scipy.stats import spearmanr

    a, b = np.asarray(rdm_a), np.asarray(rdm_b)
    if a.shape != b.shape:
        raise ValueError(f"RDMs over different stimuli: {a.shape} vs {b.shape}")
    iu = np.triu_indices(a.shape[0], 1)
    return float(spearmanr(a[iu], b[iu]).statistic)


def rsa_matrix(acts_a: dict[str, Any], acts_b: dict[str, Any] | None = None):
    """RSA between every pair of representations (layers of one model, or of two models).

    Returns a pandas DataFrame indexed by acts_a's keys with acts_b's keys as columns.
    """
    import pandas as pd

    acts_b = acts_a if acts_b is None else acts_b
    ra = {k: rdm(v) for k, v in acts_a.items()}
    rb = ra if acts_b is acts_a else {k: rdm(v) for k, v in acts_b.items()}
    return pd.DataFrame([[rsa(ra[i], rb[j]) for j in rb] for i in ra], index=list(ra), columns=list(rb))


def project(X: Any, method: str = "pca", dims: int = 2, seed: int = 0):
    """[example, dims] coordinates for plots (PCA, or t-SNE on the top PCA components)."""
    import numpy as np
    from sklearn.decomposition import PCA

    X = _np(X)
    X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    if method == "pca":
        return PCA(n_components=dims, random_state=seed).fit_transform(X)
    if method == "tsne":
        from sklearn.manifold import TSNE

        pre = PCA(n_components=min(50, *X.shape), random_state=seed).fit_transform(X)
        perplexity = float(min(30, max(2, (len(X) - 1) // 3)))
        return TSNE(n_components=dims, random_state=seed, perplexity=perplexity, init="pca").fit_transform(
            pre
        )
    raise ValueError(f"unknown projection {method!r}: pca or tsne")


def projection_figure(X: Any, labels: Any, method: str = "pca", title: str = ""):
    import plotly.express as px

    xy = project(X, method)
    return px.scatter(
        x=xy[:, 0],
        y=xy[:, 1],
        color=[str(v) for v in labels],
        title=title or method,
        labels={"x": f"{method} 1", "y": f"{method} 2", "color": "label"},
        template="plotly_white",
    )
