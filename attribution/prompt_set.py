"""Attribution over a prompt set: one AttributionResult per prompt, saved together as one run.

DPA runs ``batch_size`` prompts through each forward and top-down pass (``dpa_batch``: right-padded,
each prompt's scores exactly its own), which on a CPU shares every weight read among the batch; the
other methods run one prompt at a time. ``seconds`` is the attribution time alone (no evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attribution import LEVEL_AXES, get_method, result_for, run_encoded
from attribution.methods import prompt_level
from attribution.result import AttributionResult
from core.checks import reading
from core.errors import MethodError, RunStoreError
from core.prompt_files import encode_rows
from core.store import RunDraft, RunStore


@dataclass
class AttributionSet:
    model: str
    method: str
    level: str
    results: list[AttributionResult]
    seconds: float  # attribution time for the whole set
    batch_size: int = 1
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds_per_prompt(self) -> float:
        return self.seconds / max(1, len(self.results))

    def top(self, i: int, k: int = 5) -> list[dict[str, Any]]:
        """Prompt i's k items with the largest |score| (AttributionResult.top)."""
        return self.results[i].top(k)

    def table(self):
        """One row per prompt: the prompt, its target logit, seconds and top item."""
        import pandas as pd

        rows = []
        for i, r in enumerate(self.results):
            best = self.top(i, 1)[0]
            rows.append({"prompt": r.prompt, "target": r.target, "foil": r.foil, "n_tokens": len(r.tokens),
                         "target_logit": r.target_logit, "seconds": r.seconds,
                         "top_item": ", ".join(f"{k}={v}" for k, v in best.items() if k != "score"),
                         "top_score": best["score"]})
        return pd.DataFrame(rows)

    def to_json(self, top: int = 5) -> dict[str, Any]:
        return {"model": self.model, "method": self.method, "level": self.level,
                "axes": list(LEVEL_AXES[self.level]), "n_prompts": len(self.results),
                "batch_size": self.batch_size, "seconds": self.seconds,
                "seconds_per_prompt": self.seconds_per_prompt, "params": self.params,
                "prompts": [{"prompt": r.prompt, "target": r.target, "foil": r.foil, "tokens": r.tokens,
                             "target_logit": r.target_logit, "seconds": r.seconds, "top": self.top(i, top)}
                            for i, r in enumerate(self.results)]}

    def plot(self):
        """Mean over prompts of what every prompt shares: layer x head (head, qk), per-layer neuron mass
        (neuron), or the score by distance from the prediction (token)."""
        import plotly.graph_objects as go
        import torch

        s = [r.scores.detach().float().cpu() for r in self.results]
        title = f"{self.method} · {self.level} · mean over {len(s)} prompts"
        if self.level in ("head", "qk"):
            dims = (-1,) if self.level == "head" else (-1, -2)
            z = torch.stack([x.sum(dims) for x in s]).mean(0)
            fig = go.Figure(go.Heatmap(z=z.tolist(), colorscale="RdBu", zmid=0))
            fig.update_layout(xaxis_title="head", yaxis_title="layer")
        elif self.level == "neuron":
            z = torch.stack([x.abs().sum((1, 2)) for x in s]).mean(0)
            fig = go.Figure(go.Bar(x=list(range(len(z))), y=z.tolist()))
            fig.update_layout(xaxis_title="layer", yaxis_title="sum of |score|")
        else:
            longest = max(len(x) for x in s)
            by_offset = [[float(x[-1 - d]) for x in s if d < len(x)] for d in range(longest)]
            fig = go.Figure(go.Bar(x=[-d for d in range(longest)], y=[sum(v) / len(v) for v in by_offset]))
            fig.update_layout(xaxis_title="position relative to the last token", yaxis_title="mean score")
        fig.update_layout(title=title)
        return fig

    @classmethod
    def from_run(cls, run: Any) -> AttributionSet:
        """The set back from its run (``save``): each prompt's result from the run's summary and its tensor
        (a damaged run is a RunStoreError, core/checks.py)."""
        data, tensors = run.result(), run.tensors()
        with reading(f"run {run.id}", RunStoreError):
            args = dict(run.meta.get("args") or {})
            head = {"model": data["model"], "method": data["method"], "level": data["level"],
                    "axes": data["axes"], "params": data.get("params") or {}}
            results = [AttributionResult.from_json({**head, **p}, scores=tensors[f"scores.{i}"])
                       for i, p in enumerate(data["prompts"])]
            return cls(model=data["model"], method=data["method"], level=prompt_level(data["level"]),
                       results=results,
                       seconds=float(data["seconds"]),
                       batch_size=int(args.get("batch_size", data.get("batch_size", 1))),
                       params=data.get("params") or {})

    def save(self, store=None):
        """One run (kind "attribute_set"): scores of prompt i under tensor "scores.i", the per-prompt table."""
        store = store or RunStore()
        result = self.to_json()
        return store.save(RunDraft(
            kind="attribute_set", model=self.model, method=self.method,
            args={"level": self.level, "batch_size": self.batch_size, **self.params},
            timings={"attribution_seconds": self.seconds, "seconds_per_prompt": self.seconds_per_prompt},
            result=result, tensors={f"scores.{i}": r.scores.detach().float() for i, r in enumerate(self.results)},
            tables={"prompts": self.table()}, figures={"mean": self.plot()},
        ))


def attribute_set(model: Any, rows: list[dict[str, Any]], method: str = "dpa", level: str = "token",
                  use_foil: bool = True, batch_size: int = 16, on_step: Callable[[int], None] | None = None,
                  **params: Any) -> AttributionSet:
    """Attribute every row ({"prompt", "target", "foil"?}); on_step(n) after each n prompts are done."""
    level = prompt_level(level)  # "edge": the query-key level's old name
    spec, fn = get_method(method, level)
    if int(batch_size) < 1:
        raise MethodError(f"batch_size must be at least 1 (got {batch_size})")
    if not rows:
        raise MethodError("no prompts to attribute")
    encs = encode_rows(model, rows, use_foil)
    results: list[AttributionResult] = []
    if spec.name == "dpa":
        from attribution.dpa import dpa_batch

        traces = dpa_batch(model, encs, levels=(level,), batch_size=int(batch_size), on_step=on_step, **params)
        for row, enc, trace in zip(rows, encs, traces, strict=True):
            results.append(result_for(model, "dpa", level, enc, trace[level], trace.seconds, trace.target_logit,
                                      params, row["prompt"]))
    else:
        for row, enc in zip(rows, encs, strict=True):
            results.append(run_encoded(model, spec.name, fn, enc, level, params, row["prompt"]))
            if on_step:
                on_step(1)
    seconds = sum(r.seconds for r in results)
    return AttributionSet(model=model.name, method=spec.name, level=level, results=results, seconds=seconds,
                          batch_size=int(batch_size) if spec.name == "dpa" else 1, params=params)


__all__ = ["AttributionSet", "attribute_set"]
