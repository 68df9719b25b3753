"""Probes and concept vectors as one call each: a model, a labelled set and parameters in, a result out that
saves itself as the run ``workbench probe`` / ``workbench concepts`` store (``.save(store) -> Run``).

Both take an optional progress callback (``on_total(n)`` once, then ``on_step(k)``): a job's report. The
items are example passes: every example once for its activations, then once more for each later phase
(probes; concept vectors and steering), that phase's share spread evenly over its hooks, so the count is
known from the set's size alone and the bar moves through every phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attribution.probes.activations import LabeledSet, parse_layers, pooled_activations
from attribution.probes.concepts import ConceptResult, concept_vectors
from attribution.probes.geometry import projection_figure, rsa_matrix
from attribution.probes.probe import ProbeResult, probe_layers
from attribution.sae.train import check_fits, load_sae
from core.checks import reading
from core.errors import ModelFileError, RunStoreError
from core.models.zoo import DATA_DIR
from core.store import RunDraft

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

Step = Callable[[int], None]


def probe_phases(concept: str | None) -> int:
    """Example passes of ``run_probe``: activations, probes, and concept vectors when asked for."""
    return 3 if concept else 2


CONCEPT_PHASES = 2  # activations, then concept vectors and steering


def _spread(n: int, parts: int, on_step: Step | None) -> Callable[[], None]:
    """A callback for the end of each of ``parts`` pieces that together step ``n`` items."""
    state = {"k": 0}

    def done() -> None:
        k = state["k"] = state["k"] + 1
        if on_step is not None and parts:
            on_step(round(n * k / parts) - round(n * (k - 1) / parts))

    return done


def probe_hooks(model: Any, hook: str | None, layers: str) -> tuple[list[str], dict[str, int | str]]:
    """The hooks to probe (``hook``, comma-separated, else the residual stream after ``layers``) and the layer
    label of each (an int for blocks.{l}.*)."""
    if hook:
        names = [model.check_hook(h.strip()) for h in hook.split(",")]
    else:
        names = [f"blocks.{i}.hook_resid_post" for i in parse_layers(layers, model.arch.n_layers)]
    labels: dict[str, int | str] = {}
    for h in names:
        parts = h.split(".")
        labels[h] = int(parts[1]) if parts[0] == "blocks" and parts[1].isdigit() else h
    return names, labels


@dataclass
class ProbeRun:
    """Layer-wise probes (and, with a concept, concept vectors from the same activations) on one set."""

    probe: ProbeResult
    acts: dict[str, Float[torch.Tensor, "example _d"]]  # pooled activations by hook (d: the hook's width)
    labels: list[str]
    hooks: list[str]
    names: dict[str, int | str]
    dataset: str | None
    args: dict[str, Any]  # pooling, test_frac, seed (and n_boot, concept, n where set)
    timings: dict[str, float] = field(default_factory=dict)
    concepts: ConceptResult | None = None
    keep_activations: bool = False  # store every hook's activations (the app's PCA and steering read them)

    def to_json(self) -> dict[str, Any]:
        """What ``workbench probe --json`` prints (before the run id)."""
        out = self.probe.to_json()
        out["dataset"] = self.dataset
        if self.concepts is not None:
            out["concepts"] = self.concepts.to_json()
        return out

    def save(self, store: Any) -> Any:
        import torch

        res, acts, pooling = self.probe, self.acts, self.args.get("pooling", "last")
        best = res.best
        figures = {
            "curve": res.plot(),
            "pca_best": projection_figure(acts[best.hook], self.labels, "pca",
                                          f"PCA of {best.hook} ({pooling} pooling)"),
        }
        tables = {"layers": res.table()}
        if len(self.hooks) > 1:
            import plotly.express as px

            rsa = rsa_matrix({str(self.names[h]): acts[h] for h in self.hooks})
            tables["rsa"] = rsa.reset_index(names="layer")
            figures["rsa"] = px.imshow(rsa.values, x=list(rsa.columns), y=list(rsa.index), zmin=-1, zmax=1,
                                       color_continuous_scale="RdBu", title="RSA between layers")
        tensors = {"accuracy": torch.tensor([r.accuracy for r in res.layers]),
                   "control_accuracy": torch.tensor([r.control_accuracy for r in res.layers])}
        if self.keep_activations:
            tensors.update({f"acts.{h}": acts[h].float().contiguous() for h in self.hooks})
        if self.concepts is not None:
            tables["concepts"] = self.concepts.table()
            figures["concepts"] = self.concepts.plot()
        result = self.to_json() | {"best_accuracy": best.accuracy, "best_selectivity": best.selectivity,
                                   "hooks": self.hooks, "labels": self.labels}
        method = "logistic-probe" + ("+concepts" if self.concepts is not None else "")
        return store.save(RunDraft(kind="probe", model=res.model, method=method,
                                   args={"dataset": self.dataset, "hooks": self.hooks, **self.args},
                                   timings=self.timings, result=result, tensors=tensors, tables=tables,
                                   figures=figures))

    @classmethod
    def from_run(cls, run: Any) -> ProbeRun:
        """A probe run read back from the store (activations only if it kept them)."""
        data = run.result()
        if run.kind != "probe" or "layers" not in data:
            raise RunStoreError(f"run {run.id} is not a probe run")
        with reading(f"run {run.id}", RunStoreError):
            return cls._from_data(run, data)

    @classmethod
    def _from_data(cls, run: Any, data: dict[str, Any]) -> ProbeRun:
        probe = ProbeResult.from_json(data)
        hooks = list(data.get("hooks") or [r.hook for r in probe.layers])
        tensors = run.tensors()
        acts = {h: tensors[f"acts.{h}"] for h in hooks if f"acts.{h}" in tensors}
        concepts = ConceptResult.from_json(data["concepts"]) if data.get("concepts") else None
        args = {k: v for k, v in run.meta.get("args", {}).items() if k not in ("dataset", "hooks")}
        return cls(probe, acts, list(data.get("labels") or []), hooks, {r.hook: r.layer for r in probe.layers},
                   data.get("dataset"), args, dict(run.meta.get("timings", {})), concepts, bool(acts))


def run_probe(
    model: Any,
    data: LabeledSet,
    hooks: list[str],
    names: dict[str, int | str] | None = None,
    pooling: str = "last",
    test_frac: float = 0.3,
    seed: int = 0,
    n_boot: int = 1000,
    concept: str | None = None,
    dataset: str | None = None,
    keep_activations: bool = False,
    on_total: Step | None = None,
    on_step: Step | None = None,
) -> ProbeRun:
    """Logistic probes with a control task at every hook (see attribution/probes/probe.py); with ``concept``
    also class-mean and probe concept vectors from the same activations (no steering)."""
    from core.models.hooked import require

    require(model, "probe")
    names = names or {h: h for h in hooks}
    n = len(data)
    if on_total is not None:
        on_total(probe_phases(concept) * n)
    started = time.perf_counter()
    acts = pooled_activations(model, data, hooks, pooling, on_step=on_step)
    t_acts = time.perf_counter() - started
    probe = probe_layers(acts, data.labels, data.words or data.labels, model.name, "logistic", pooling, test_frac,
                         seed, n_boot=n_boot, layer_names=names, on_hook=_spread(n, len(hooks), on_step))
    concepts = None
    if concept:
        concepts = concept_vectors(model, acts, data.labels, concept, data.texts, pooling=pooling,
                                   layer_names=names, on_hook=_spread(n, len(hooks), on_step))
    args: dict[str, Any] = {"pooling": pooling, "test_frac": test_frac, "seed": seed}
    if n_boot != 1000:
        args["n_boot"] = n_boot
    if concept:
        args.update(concept=concept, n=n)
    return ProbeRun(probe, acts, list(data.labels), list(hooks), dict(names), dataset, args,
                    {"activations_s": t_acts, "total_s": time.perf_counter() - started}, concepts,
                    keep_activations)


# -- concept vectors ----------------------------------------------------------------------------------
def concept_hooks(model: Any, layers: str, steer_layers: str | None) -> tuple[list[str], list[str]]:
    """(hooks to build vectors at, hooks to steer at): the residual stream after ``layers``, and after
    ``steer_layers`` (default: 5 of ``layers`` spread out), which join the first list."""
    idx = parse_layers(layers, model.arch.n_layers)
    if steer_layers:
        pick = parse_layers(steer_layers, model.arch.n_layers)
    else:
        pick = sorted({idx[round(j * (len(idx) - 1) / 4)] for j in range(5)}) if len(idx) > 1 else idx
    steer = [f"blocks.{i}.hook_resid_post" for i in pick]
    hooks = sorted({f"blocks.{i}.hook_resid_post" for i in idx} | set(steer), key=lambda h: int(h.split(".")[1]))
    return hooks, steer


def find_saes(model_name: str, extra: list[str] | None = None) -> dict[str, str]:
    """{hook: SAE directory} for SAEs in data/saes trained on ``model_name``, plus ``extra`` paths."""
    import json
    from pathlib import Path

    found: dict[str, str] = {}
    for cfg in sorted((DATA_DIR / "saes").glob("*/cfg.json")):
        try:
            meta = json.loads(cfg.read_text()).get("metadata", {})
        except (OSError, ValueError):
            continue
        # transcoders read one hook and write another; concept vectors compare with SAEs only
        is_transcoder = bool(meta.get("hook_name_out")) and meta.get("hook_name_out") != meta.get("hook_name")
        if meta.get("model_name") == model_name and meta.get("hook_name") and not is_transcoder:
            found.setdefault(meta["hook_name"], str(cfg.parent))
    for path in extra or []:
        cfg = Path(path) / "cfg.json"
        if not cfg.exists():
            raise ModelFileError(f"{path!r} is not an SAE directory (no cfg.json)")
        hook = json.loads(cfg.read_text()).get("metadata", {}).get("hook_name")
        if hook:
            found[hook] = path
    return found


@dataclass
class ConceptsRun:
    """Concept vectors per layer and their steering effects, as ``workbench concepts`` stores them."""

    concepts: ConceptResult
    dataset: str | None
    steer: list[str]
    sae_paths: dict[str, str | None]
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return self.concepts.to_json() | {"saes": dict(self.sae_paths)}

    def save(self, store: Any) -> Any:
        res = self.concepts
        return store.save(RunDraft(
            kind="concepts", model=res.model, method="concept-vectors",
            args={"dataset": self.dataset, "concept": res.concept, "pooling": res.pooling, "scale": res.scale,
                  "steer": self.steer},
            timings=self.timings, result=self.to_json(), tables={"layers": res.table()},
            figures={"concepts": res.plot()}))


def run_concepts(
    model: Any,
    data: LabeledSet,
    concept: str,
    hooks: list[str],
    steer: list[str],
    saes: list[str] | None = None,
    pooling: str = "last",
    scale: float = 1.0,
    n_steer: int = 32,
    dataset: str | None = None,
    on_total: Step | None = None,
    on_step: Step | None = None,
) -> ConceptsRun:
    """Class-mean, probe and SAE concept vectors at ``hooks`` (SAEs from data/saes for the model plus the
    ``saes`` directories), their cosines, and steering with each at ``steer`` against a random vector."""
    from core.models.hooked import require

    require(model, "concept vectors")
    n = len(data)
    if on_total is not None:
        on_total(CONCEPT_PHASES * n)
    started = time.perf_counter()
    paths = find_saes(model.name, saes)
    loaded = {}
    for hook, path in paths.items():
        if hook in hooks:
            s = load_sae(path)
            check_fits(s, model.arch.d_model, hook)
            loaded[hook] = s
    acts = pooled_activations(model, data, hooks, pooling, on_step=on_step)
    res = concept_vectors(model, acts, data.labels, concept, data.texts, loaded, pooling, steer, scale, n_steer,
                          layer_names={h: int(h.split(".")[1]) for h in hooks},
                          on_hook=_spread(n, len(hooks), on_step))
    return ConceptsRun(res, dataset, steer, {h: paths.get(h) for h in loaded},
                       {"total_s": time.perf_counter() - started})
