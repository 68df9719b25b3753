"""Layer-wise linear probes with a control task (Hewitt and Liang 2019).

Examples are split into train and test sets by example (an example's tokens never straddle the
split). The control task gives every word type a random label drawn from the real label
distribution; a probe that scores well on it is memorising word identity, not reading the
property. Selectivity = accuracy - control accuracy. Intervals are percentile bootstraps over
the held-out examples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from attribution.probes.geometry import gdv
from core.errors import DatasetError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float


@dataclass
class LayerProbe:
    layer: int | str
    hook: str
    accuracy: float  # held-out accuracy (R^2 for ridge probes)
    control_accuracy: float
    selectivity: float
    ci_low: float
    ci_high: float
    gdv: float | None = None
    train_accuracy: float | None = None


@dataclass
class ProbeResult:
    model: str
    kind: str  # logistic | ridge
    pooling: str
    n_train: int
    n_test: int
    classes: list[str]
    layers: list[LayerProbe] = field(default_factory=list)

    @property
    def best(self) -> LayerProbe:
        return max(self.layers, key=lambda r: (r.accuracy, r.selectivity))

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "kind": self.kind,
            "pooling": self.pooling,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "classes": self.classes,
            "layers": [asdict(r) for r in self.layers],
            "best_layer": self.best.layer,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeResult:
        """Rebuild from ``to_json`` (a stored run's result)."""
        known = set(LayerProbe.__dataclass_fields__)
        return cls(data["model"], data["kind"], data["pooling"], int(data["n_train"]), int(data["n_test"]),
                   list(data["classes"]), [LayerProbe(**{k: v for k, v in r.items() if k in known})
                                           for r in data["layers"]])

    def table(self):
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.layers])

    def plot(self):
        """Accuracy (with its bootstrap band), control accuracy and selectivity across layers."""
        import plotly.graph_objects as go

        x = [r.layer for r in self.layers]
        fig = go.Figure()
        fig.add_trace(
            go.Scatter(
                x=x + x[::-1],
                y=[r.ci_high for r in self.layers] + [r.ci_low for r in self.layers][::-1],
                fill="toself",
                line={"width": 0},
                opacity=0.2,
                name="95% CI",
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(x=x, y=[r.accuracy for r in self.layers], name="probe accuracy", mode="lines+markers")
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[r.control_accuracy for r in self.layers],
                name="control task",
                mode="lines+markers",
                line={"dash": "dot"},
            )
        )
        fig.add_trace(
            go.Scatter(x=x, y=[r.selectivity for r in self.layers], name="selectivity", mode="lines+markers")
        )
        fig.update_layout(
            title=f"{self.kind} probes on {self.model} ({self.pooling} pooling)",
            xaxis_title="layer",
            yaxis_title="held-out accuracy" if self.kind == "logistic" else "held-out R^2",
            template="plotly_white",
        )
        return fig


def split_examples(labels, test_frac: float = 0.3, seed: int = 0):
    """(train_idx, test_idx): a stratified split by example."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    strat = labels if _is_classification(labels) else None
    try:
        return train_test_split(idx, test_size=test_frac, random_state=seed, stratify=strat)
    except ValueError as exc:
        raise DatasetError(f"cannot split the dataset into train and test: {exc}") from None


def control_labels(words: list[str], labels, seed: int = 0):
    """One random label per word type, drawn from the empirical label distribution."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    types = sorted(set(words))
    drawn = dict(zip(types, rng.choice(labels, size=len(types), replace=True), strict=False))
    return np.array([drawn[w] for w in words])


def _is_classification(labels) -> bool:
    import numpy as np

    return np.asarray(labels).dtype.kind in "iubUO"


def make_probe(kind: str, c: float = 1.0, alpha: float = 1.0):
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))
    if kind == "ridge":
        return make_pipeline(StandardScaler(), Ridge(alpha=alpha))
    raise DatasetError(f"unknown probe kind {kind!r}: logistic or ridge")


def _score(kind: str, y_true, y_pred) -> float:
    import numpy as np

    if kind == "logistic":
        return float(np.mean(y_true == y_pred))
    ss = float(((y_true - y_true.mean()) ** 2).sum()) or 1.0
    return 1.0 - float(((y_true - y_pred) ** 2).sum()) / ss


def bootstrap_ci(
    kind: str, y_true, y_pred, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    import numpy as np

    rng = np.random.default_rng(seed)
    n = len(y_true)
    stats = [_score(kind, y_true[s], y_pred[s]) for s in (rng.integers(0, n, n) for _ in range(n_boot))]
    lo, hi = np.percentile(stats, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def fit_probe(X, y, train, test, kind: str = "logistic", c: float = 1.0, alpha: float = 1.0):
    """(fitted probe, held-out predictions, train score)."""
    probe = make_probe(kind, c, alpha)
    probe.fit(X[train], y[train])
    return probe, probe.predict(X[test]), _score(kind, y[train], probe.predict(X[train]))


def probe_layers(
    acts: dict[str, Float[torch.Tensor, "example _d"]],
    labels,
    words: list[str],
    model: str = "",
    kind: str = "logistic",
    pooling: str = "last",
    test_frac: float = 0.3,
    seed: int = 0,
    n_boot: int = 1000,
    layer_names: dict[str, int | str] | None = None,
    c: float = 1.0,
    with_gdv: bool = True,
    on_hook: Callable[[], None] | None = None,
) -> ProbeResult:
    """Probe every hook's pooled activations {hook: [example, d]} for ``labels``; ``on_hook()`` after each
    hook (a job's progress)."""
    import numpy as np

    y = np.asarray(labels)
    train, test = split_examples(y, test_frac, seed)
    y_ctrl = control_labels(words, y, seed + 1)
    classes = sorted({str(v) for v in y}) if kind == "logistic" else []
    result = ProbeResult(model, kind, pooling, len(train), len(test), classes)
    for hook, X in acts.items():
        X = X.detach().float().cpu().numpy() if hasattr(X, "detach") else np.asarray(X, dtype=float)
        _, pred, train_acc = fit_probe(X, y, train, test, kind, c)
        acc = _score(kind, y[test], pred)
        _, cpred, _ = fit_probe(X, y_ctrl, train, test, kind, c)
        ctrl = _score(kind, y_ctrl[test], cpred)
        lo, hi = bootstrap_ci(kind, y[test], pred, n_boot, seed)
        g = gdv(X, y) if with_gdv and kind == "logistic" else None
        result.layers.append(
            LayerProbe(
                layer=(layer_names or {}).get(hook, hook),
                hook=hook,
                accuracy=acc,
                control_accuracy=ctrl,
                selectivity=acc - ctrl,
                ci_low=lo,
                ci_high=hi,
                gdv=g,
                train_accuracy=train_acc,
            )
        )
        if on_hook is not None:
            on_hook()
    return result
