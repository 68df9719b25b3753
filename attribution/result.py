"""AttributionResult: scores on named axes that display, table and save themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def top_items(scores: Any, axes: tuple[str, ...], tokens: list[str], k: int = 10) -> list[dict[str, Any]]:
    """The k items with the largest |score|, largest first, as {axis: index, "<axis>_str": token, "score"},
    without expanding a big score tensor (edges) into a table of every item."""
    import torch

    s = scores.detach().float().cpu() if isinstance(scores, torch.Tensor) else torch.as_tensor(scores).float()
    flat = s.flatten()
    best = flat.abs().topk(min(k, flat.numel())).indices
    coords = torch.stack(torch.unravel_index(best, s.shape), dim=1).tolist()
    rows = []
    for i, at in zip(best.tolist(), coords, strict=True):
        row: dict[str, Any] = dict(zip(axes, at, strict=True))
        for ax in ("token", "position", "query", "key"):
            if ax in row and row[ax] < len(tokens):
                row[f"{ax}_str"] = tokens[row[ax]]
        row["score"] = float(flat[i])
        rows.append(row)
    return rows


@dataclass
class AttributionResult:
    model: str
    method: str
    level: str
    axes: tuple[str, ...]
    scores: Any  # torch.Tensor laid out on `axes`
    tokens: list[str]
    target: str | None = None
    foil: str | None = None
    target_logit: float | None = None  # logit(target), or logit(target) - logit(foil)
    seconds: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    prompt: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "method": self.method, "level": self.level, "tokens": self.tokens,
            "axes": list(self.axes), "scores": self.scores.detach().float().cpu().tolist(),
            "target": self.target, "foil": self.foil, "target_logit": self.target_logit,
            "seconds": self.seconds, "params": self.params, "prompt": self.prompt,
        }

    def top(self, k: int = 10) -> list[dict[str, Any]]:
        """The k items with the largest |score| (see top_items)."""
        return top_items(self.scores, self.axes, self.tokens, k)

    def table(self):
        """Long-format pandas table: one row per scored item, sorted by score."""
        import itertools

        import pandas as pd

        s = self.scores.detach().float().cpu()
        rows = []
        for idx in itertools.product(*[range(n) for n in s.shape]):
            row = dict(zip(self.axes, idx, strict=False))
            for ax in ("token", "query", "key", "position"):
                if ax in row and row[ax] < len(self.tokens):
                    row[f"{ax}_str"] = self.tokens[row[ax]]
            row["score"] = float(s[idx])
            rows.append(row)
        return pd.DataFrame(rows).sort_values("score", ascending=False, ignore_index=True)

    def plot(self):
        """A plotly figure suited to the level."""
        import plotly.graph_objects as go

        s = self.scores.detach().float().cpu()
        title = f"{self.method} · {self.level} · target {self.target!r}" + (
            f" vs {self.foil!r}" if self.foil else "")
        labels = [f"{i}:{t}" for i, t in enumerate(self.tokens)]
        if self.level == "token":
            fig = go.Figure(go.Bar(x=labels, y=s.tolist()))
        elif self.level == "head":
            fig = go.Figure(go.Heatmap(z=s.sum(-1).tolist(), colorscale="RdBu", zmid=0))
            fig.update_layout(xaxis_title="head", yaxis_title="layer")
        elif self.level == "edge":
            fig = go.Figure(go.Heatmap(z=s.sum((0, 1)).tolist(), x=labels, y=labels, colorscale="RdBu", zmid=0))
            fig.update_layout(xaxis_title="key", yaxis_title="query")
        else:
            fig = go.Figure(go.Heatmap(z=s.abs().amax(-1).tolist(), y=None, x=labels, colorscale="Viridis"))
            fig.update_layout(xaxis_title="position", yaxis_title="layer")
        fig.update_layout(title=title)
        return fig

    def _repr_html_(self) -> str:  # notebooks show the figure
        return self.plot().to_html(include_plotlyjs="cdn", full_html=False)

    def save(self, store=None):
        """Store as a run (kind "attribute"); returns the Run."""
        from workbench.store import RunDraft, RunStore

        store = store or RunStore()
        return store.save(RunDraft(
            kind="attribute", model=self.model, method=self.method,
            args={"level": self.level, "prompt": self.prompt, "target": self.target, "foil": self.foil,
                  **self.params},
            timings={"attribution_seconds": self.seconds},
            result={k: v for k, v in self.to_json().items() if k != "scores"},
            tensors={"scores": self.scores.detach().float()},
            figures={"scores": self.plot()},
        ))
