"""workbench: a mechanistic-interpretability workbench.

Notebook use::

    import workbench as wb
    m = wb.load("smollm2-135m")
    res = wb.attribute(m, "The capital of France is", target=" Paris", method="dpa")
    res.plot()

Heavy libraries (torch, TransformerLens, nnsight, SAELens) are imported only when used.
"""

from __future__ import annotations

import os
from typing import Any

from core.errors import WorkbenchError
from core.models import zoo as _zoo
from core.paths import version as _version
from workbench.arguments import (
    Choice,
    Device,
    DType,
    Float,
    Image,
    Int,
    JobSpecArg,
    LoadedModel,
    PromptRows,
    Region,
    StoredRun,
    Text,
    checked,
    job_kinds,
)

# Every public function below checks its arguments (workbench/arguments.py): a wrong type, a missing or unknown
# argument is an ArgumentTypeError (a TypeError), a value out of range an ArgumentError (a ValueError), and an
# engine's own refusal leaves as its WorkbenchError class made also a ValueError; one line each.
__all__ = ["WorkbenchError", "list_models", "load", "register", "models", "runs", "export", "attribute",
           "attribute_set", "remote_model", "circuit", "patch", "path_patch", "probe", "feature_attribution",
           "feature_graph", "jobs", "run_job", "submit_job", "estimate_job", "job_spec", "lens", "dla", "saes",
           "sae_dashboards", "sae_features", "sae_steer", "vit_explain", "attention", "flow"]
__version__ = _version()  # the installed distribution's (importlib.metadata)

BACKENDS = ("transformer_lens", "bridge", "nnsight")
# the keywords wb.load passes on to a model's loader (an LLM's backend; the DINOv2 wrapper's head and size)
LOAD_EXTRAS: dict[str, Any] = {"backend": Choice(BACKENDS), "head": str | None, "image_size": Int(14, 4096)}
TOP_K_MAX = 1000  # the lens' top tokens per cell: more is unreadable and costs a vocabulary-sized sort
STEER_MAX_NEW_TOKENS = 512  # attribution.sae.steer.MAX_NEW_TOKENS (not imported here: torch), as `sae steer --tokens`


def _cli_bound(flag: str) -> int:
    """The CLI's upper bound for ``flag`` (core/options.py BOUNDS, else its cap on every count), so a count
    means the same from a notebook, the app and the command line."""
    from core import options

    bound = getattr(options, "BOUNDS", {}).get(flag)
    return int(bound.limit()) if bound is not None else int(getattr(options, "INT_CAP", 1_000_000))


@checked()
def list_models() -> list[_zoo.ModelEntry]:
    """Every model you can load now (zoo entries: name, kind, params, source)."""
    return _zoo.list_models()


@checked()
def register(entry: _zoo.ModelEntry) -> None:
    """Add a model to the zoo for this process (plugins, tests)."""
    _zoo.register(entry)


@checked(extras=LOAD_EXTRAS, device=Device(), dtype=DType())
def load(name_or_path: str | os.PathLike, device: str = "cpu", dtype: Any = None, **kwargs: Any):
    """Load a model from the zoo, a local directory or a Hugging Face hub id, ready for the engines.
    ``dtype`` (float32 | bfloat16 | float16) is the LLMs' weight precision; engines accumulate in float32;
    ``backend`` (transformer_lens | bridge | nnsight) builds an LLM; ``head`` and ``image_size`` are DINOv2's."""
    return _zoo.load(os.fspath(name_or_path), device=device, dtype=dtype, **kwargs)


def _method_keywords(args: dict[str, Any]) -> dict[str, Any] | None:
    """The keywords attribution method ``args["method"]`` takes at ``args["level"]`` (beyond model, encoding and
    level), read from its implementation (DPA's from its parameter class); None when it takes any."""
    import inspect

    from attribution import get_method

    spec, fn = get_method(args.get("method", "dpa"), args.get("level", "token"))
    params = list(inspect.signature(fn).parameters.values())[3:]
    if spec.name == "dpa":
        return _dpa_keywords()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name: Any for p in params if p.kind is not p.VAR_POSITIONAL}


def _circuit_keywords(args: dict[str, Any]) -> dict[str, Any]:
    """circuits.discover.circuit's own options and the edge method's parameters."""
    import inspect

    from circuits.discover import circuit as _circuit
    from circuits.edges import get_method

    own = [p.name for p in inspect.signature(_circuit).parameters.values() if p.kind is p.KEYWORD_ONLY
           or (p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("model", "prompts", "method", "edges"))]
    return {**{n: Any for n in own}, **{n: Any for n in get_method(args.get("method", "eap")).params}}


def _dpa_keywords(*named: str) -> dict[str, Any]:
    from dataclasses import fields

    from attribution.dpa.params import DPAParams

    return {**{f.name: Any for f in fields(DPAParams)}, **{n: Any for n in named}}


@checked()
def models():
    """The zoo as a pandas table."""
    import pandas as pd

    return pd.DataFrame([e.public() for e in list_models()])


@checked(repo_id=Text())
def remote_model(repo_id: str, name: str | None = None):
    """A model hosted on NDIF, traced remotely through nnsight (see core/models/remote.py)."""
    from core.models.remote import remote_model as _remote

    return _remote(repo_id, name)


@checked()
def runs(root: str | os.PathLike | None = None):
    """The run store (``wb.runs().list()``)."""
    from core.store import RunStore

    return RunStore(root)


def _export_formats() -> tuple[str, ...]:
    from circuits.export import FORMATS

    return FORMATS


@checked(run=StoredRun(), fmt=Choice(_export_formats), table=Choice(("edges", "nodes")))
def export(run: Any, fmt: str, path: str | os.PathLike, table: str = "edges", overwrite: bool = False,
           root: str | os.PathLike | None = None) -> dict[str, Any]:
    """Write a stored run (``res.save()``, ``wb.runs().get(id)``, or its id or a unique prefix of one, looked up in
    the store at ``root``) as graph-json, mib, csv or parquet at ``path``, as ``workbench export``: a circuit,
    feature-graph, subgraph or attribution run; ``table`` "nodes" for csv / parquet by node. Returns what was
    written (path, format, bytes, what it holds). Exporting is circuits' (circuits/runs.py), not the store's."""
    from circuits.runs import export_run
    from core.store import RunStore

    found = RunStore(root).resolve(run) if isinstance(run, str) else run
    return export_run(found, fmt, path, table=table, overwrite=overwrite)


@checked(extras=_method_keywords, model=LoadedModel(), prompt=Text())
def attribute(model: Any, prompt: str, target: str | None = None, method: str = "dpa", level: str = "token",
              foil: str | None = None, position: int | None = None, **kwargs: Any):
    """Run one attribution method; returns a typed result that plots and saves itself. A non-finite
    parameter or score is a NonFiniteError (a WorkbenchError), never a result holding NaN.

    position: explain the next-token prediction made at that position (negative counts from the end;
    default the last); its default target is the prompt's next token there."""
    from attribution import attribute as _attribute
    from core.options import check_finite, finite_param

    for key, value in kwargs.items():
        finite_param("parameter", key, value)
    res = _attribute(model, prompt, target=target, foil=foil, method=method, level=level, position=position,
                     **kwargs)
    check_finite(f"{res.method} {res.level} scores", res.scores)
    check_finite("the target logit", res.target_logit)
    return res


@checked(model=LoadedModel(), prompt=Text(), kind=Choice(("logit", "tuned")), top_k=Int(1, TOP_K_MAX))
def lens(model: Any, prompt: str, kind: str = "logit", target: str | None = None, top_k: int = 5,
         position: int | None = None):
    """The logit or tuned lens: each layer's top-k next tokens at every position, and the target's rank and
    probability per layer at ``position`` (default the last). Returns a LensResult (``.plot()``, ``.cell(l, p)``,
    ``.save()``)."""
    from attribution.lens import lens as _lens

    return _lens(model, prompt, kind=kind, target=target, top_k=top_k, position=position)


@checked(model=LoadedModel(), prompt=Text())
def flow(model: Any, prompt: str):
    """Information flow by token (IFR per position, as the LLM Transparency Tool draws it): a circuits.flow.Flow
    with ``.plot(threshold, position)`` (positions across, layers up), ``.graph(threshold, position)`` (the routes
    to one position's prediction, a Subgraph), ``.describe(node)`` (its logit lens and heads), ``.save()``."""
    from circuits.flow import flow as _flow

    return _flow(model, prompt)


@checked(model=LoadedModel(), prompt=Text())
def attention(model: Any, prompt: str, layers: list[int] | None = None):
    """Every head's attention pattern on ``prompt`` (CircuitsVis' attention_heads): an AttentionResult with
    ``.pattern`` [layer, head, query, key], ``.plot()`` (a layer's heads in a grid with a layer menu; or
    ``.plot(layer, head)``), ``.head(l, h)``, ``.top_heads(query, key)``, ``.table()``, ``.save()``. ``layers``
    keeps only those layers (default all)."""
    from attribution.attention import attention as _attention

    return _attention(model, prompt, layers=layers)


@checked(model=LoadedModel(), prompt=Text())
def dla(model: Any, prompt: str, target: str | None = None, foil: str | None = None, position: int | None = None):
    """Direct logit attribution of target (minus foil) at ``position``: per component, per head and along the
    accumulated residual stream. Returns a DLAResult (``.plot()``, ``.table()``, ``.save()``)."""
    from attribution.dla import direct_logit_attribution

    return direct_logit_attribution(model, prompt, target=target, foil=foil, position=position)


@checked(extras=_method_keywords, model=LoadedModel(), prompts=PromptRows(),
         batch_size=Int(1, _cli_bound("--batch-size")), limit=Int(1, None, optional=True))
def attribute_set(model: Any, prompts: str | list[dict], method: str = "dpa", level: str = "token",
                  use_foil: bool = True, batch_size: int = 16, limit: int | None = None, **kwargs: Any):
    """One method over a prompt set (a JSONL path or rows {"prompt", "target", "foil"?}); DPA runs
    batch_size prompts per pass. Returns an AttributionSet (``.results``, ``.table()``, ``.plot()``, ``.save()``)."""
    from attribution.prompt_set import attribute_set as _attribute_set
    from core.options import finite_param
    from core.prompt_files import read_prompts

    for key, value in kwargs.items():
        finite_param("parameter", key, value)
    rows = read_prompts(prompts, limit) if isinstance(prompts, str) else list(prompts)[:limit]
    return _attribute_set(model, rows, method=method, level=level, use_foil=use_foil, batch_size=batch_size,
                          **kwargs)


@checked(extras=_circuit_keywords, model=LoadedModel(), prompts=PromptRows(), edges=Int(1, _cli_bound("--edges")))
def circuit(model: Any, prompts: str | list[dict], method: str = "eap", edges: int = 100, **kwargs: Any):
    """Edge-level circuit discovery on a prompt set (a JSONL path or rows {"prompt", "target", "foil"?,
    "corrupt"?}): scores every edge with ``method`` (eap, eap_ig, dpa, activation_patching), keeps the top
    ``edges`` and measures the faithfulness curve. Returns a CircuitResult (``.plot()``,
    ``.plot_faithfulness()``, ``.table()``, ``.save()``); see circuits/discover.py for the options."""
    from circuits.discover import circuit as _circuit
    from core.progress import Bar

    with Bar(f"{method} circuit", unit="prompt") as bar:  # a bar only in a notebook
        kwargs.setdefault("on_total", bar.total)
        kwargs.setdefault("on_step", bar.step)
        return _circuit(model, prompts, method=method, edges=edges, **kwargs)


@checked(extras=lambda args: _dpa_keywords(), model=LoadedModel(), prompt=Text())
def feature_attribution(model: Any, prompt: str, saes: str | list, target: str | None = None,
                        foil: str | None = None, keep_first: bool = False, **kwargs: Any):
    """Feature-level DPA: the target (minus foil) split over each dictionary's features per position, plus
    error, decoder bias and skip terms (they sum to the layer's share of the target). ``saes``: paths (or
    names under data/saes), comma-separated or a list, or loaded Dictionary objects. Returns a
    FeatureAttribution (``.layers``, ``.table()``, ``.to_json()``)."""
    from attribution.features.placement import load_dictionaries
    from attribution.features.scores import feature_attribution as _feature_attribution

    return _feature_attribution(model, prompt, load_dictionaries(saes), target=target, foil=foil,
                                keep_first=keep_first, **kwargs)


@checked(extras=lambda args: _dpa_keywords("per_layer", "max_nodes", "max_edges", "keep_first", "batch_size",
                                           "method", "node_threshold", "edge_threshold"),
         model=LoadedModel(), prompt=Text())
def feature_graph(model: Any, prompt: str, saes: str | list, target: str | None = None, foil: str | None = None,
                  **kwargs: Any):
    """The feature graph (features -> features -> logits, error nodes, pruned): the one graph type, a Subgraph
    (circuits/subgraph.py) with ``.nodes``, ``.edges``, ``.plot()``, ``.save()``, ``.replacement_score``,
    ``.completeness_score``; options max_nodes, max_edges, per_layer, keep_first, DPA's path weights, method
    ("dpa" or "gradient": the replacement model of a transcoder set, ``saes="set:NAME"``, or of a cross-layer
    transcoder, ``saes="clt:NAME"``, which only the gradient graph reads), node_threshold and
    edge_threshold (circuits/feature_graph.py)."""
    from attribution.features.placement import load_dictionaries
    from circuits.feature_graph import feature_graph as _feature_graph

    return _feature_graph(model, prompt, load_dictionaries(saes), target=target, foil=foil, **kwargs)


@checked(extras={"pos": int, "on_step": Any}, model=LoadedModel(), clean=Text(), corrupted=Text(), target=Text(),
         site=Choice(("resid", "attn", "mlp", "heads", "mlps")))
def patch(model: Any, clean: str, corrupted: str, target: str, foil: str | None = None, site: str = "resid",
          **kwargs: Any):
    """Activation patching from ``corrupted`` into ``clean`` at every site of one kind: ``resid``, ``attn``
    or ``mlp`` ([layer, position]), ``heads`` ([layer, head]) or ``mlps`` ([layer]). Returns a PatchResult
    (``.effect``: 1 = the patch alone flips the logit difference to the corrupted run's; ``.plot()``,
    ``.table()``). ``circuits.tools.patching.swap_names`` builds an IOI-style corrupted prompt."""
    from circuits.tools.patching import patch as _patch
    from core.options import check_finite
    from core.progress import Bar

    with Bar(f"patching {site}", unit="forward") as bar:  # a bar only in a notebook
        kwargs.setdefault("on_step", bar.to)
        res = _patch(model, clean, corrupted, target, foil, site=site, **kwargs)
    check_finite(f"{site} patching effects", res.effect)
    return res


@checked(model=LoadedModel(), clean=Text(), corrupted=Text(), target=Text(), via=Choice(("q", "k", "v")))
def path_patch(model: Any, clean: str, corrupted: str, target: str, foil: str | None = None,
               sender: tuple[int, int] = (0, 0), receivers: list[tuple[int, int]] | None = None, via: str = "q",
               pos: int = -1) -> dict[str, Any]:
    """Path patching: the corrupted output of head ``sender`` (layer, head) only along its direct paths into
    the ``via`` input of the ``receivers`` heads (None: straight to the logits), everything else frozen clean.
    Returns the patched logit difference and the normalized effect (1 = the path alone carries the change)."""
    from circuits.tools.patching import path_patch as _path_patch

    return _path_patch(model, clean, corrupted, target, foil, sender=tuple(sender),
                       receivers=[tuple(r) for r in receivers] if receivers is not None else None, via=via, pos=pos)


@checked(model=LoadedModel(), pooling=Choice(("last", "mean", "marked")), test_frac=Float(0.05, 0.8),
         seed=Int(0, None), n_boot=Int(10, 100_000))
def probe(model: Any, data: str | os.PathLike | list[dict], layers: str | list[int] = "all",
          hooks: list[str] | None = None, pooling: str = "last", test_frac: float = 0.3, seed: int = 0,
          n_boot: int = 1000, concept: str | None = None):
    """Layer-wise logistic probes with a control task (as ``workbench probe``): ``data`` is a JSONL path or rows
    ``{"text", "label", "word"?}``; residual stream after ``layers`` unless ``hooks`` names hooks. Returns a
    ProbeRun (held-out and control accuracy, selectivity, 95% CI per hook; ``.save()``); with ``concept`` (one
    of the labels) also its concept vectors."""
    import tempfile
    from pathlib import Path

    from attribution.probes.activations import load_dataset, resid_hooks
    from attribution.probes.run import run_probe

    if isinstance(data, (str, os.PathLike)):
        labelled = load_dataset(data, min_per_class=4)
    else:  # rows go through the same checks as a file
        import json

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "rows.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in data))
            labelled = load_dataset(path, min_per_class=4)
    return run_probe(model, labelled, hooks or resid_hooks(model, layers), pooling=pooling, test_frac=test_frac,
                     seed=seed, n_boot=n_boot, concept=concept)


@checked()
def saes(root: str | os.PathLike | None = None, model: str | None = None) -> list[dict]:
    """Every shipped or trained dictionary (data/saes) with its held-out metrics, as ``workbench sae list``."""
    from attribution.sae.explore import summaries

    return summaries(root, model)


@checked(sae=Text(), model=LoadedModel(optional=True))
def sae_dashboards(sae: str, model: Any | None = None):
    """The stored dashboards of a dictionary (a path, a name under data/saes, or ``neurons:LAYER`` with a
    loaded ``model``): ``.card(f)``, ``.search_token(" John")``, ``.search_label(text)``. Build them with
    ``workbench sae dashboards --sae PATH`` (or attribution.sae.explore.build)."""
    from attribution.sae.explore import open_dashboards
    from attribution.sae.units import resolve

    return open_dashboards(resolve(sae, model))


@checked(sae=Text(), feature=Int(0, _cli_bound("--feature"), optional=True), model=LoadedModel(optional=True),
         limit=Int(1, _cli_bound("--limit")))
def sae_features(sae: str, token: str | None = None, label: str | None = None, feature: int | None = None,
                 model: Any | None = None, limit: int = 50) -> list[dict]:
    """Features of a dictionary that fire on an exact token (``feature``, ``label``, ``max_activation``),
    or whose label contains ``label``, or one ``feature``; as ``workbench sae features``."""
    from attribution.sae.explore import find_features

    return find_features(sae_dashboards(sae, model), token=token, label=label, feature=feature, limit=limit)


@checked(model=LoadedModel(), sae=Text(), feature=Int(0, _cli_bound("--feature")), prompt=Text(),
         alpha=Float(-1e6, 1e6, optional=True), clamp=Float(-1e6, 1e6, optional=True),
         n_new=Int(0, STEER_MAX_NEW_TOKENS))
def sae_steer(model: Any, sae: str, feature: int, prompt: str, alpha: float | None = None,
              clamp: float | None = None, target: str | None = None, n_new: int = 20):
    """Steer with one feature (add ``alpha`` x its decoder direction, or ``clamp`` it; clamp=0 ablates):
    a SteerResult with the greedy continuations with and without, and the target's probability change."""
    from attribution.sae.steer import steer
    from attribution.sae.units import check_model_fits, resolve

    d = resolve(sae, model)
    check_model_fits(d, model)
    return steer(model, d, feature, prompt, alpha=alpha, value=clamp, target=target, n_new=n_new)


@checked()
def jobs(root: str | os.PathLike | None = None):
    """The job board (``wb.jobs().list()``, ``.get(id)``, ``.request_cancel(id)``): long work started from
    the app, the CLI or a notebook."""
    from workbench.scheduler import JobBoard

    return JobBoard(root)



def _spec_fields(args: dict[str, Any]) -> dict[str, Any] | None:
    """The fields of job kind ``args["kind"]`` with their type hints (the spec class checks values itself);
    None for a kind registered at run time without a spec class (its job code reads its own dict)."""
    import typing
    from dataclasses import fields

    from workbench.scheduler.specs import ALIASES, SPECS

    cls = SPECS.get(ALIASES.get(args["kind"], args["kind"]))
    if cls is None:
        return None
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in fields(cls)}


@checked(extras=_spec_fields, kind=Choice(job_kinds))
def job_spec(kind: str, **fields: Any):
    """The typed spec of a job (workbench/scheduler/specs.py): ``wb.job_spec("faithfulness", model=..., rows=...,
    methods=["dpa"])``, checked, with its defaults and its normalised ``.key()``; the kinds are the names in
    ``workbench.scheduler.specs.SPECS``."""
    from workbench.scheduler.specs import parse

    return parse({"kind": kind, **fields})


@checked(spec=JobSpecArg(), workers=Int(1, _cli_bound("--workers")))
def run_job(spec: Any, workers: int = 1, ray_address: str | None = None, save: bool = True):
    """Run long work as a job to its end: (job, result). ``spec`` is a ``job_spec(...)`` (or a dict with a
    ``kind``, read through its kind's spec class). More than one worker, or a Ray address ("local",
    HOST:PORT, or WORKBENCH_RAY_ADDRESS), runs it on Ray, sharded; the result is the single-process one."""
    from core.progress import Bar
    from workbench.scheduler import run

    with Bar("job", unit="item") as bar:  # a bar only in a notebook
        return run(spec, workers=workers, address=ray_address, save=save,
                   on_progress=lambda job: bar.to(job.done, job.total or None))


@checked(spec=JobSpecArg(), workers=Int(1, _cli_bound("--workers")))
def estimate_job(spec: Any, workers: int = 1):
    """What a job will cost here before it starts (``.seconds``, ``.text()``): its items x the seconds per
    item an earlier job of the same shape measured (or the kind measures now); None when nothing is known."""
    from workbench.scheduler.kinds import estimate

    return estimate(spec, workers)


@checked(spec=JobSpecArg(), workers=Int(1, _cli_bound("--workers")))
def submit_job(spec: Any, workers: int = 1, ray_address: str | None = None):
    """Start a job and return at once; follow it with ``wb.jobs().get(job.id)``. Work estimated under about
    10 s runs in a thread of this process, longer work on Ray (workbench/scheduler/runner.py ``submit``)."""
    from workbench.scheduler import submit

    return submit(spec, workers=workers, address=ray_address)


@checked(model=LoadedModel(names_too=True), image=Image(), region=Region(),
         target=Int(0, _cli_bound("--target"), optional=True))
def vit_explain(model: Any, image: Any, method: str = "dap", head: str | None = None, region: Any = None,
                target: int | None = None):
    """One image explained by one ViT method, as ``workbench vit-explain``: an ImageExplanation
    (``.predicted``, ``.probs``, ``.map`` (PatchMap), ``.plot()``, ``.to_json()``). ``model``: a name, a path
    or a loaded ViT. dinov2-small takes any RGB photograph (a path, a PIL image or a (3, H, W) tensor in
    [0, 1]) and explains a linear head's class (``head="synthetic"`` or ``"hard"``) or the saliency decoder's
    mean inside ``region`` (x0, y0, x1, y1 on the image; ``head="saliency"``)."""
    from attribution.vit.explanation import explain_image

    return explain_image(model, image, method, head, region, target)
