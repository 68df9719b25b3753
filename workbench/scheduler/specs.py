"""Typed job specs: each job kind declares what it computes as a frozen dataclass with defaults, validation
and a normalised key, and is registered once, in SPECS (its spec class names the module of its job code).

The CLI, the app and the notebook build specs only through these classes, so the same work has the same key
wherever it was asked for, and a result computed by a command is found by the page that asks for it again
(``JobBoard.latest_done``). A spec travels as ``to_dict()`` (the job record's ``spec``, what the kinds read);
old records hold plain dicts and still list and open (``parse`` reads them, unknown kinds stay dicts).

The key is a digest of ``key_fields()``: every field but those that say how or where the work runs, or where
its inputs came from (``NOT_WORK``: threads, the prompt file's name when the rows are inline), with defaults
filled, the model name resolved, method names canonical and sorted where their order is only display order,
and prompts as given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from attribution.sae.config import TRAIN
from workbench.scheduler.errors import JobError


class SpecError(JobError):
    """A job spec with a missing, unknown or out-of-range field: one line naming the field and the choices."""


def model_ref(model: str) -> str:
    """A zoo name as given; a local model directory as an absolute path (a Ray worker's cwd differs, and the
    same directory typed two ways is the same model)."""
    from core.models.zoo import list_models

    path = Path(model).expanduser()
    if any(e.name == model for e in list_models()) or not path.exists():
        return model
    return str(path.resolve())


def _choice(what: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise SpecError(f"unknown {what} {value!r}; choose one of {', '.join(map(str, choices))}")


def _positive(what: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{what} must be a whole number >= 1 (got {value!r})")


def _rows(value: Any) -> None:
    if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value):
        raise SpecError("a job's prompt set needs at least one row (a JSON object per prompt)")


def _attr_method(name: str, level: str | None = None) -> str:
    """The canonical attribution method name, checked against the method table (no engine imported)."""
    from attribution.methods import METHODS, canonical, prompt_level

    out = canonical(str(name))
    if out not in METHODS:
        raise SpecError(f"unknown method {name!r}; known: {', '.join(METHODS)} (alias ig)")
    if level is not None and prompt_level(level) not in METHODS[out].levels:
        raise SpecError(f"method {out} has no {level} level; it has: {', '.join(METHODS[out].levels)}")
    return out


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """The common part: the kind's name, where its job code lives, and the key."""

    KIND: ClassVar[str] = ""
    JOB: ClassVar[str] = ""  # "module:Class" of the kind's job code (workbench/scheduler/kinds.py describes it)
    NOT_WORK: ClassVar[tuple[str, ...]] = ("threads",)  # fields left out of the key
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype",)  # left out of to_dict() while at their default

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """SpecError for a bad value (each kind adds its own checks)."""

    def to_dict(self) -> dict[str, Any]:
        """The spec as a job record holds it (and the kinds read it): {"kind", field: value, ...}."""
        out: dict[str, Any] = {"kind": self.KIND}
        for f in fields(self):
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if f.name in self.OMIT_DEFAULT and value == default:
                continue
            out[f.name] = value
        return out

    def key_fields(self) -> dict[str, Any]:
        """What the work is, normalised (subclasses resolve more)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.NOT_WORK}
        if isinstance(out.get("model"), str):
            out["model"] = model_ref(out["model"])
        return {"kind": self.KIND, **out}

    def key(self) -> str:
        """A short digest of ``key_fields()`` as canonical JSON: the same work, the same key."""
        text = json.dumps(self.key_fields(), sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """The spec of a dict (a notebook's, an old record's); SpecError for unknown or missing fields."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names - {"kind"})
        if unknown:
            raise SpecError(f"a {cls.KIND} job has no field {', '.join(unknown)}; fields: {', '.join(sorted(names))}")
        try:
            return cls(**{k: v for k, v in data.items() if k != "kind"})
        except TypeError as exc:  # a required field missing
            raise SpecError(f"a {cls.KIND} job spec is incomplete: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class ModelSpec(JobSpec):
    """A job on one model (a zoo name, a local directory or a hub id), on a device, in a dtype."""

    model: str
    device: str = "cpu"
    dtype: str | None = None


@dataclass(frozen=True, kw_only=True)
class PromptSetSpec(ModelSpec):
    """A job over a prompt set, inline as ``rows``; ``prompts_file`` only says where they came from."""

    NOT_WORK: ClassVar[tuple[str, ...]] = ("threads", "prompts_file")

    rows: list[dict[str, Any]]
    prompts_file: str | None = None

    def check(self) -> None:
        _rows(self.rows)


@dataclass(frozen=True, kw_only=True)
class FaithfulnessSpec(PromptSetSpec):
    """``workbench faithfulness`` and the Jobs page: disrupt / recover curves of methods on a prompt set."""

    KIND: ClassVar[str] = "faithfulness"
    JOB: ClassVar[str] = "workbench.scheduler.kinds:FaithfulnessJob"
    NOT_WORK: ClassVar[tuple[str, ...]] = ("threads", "prompts_file", "limit")

    methods: list[str]
    level: str = "token"
    ablation: str = "zero"
    rank: str = "signed"
    use_foil: bool = True
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    grid: list[float] | None = None
    batch_size: int = 32
    threads: int | None = None
    limit: int | None = None

    def check(self) -> None:
        _choice("level", self.level, ("token", "head", "neuron"))
        _choice("ablation", self.ablation, ("zero", "mean"))
        _choice("rank", self.rank, ("signed", "abs"))
        if not self.methods:
            raise SpecError("methods is empty: name at least one method")
        for m in self.methods:
            _attr_method(m)
        super().check()
        _positive("batch_size", self.batch_size)
        _positive("threads", self.threads, allow_none=True)

    def key_fields(self) -> dict[str, Any]:
        out = super().key_fields()
        out["methods"] = sorted({_attr_method(m) for m in self.methods})  # the order is the table's only
        out["params"] = {_attr_method(m): p for m, p in (self.params or {}).items()}
        return out


@dataclass(frozen=True, kw_only=True)
class AttributeSpec(ModelSpec):
    """One method at one level on one prompt (``workbench attribute``, the Attribution page's slow levels)."""

    KIND: ClassVar[str] = "attribute"
    JOB: ClassVar[str] = "workbench.scheduler.kinds:AttributeJob"
    NOT_WORK: ClassVar[tuple[str, ...]] = ("threads", "n_items")
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype", "n_items")

    prompt: str
    target: str | None = None
    foil: str | None = None
    method: str = "dpa"
    level: str = "token"
    position: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    n_items: int | None = None  # activation patching's item count when the caller knows it (the app)

    def check(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise SpecError("empty prompt: give at least one token")
        if self.target is None and self.position is None:
            raise SpecError("give a target (or a position before the last token)")
        _attr_method(self.method, self.level)

    def key_fields(self) -> dict[str, Any]:
        from attribution.methods import prompt_level

        out = super().key_fields()
        out["method"] = _attr_method(self.method)
        out["level"] = prompt_level(self.level)  # "edge", the query-key level's old name, is "qk": one key
        out["foil"] = self.foil or None
        out["params"] = dict(self.params or {})
        return out


def _backend(value: Any) -> str:
    """The loader's name of a backend (tl | transformer_lens | nnsight | bridge), checked without torch."""
    from core.models.backend_check import BACKEND_NAMES

    name = BACKEND_NAMES.get(str(value).strip().lower()) if isinstance(value, str) else None
    if name is None:
        raise SpecError(f"unknown backend {value!r}; choose one of tl, nnsight, bridge")
    return name


@dataclass(frozen=True, kw_only=True)
class AttributeSetSpec(PromptSetSpec):
    """``workbench attribute-set`` and the Prompt sets page: one method over a prompt set. ``backend`` is the
    loader's name (tl is stored as transformer_lens); a record without it (older ones) is TransformerLens'."""

    KIND: ClassVar[str] = "attribute_set"
    JOB: ClassVar[str] = "workbench.scheduler.kinds:AttributeSetJob"
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype", "backend")

    method: str = "dpa"
    level: str = "token"
    use_foil: bool = True
    batch_size: int = 16
    params: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    backend: str = "transformer_lens"

    def check(self) -> None:
        object.__setattr__(self, "backend", _backend(self.backend))  # one name per backend: one key
        _attr_method(self.method, self.level)
        super().check()
        _positive("batch_size", self.batch_size)

    def key_fields(self) -> dict[str, Any]:
        from attribution.methods import prompt_level

        out = {**super().key_fields(), "method": _attr_method(self.method), "level": prompt_level(self.level),
               "params": dict(self.params or {})}
        if out["backend"] == "transformer_lens":  # the key of the default backend's work is what it was before
            del out["backend"]
        return out


@dataclass(frozen=True, kw_only=True)
class CircuitDiscoverSpec(PromptSetSpec):
    """``workbench circuit discover`` and the Circuits page: score every edge, keep the top K, the curve."""

    KIND: ClassVar[str] = "circuit_discover"
    JOB: ClassVar[str] = "workbench.scheduler.kind_circuits:CircuitDiscoverJob"

    method: str = "eap"
    params: dict[str, Any] = field(default_factory=dict)
    edges: int = 100
    ablation: str | None = None  # None: corrupt when every row has a corrupt prompt, else mean
    metric: str | None = None  # None: logit_diff when every row has a foil, else target_logit
    selection: str = "topk"
    evaluate: bool = True
    grid: list[int] | None = None  # None: circuits.evaluate.DEFAULT_GRID
    batch_size: int = 16

    def check(self) -> None:
        from circuits.counterfactual import ABLATIONS, METRICS
        from circuits.edges import get_method

        get_method(self.method).check_params(self.params or {})  # unknown methods and parameters: MethodError
        super().check()
        _positive("edges", self.edges)
        _positive("batch_size", self.batch_size)
        if self.ablation is not None:
            _choice("ablation", self.ablation, tuple(ABLATIONS))
        if self.metric is not None:
            _choice("metric", self.metric, tuple(METRICS))
        _choice("selection", self.selection, ("topk", "greedy"))
        if self.grid is not None and (not self.grid or any(isinstance(k, bool) or not isinstance(k, int) or k < 1
                                                           for k in self.grid)):
            raise SpecError(f"grid sizes must be positive edge counts (got {self.grid!r})")

    def key_fields(self) -> dict[str, Any]:
        from circuits.edges import get_method
        from circuits.evaluate import DEFAULT_GRID

        out = super().key_fields()
        out["params"] = get_method(self.method).check_params(self.params or {})  # defaults filled in
        corrupt = all(r.get("corrupt") is not None for r in self.rows)  # as circuits.counterfactual.prepare
        foil = all(r.get("foil") is not None for r in self.rows)
        out["ablation"] = self.ablation or ("corrupt" if corrupt else "mean")
        out["metric"] = self.metric or ("logit_diff" if foil else "target_logit")
        out["grid"] = sorted(self.grid or DEFAULT_GRID) if self.evaluate else None
        return out


@dataclass(frozen=True, kw_only=True)
class CircuitEvaluateSpec(JobSpec):
    """``workbench circuit evaluate``: a saved circuit's curve again, or one hand-picked circuit."""

    KIND: ClassVar[str] = "circuit_evaluate"
    JOB: ClassVar[str] = "workbench.scheduler.kind_circuits:CircuitEvaluateJob"

    run: str
    edges: int | None = None
    ablation: str | None = None
    selection: str = "topk"
    grid: list[int] | None = None
    keep: list[list[str]] = field(default_factory=list)
    device: str = "cpu"
    dtype: str | None = None

    def check(self) -> None:
        _positive("edges", self.edges, allow_none=True)
        _choice("selection", self.selection, ("topk", "greedy"))


@dataclass(frozen=True, kw_only=True)
class VitEvalSpec(ModelSpec):
    """``workbench vit-eval`` and the Vision page's benchmark (job and run kind ``vit_eval``)."""

    KIND: ClassVar[str] = "vit_eval"
    JOB: ClassVar[str] = "workbench.scheduler.kind_vit:VitEvalJob"
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype", "head", "steps", "threads", "device")

    methods: list[str]
    n: int = 200
    seed: int = 2
    dataset: str = "synthetic"
    batch_size: int = 50
    head: str | None = None
    steps: int = 20
    threads: int | None = None

    def check(self) -> None:
        if not self.methods:
            raise SpecError("methods is empty: name at least one method")
        _positive("n", self.n)
        _positive("batch_size", self.batch_size)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SpecError(f"seed must be a whole number >= 0 (got {self.seed!r})")
        if not isinstance(self.steps, int) or self.steps < 10 or self.steps % 10:
            raise SpecError(f"steps must be a multiple of 10 (got {self.steps!r})")

    def key_fields(self) -> dict[str, Any]:
        return {**super().key_fields(), "methods": sorted(set(self.methods))}


@dataclass(frozen=True, kw_only=True)
class ProbeSpec(ModelSpec):
    """``workbench probe`` and the Probes page (workbench/scheduler/kind_probes.py says what each field is)."""

    KIND: ClassVar[str] = "probe"
    JOB: ClassVar[str] = "workbench.scheduler.kind_probes:ProbeJob"
    NOT_WORK: ClassVar[tuple[str, ...]] = ("threads", "dataset")
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype", "rows", "dataset_path", "n_boot", "concept",
                                               "keep_activations")

    n: int
    dataset: str | None = None
    rows: list[dict[str, Any]] | None = None
    dataset_path: str | None = None
    hook: str | None = None
    layers: str = "all"
    pooling: str = "last"
    test_frac: float = 0.3
    seed: int = 0
    n_boot: int | None = None
    concept: str | None = None
    keep_activations: bool = False

    def check(self) -> None:
        if self.rows is None and self.dataset_path is None:
            raise SpecError(f"a {self.KIND} job needs its examples: rows or dataset_path")
        from attribution.probes.activations import POOLINGS

        _positive("n", self.n)
        _choice("pooling", self.pooling, tuple(POOLINGS))


@dataclass(frozen=True, kw_only=True)
class ConceptsSpec(ModelSpec):
    """``workbench concepts``: concept vectors, their similarity and steering."""

    KIND: ClassVar[str] = "concepts"
    JOB: ClassVar[str] = "workbench.scheduler.kind_probes:ConceptsJob"
    NOT_WORK: ClassVar[tuple[str, ...]] = ("threads", "dataset")
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype", "rows", "dataset_path")

    n: int
    concept: str
    dataset: str | None = None
    rows: list[dict[str, Any]] | None = None
    dataset_path: str | None = None
    layers: str = "all"
    steer_layers: str | None = None
    pooling: str = "last"
    scale: float = 1.0
    n_steer: int = 32
    saes: list[str] = field(default_factory=list)

    def check(self) -> None:
        ProbeSpec.check(self)  # type: ignore[arg-type] - the same dataset and pooling fields


@dataclass(frozen=True, kw_only=True)
class SaeCacheSpec(ModelSpec):
    """``workbench sae cache``: activation shards of a corpus (workbench/scheduler/kind_sae.py)."""

    KIND: ClassVar[str] = "sae_cache"
    JOB: ClassVar[str] = "workbench.scheduler.kind_sae:SaeCacheJob"
    # unset: the caching function's own defaults (attribution.sae.shards.cache_shards)
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype", "threads", "ctx", "batch_size", "shard_tokens",
                                               "skip_first", "bf16")

    hooks: list[str]
    out: str
    tokens: int
    split: str = "train"
    corpus: str | None = None
    ctx: int | None = None
    batch_size: int | None = None
    shard_tokens: int | None = None
    skip_first: int | None = None
    bf16: bool | None = None
    threads: int | None = None

    def check(self) -> None:
        if not self.hooks:
            raise SpecError("hooks is empty: name at least one hook")
        _positive("tokens", self.tokens)
        for name in ("ctx", "batch_size", "shard_tokens"):
            _positive(name, getattr(self, name), allow_none=True)


@dataclass(frozen=True, kw_only=True)
class SaeTrainSpec(ModelSpec):
    """``workbench sae train``: one dictionary (workbench/scheduler/kind_sae.py)."""

    KIND: ClassVar[str] = "sae_train"
    JOB: ClassVar[str] = "workbench.scheduler.kind_sae:SaeTrainJob"

    # the training settings' defaults are attribution.sae.config.TrainConfig's (the command's --options too)
    hook: str
    tokens: int
    sae_kind: str = TRAIN.kind
    width: int | None = TRAIN.width
    k: int = TRAIN.k
    epochs: float = 4.0
    lr: float = TRAIN.lr
    batch_size: int = TRAIN.batch_size
    l1: float = 0.5
    l0: float = 1.0
    ctx: int = 128
    corpus: str | None = None
    out: str | None = None
    seed: int = TRAIN.seed
    keep_first: bool = not TRAIN.skip_first

    def check(self) -> None:
        _positive("tokens", self.tokens)
        _positive("batch_size", self.batch_size)


@dataclass(frozen=True, kw_only=True)
class BenchCircuitsSpec(ModelSpec):
    """``workbench bench circuits``: every method on every task, MIB's CPR and CMD (workbench/scheduler/kind_bench.py;
    the fields are circuits.bench.runner.BenchConfig's). A task is a name or a .jsonl path (made absolute)."""

    KIND: ClassVar[str] = "bench_circuits"
    JOB: ClassVar[str] = "workbench.scheduler.kind_bench:BenchCircuitsJob"
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("dtype", "threads")

    tasks: list[str]
    methods: list[str]
    levels: list[str] = field(default_factory=lambda: ["edge"])
    n_train: int = 16
    n_test: int = 48  # as circuits/bench/runner.py BenchConfig
    n_patch: int = 4
    patch_sample: int = 64
    selection: str = "topk"
    n_boot: int = 1000
    batch_size: int = 8
    seed: int = 0
    eval_split: str = "test"
    filter_rows: bool = True  # a custom task file filtered like the built-in tasks (--no-filter: as given)
    random_seeds: int = 5  # the random baseline's draws, averaged
    threads: int | None = None

    def check(self) -> None:
        from circuits.bench.runner import check_config

        for name in ("tasks", "methods", "levels"):
            if not isinstance(getattr(self, name), list) or not getattr(self, name):
                raise SpecError(f"{name} is empty: name at least one")
        for name in ("n_train", "n_test", "n_patch", "n_boot", "batch_size"):
            _positive(name, getattr(self, name))
        _positive("threads", self.threads, allow_none=True)
        check_config(bench_config(self.to_dict()))

    def key_fields(self) -> dict[str, Any]:
        out = super().key_fields()
        for name in ("tasks", "methods", "levels"):  # their order is the tables' only
            out[name] = sorted(set(getattr(self, name)))
        return out


def bench_config(spec: dict[str, Any]) -> Any:
    """A bench_circuits spec's BenchConfig: the spec's fields that BenchConfig has, the rest at its defaults."""
    from circuits.bench.runner import BenchConfig

    names = {f.name for f in fields(BenchConfig)}
    return BenchConfig(**{k: v for k, v in spec.items() if k in names})


@dataclass(frozen=True, kw_only=True)
class SleepSpec(JobSpec):
    """A job that only waits (tests of the runner and the Jobs page, no model)."""

    KIND: ClassVar[str] = "sleep"
    JOB: ClassVar[str] = "workbench.scheduler.kinds:SleepJob"
    OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("fail",)

    seconds: float = 1
    steps: int = 10
    fail: str | None = None

    def check(self) -> None:
        _positive("steps", self.steps)
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) or not 0 <= self.seconds:
            raise SpecError(f"seconds must be a number >= 0 (got {self.seconds!r})")


# The one table of job kinds: a new kind is its spec class here (naming its job code) and that code.
SPECS: dict[str, type[JobSpec]] = {cls.KIND: cls for cls in (
    FaithfulnessSpec, AttributeSpec, AttributeSetSpec, CircuitDiscoverSpec, CircuitEvaluateSpec, VitEvalSpec,
    ProbeSpec, ConceptsSpec, SaeCacheSpec, SaeTrainSpec, BenchCircuitsSpec, SleepSpec)}
ALIASES = {"vit-eval": "vit_eval"}  # an old spelling of a kind, read as the kind


def parse(spec: JobSpec | dict[str, Any]) -> JobSpec | dict[str, Any]:
    """A JobSpec for a spec or a dict of a known kind (checked: SpecError); a dict of a kind this table does
    not know (one a test or plug-in registered in workbench.scheduler.kinds) is returned as it is."""
    if isinstance(spec, JobSpec):
        return spec
    if not isinstance(spec, dict):
        raise SpecError(f"a job spec is a JobSpec or a dict with a 'kind' (got {type(spec).__name__})")
    kind = ALIASES.get(str(spec.get("kind", "")), str(spec.get("kind", "")))
    cls = SPECS.get(kind)
    return spec if cls is None else cls.from_dict(spec)


def as_dict(spec: JobSpec | dict[str, Any]) -> dict[str, Any]:
    """The spec as a job record holds it: checked and with its defaults filled when its kind is known."""
    out = parse(spec)
    return out.to_dict() if isinstance(out, JobSpec) else out


def key_of(spec: JobSpec | dict[str, Any]) -> str:
    """The normalised key of a spec (a dict of an unknown kind: a digest of the dict itself)."""
    out = parse(spec)
    if isinstance(out, JobSpec):
        return out.key()
    text = json.dumps(out, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]
