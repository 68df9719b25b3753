"""A dictionary set: one transcoder per layer of a model, built as one resumable job into the user's cache
(``~/.cache/workbench/sets/<name>/``, never the repository), and read back by name wherever dictionaries are
taken (``--saes set:<name>``, ``load_set``).

Layout: ``set.json`` (model, kind, width, k, tokens, the layers asked for, per-layer seconds) and one
dictionary directory per layer, ``L0``, ``L1``, ... in SAELens' format with its workbench.json (metrics
measured on held-out text). A layer counts as built when its directory loads; each is written to a temporary
name and renamed (build_dictionary), so an interrupted build leaves whole layers or none, and running the same
command again skips the built layers and resumes the one in progress from its training checkpoint.

Activations are cached once for every layer still to build, in a single forward pass per batch (one model
pass serves all 2 x L hooks), into one shard directory per layer (``.acts/train/L5``...), so a layer's shards
are read alone while it trains and deleted once it is built (the peak disk is the cache of the layers left).
Documents are shuffled (seeded) before windowing: the corpus is stored source after source, and a few hundred
thousand tokens from its start would be one book.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from attribution.sae.config import TrainConfig
from core.checks import read_json
from core.errors import DatasetError, ModelFileError, RangeError

SET_FILE = "set.json"
Progress = Callable[[str, int, int], None]

# Throughputs measured on this machine with one torch thread (scripts: see results/sae/replacement.md):
# a bfloat16 forward of smollm2-135m runs ~89 GFLOP/s (2 x params FLOPs per token); a transcoder training
# step ~50 GFLOP/s (6 x batch x (2 d W + d^2) FLOPs: forward, backward, skip term).
FORWARD_FLOPS = 89e9
TRAIN_FLOPS = 50e9


@dataclass(kw_only=True)
class SetSpec(TrainConfig):
    """What a transcoder set is trained with (the same for every layer): TrainConfig's settings and defaults
    (k, tokens, batch_size, seed, skip_first), but for the set's own, named below."""

    model: str
    layers: list[int]
    # The set's deliberate departures from TrainConfig: one transcoder per layer (30 on smollm2-135m), so each
    # is narrower (2 features per d_model there, not 4) and learns faster: a compromise with the time a whole
    # set takes on a CPU (results/sae/replacement.md), not a choice for quality.
    kind: str = "transcoder"
    width: int = 1152
    lr: float = 7e-4
    heldout_tokens: int = 8_192
    eval_windows: int = 6
    shard_tokens: int = 16_384
    ctx: int = 128
    epochs: int = 1  # passes over the cached tokens (3 with lr 2e-3 paid most: results/sae/replacement.md)
    # Massive-activation tokens left out of training and of the quality record: those whose MLP-output norm is
    # over this multiple of the layer's median (0: none left out; None: the set's own when it resumes, so a set
    # built before the rule resumes without it, and MASSIVE_ABOVE for a new set). Training and scoring only: the
    # replacement model still runs every token through the transcoder and its error node takes what is missed.
    massive_above: float | None = None
    # How training picks the active features: "topk" (k per token) or "batchtopk" (k per token on average over
    # each batch). The set saves JumpReLU transcoders (one threshold); a TopK-trained transcoder fires hundreds of
    # features on its large-output tokens in that form (lr 2e-3, 3 epochs: layer 2's EV 0.95 as TopK, 0.06 saved),
    # a BatchTopK-trained one fires as it trained. None: the set's own when it resumes ("topk" for sets built
    # before the choice), SPARSITY for a new set.
    sparsity: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        if self.kind != "transcoder":
            raise RangeError(f"--kind {self.kind!r}: a dictionary set is built of transcoders (--kind transcoder)")
        if not self.layers:
            raise RangeError("a dictionary set needs at least one layer")
        check_training(self.k, self.width, self.epochs, self.tokens, self.batch_size)
        check_massive(self.massive_above)
        check_sparsity(self.sparsity)

    def same_training(self) -> dict[str, Any]:
        """The fields two builds of one set must agree on."""
        keys = ("model", "kind", "width", "k", "tokens", "batch_size", "lr", "seed", "epochs", "massive_above",
                "sparsity")
        return {k: getattr(self, k) for k in keys}

    def recipe(self) -> dict[str, Any] | None:
        """train_topk_transcoder's recipe for the set's own settings (None: the trainer's defaults)."""
        r = {k: v for k, v in (("epochs", self.epochs), ("massive_above", self.massive_above or 0),
                               ("sparsity", self.sparsity or "topk"))
             if v != {"epochs": 1, "massive_above": 0, "sparsity": "topk"}[k]}
        return r or None


# The set's massive-token rule for new sets (SetSpec.massive_above): on smollm2-135m (16k tokens of each split,
# every layer; `scripts/transcoder_recipes.py --norms`) the ordinary MLP outputs reach at most 15x their layer's
# median norm, and 73x on layer 2 (a regular population: 117 " the"-like tokens over 30x, which the transcoder
# learns: EV 0.84); layer 11's massive activations (position 1, one dimension) sit at 97-826x. 100x is the round
# multiple in that gap: it takes L11's and leaves every ordinary population in.
MASSIVE_ABOVE = 100.0
# What a set built before the rule counts as (its training has no massive_above): no token left out.
LEGACY_TRAINING = {"epochs": 1, "massive_above": 0, "sparsity": "topk"}
# New sets train BatchTopK: their saved JumpReLU form fires as in training (results/sae/replacement.md)
SPARSITY = "batchtopk"
SPARSITIES = ("topk", "batchtopk")


def check_training(k: int, width: int, epochs: int, tokens: int, batch_size: int) -> None:
    """RangeError (one line, naming the option) for settings no build can train with: k outside 1..width, epochs
    outside 1..100, fewer tokens than one batch. Shared by the sets and the cross-layer transcoder."""
    if not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the width {width}")
    if not 1 <= epochs <= 100:
        raise RangeError(f"--epochs {epochs} must be between 1 and 100")
    if tokens < batch_size:
        raise RangeError(f"--tokens {tokens} is fewer than one batch ({batch_size})")


def check_sparsity(sparsity: str | None) -> None:
    """RangeError unless ``sparsity`` (SetSpec.sparsity) is None or one of SPARSITIES."""
    if sparsity is not None and sparsity not in SPARSITIES:
        raise RangeError(f"--sparsity {sparsity!r}: one of {', '.join(SPARSITIES)}")


def check_massive(above: float | None) -> None:
    """RangeError unless ``above`` (SetSpec.massive_above) is None, 0 or a multiple of at least 2: under 2 the
    rule would leave out ordinary tokens (a multiple of 1 leaves out half of them)."""
    if above is not None and above != 0 and not above >= 2:
        raise RangeError(f"--massive-above {above:g} must be 0 (keep every token) or at least 2 (a multiple of the "
                         "median MLP-output norm)")


def sets_root() -> Path:
    base = Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))
    return base / "sets"


def default_name(model: str, width: int) -> str:
    return f"{Path(str(model)).name}-transcoders-w{width}"


def parse_layers(text: str, n_layers: int) -> list[int]:
    """``all``, ``0-5``, ``3,7,11`` (or mixed) as sorted layer indices, each checked against ``n_layers``."""
    text = str(text).strip()
    if text == "all":
        return list(range(n_layers))
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise RangeError(f"--layers {text!r}: give 'all', a range like 0-5 or layers like 3,7,11") from None
    bad = [x for x in sorted(out) if not 0 <= x < n_layers]
    if bad or not out:
        raise RangeError(f"--layers {text!r}: layers run 0..{n_layers - 1}")
    return sorted(out)


def layer_dir(root: Path, layer: int) -> Path:
    return root / f"L{layer}"


def built_layers(root: Path) -> list[int]:
    """Layers whose dictionary directory is complete (a workbench.json with metrics: written last)."""
    out = []
    for d in root.glob("L*") if root.is_dir() else []:
        if d.name[1:].isdigit() and (d / "workbench.json").is_file() and (d / "sae_weights.safetensors").is_file():
            out.append(int(d.name[1:]))
    return sorted(out)


def estimate(spec: SetSpec, n_params: float, d_model: int, n_layers: int, todo: list[int]) -> dict[str, Any]:
    """Seconds and disk a build of the ``todo`` layers will take on one thread here (rough: see the constants)."""
    if not todo:
        return {"layers": 0, "cache_s": 0.0, "train_s": 0.0, "eval_s": 0.0, "total_s": 0.0, "disk_gb": 0.0}
    depth = (max(todo) + 1) / n_layers
    cache_tokens = spec.tokens + spec.heldout_tokens
    cache_s = cache_tokens * 2 * n_params * depth / FORWARD_FLOPS
    steps = spec.epochs * spec.tokens // spec.batch_size
    step_flops = 6 * spec.batch_size * (2 * d_model * spec.width + d_model * d_model)
    train_s = len(todo) * steps * step_flops / TRAIN_FLOPS
    eval_tokens = 2 * spec.eval_windows * spec.ctx  # clean + spliced forwards per layer
    eval_s = len(todo) * (eval_tokens * 2 * n_params / FORWARD_FLOPS + 3.0)
    disk = cache_tokens * len(todo) * 2 * d_model * 2 / 1e9
    return {"layers": len(todo), "cache_s": round(cache_s), "train_s": round(train_s), "eval_s": round(eval_s),
            "total_s": round(cache_s + train_s + eval_s), "disk_gb": round(disk, 2)}


def transcoder_hooks(layer: int) -> list[str]:
    return [f"blocks.{layer}.ln2.hook_normalized", f"blocks.{layer}.hook_mlp_out"]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def read_set(root: Path) -> dict[str, Any]:
    if not (root / SET_FILE).is_file():
        raise ModelFileError(f"{str(root)!r} is not a dictionary set (no {SET_FILE})")
    data = read_json(root / SET_FILE, f"{root}/{SET_FILE}", ModelFileError)
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list) or not isinstance(data.get("model"), str):
        raise ModelFileError(f"{root}/{SET_FILE} is damaged: no model or layers")
    return data


def resolve_set(name: str) -> Path:
    """A set by name (under sets_root()) or by its directory."""
    path = Path(name).expanduser()
    if not (path / SET_FILE).is_file():
        path = sets_root() / name
    if not (path / SET_FILE).is_file():
        have = sorted(p.name for p in sets_root().iterdir() if (p / SET_FILE).is_file()) if sets_root().is_dir() else []
        raise ModelFileError(f"no dictionary set {name!r} (sets: {', '.join(have) or 'none built'}; build one with "
                             "`workbench sae build-set`)")
    return path


# What every layer of one set must share: a graph over layers trained on other widths or token counts would
# compare features of unlike quality as if they were one replacement model.
UNIFORM = (("width", "width"), ("train_tokens", "tokens"), ("massive_above", "massive_above"),
           ("sparsity", "sparsity"))  # (workbench.json key, SetSpec field)


def check_uniform(root: Path, infos: dict[int, dict[str, Any]], spec: dict[str, Any] | None = None) -> None:
    """ModelFileError (one line) when the built layers' workbench.json disagree on width or training tokens
    (with each other, or with ``spec``, the set's training settings), naming the layers on each side."""
    for key, spec_key in UNIFORM:
        groups: dict[Any, list[int]] = {}
        for layer, info in sorted(infos.items()):
            if info.get(key) is not None:  # a layer that does not record it is not held against the others
                groups.setdefault(info.get(key), []).append(layer)
        want = (spec or {}).get(spec_key)
        if len(groups) > 1 or (want is not None and groups and set(groups) != {want}):
            what = "; ".join(f"{k} in L{_ranges(v)}" for k, v in groups.items())
            expect = f" (the set says {want})" if want is not None else ""
            noun = {"width": "widths", "tokens": "token counts", "massive_above": "massive-token rules",
                    "sparsity": "sparsities (topk, batchtopk)"}[spec_key]
            raise ModelFileError(f"dictionary set {root.name!r} mixes layers trained on different {noun}: "
                                 f"{what}{expect}; rebuild the odd layers (delete their L folders and run `workbench "
                                 "sae build-set` with the set's settings) or give another --name")


def _layer_infos(root: Path, layers: Iterable[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for layer in layers:
        info = read_json(layer_dir(root, layer) / "workbench.json", f"{root.name}/L{layer}/workbench.json",
                         ModelFileError)
        out[layer] = info if isinstance(info, dict) else {}
    return out


def check_cache(root: Path, layers: Iterable[int]) -> None:
    """Before a resumed build reads them: every cached manifest parses and every shard it lists is whole (its
    safetensors header covers the file). DatasetError (one line) naming the damaged file; nothing is deleted,
    so the layers already built, and the other layers' shards, stay."""
    from safetensors import safe_open

    acts = root / ".acts"
    for split in ("train", "heldout"):
        for layer in layers:
            d = acts / split / f"L{layer}"
            manifest = d / "manifest.json"
            if not d.is_dir() or not manifest.exists():
                continue
            fix = (f"delete {d} (the cached activations of that layer; the set's built layers are kept) and run "
                   "the build again")
            try:
                data = read_json(manifest, str(manifest), DatasetError) if manifest.is_file() else None
            except DatasetError as exc:
                raise DatasetError(f"the cached activations of set {root.name!r} are damaged: {exc}; {fix}") from None
            shards = data.get("shards") if isinstance(data, dict) else None
            if not isinstance(shards, list) or not all(isinstance(x, dict) and "file" in x for x in shards):
                raise DatasetError(f"the cached activations of set {root.name!r} are damaged: {manifest} lists no "
                                   f"shards; {fix}")
            for entry in shards:
                f = d / str(entry["file"])
                try:
                    with safe_open(str(f), framework="pt") as h:
                        h.keys()
                except Exception as exc:  # noqa: BLE001 - missing, truncated, zeroed, garbage: all one line
                    reason = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
                    raise DatasetError(f"the cached activations of set {root.name!r} are damaged: {f} ({reason}); "
                                       f"{fix}") from None


def load_set(name: str, layers: Iterable[int] | None = None, complete: bool = True) -> list[Any]:
    """The set's dictionaries, by layer. ``complete``: every layer the set was asked for must be built (a set
    missing a layer is refused, naming them); a damaged layer is a ModelFileError naming it."""
    from attribution.sae.dictionary import load_dictionary  # lazy here and below: --help imports this module

    root = resolve_set(name)
    info = read_set(root)
    want = sorted(int(x) for x in (layers if layers is not None else info["layers"]))
    have = set(built_layers(root))
    missing = [x for x in want if x not in have]
    if missing and complete:
        raise ModelFileError(f"dictionary set {root.name!r} is missing layer(s) {_ranges(missing)}: run `workbench "
                             f"sae build-set --model {info['model']} --name {root.name}` to finish it")
    out = []
    for layer in want:
        if layer not in have:
            continue
        try:
            out.append(load_dictionary(layer_dir(root, layer)))
        except ModelFileError as exc:
            raise ModelFileError(f"dictionary set {root.name!r}, layer {layer}: {exc}") from None
    check_uniform(root, {d.layer: {**d.info, "width": d.d_sae} for d in out}, info.get("training"))
    return out


def _ranges(xs: list[int]) -> str:
    parts, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


def shuffled_docs(split: str, seed: int) -> list[str]:
    from core.corpus import english_texts

    docs = english_texts(split)
    random.Random(seed).shuffle(docs)
    return docs


def cache_layers(model: Any, layers: list[int], texts: Iterable[Any], out: Path, n_tokens: int, ctx: int = 128,
                 batch_size: int = 16, shard_tokens: int = 16_384, skip_first: int = 1, bf16: bool = True,
                 on_progress: Callable[[int, int], None] | None = None) -> dict[int, Any]:
    """Cache every layer's transcoder hooks (MLP input, MLP output) in one forward per batch, into one shard
    directory per layer (``out/L5``: a ShardSet of its two hooks); resumes after the last shard all layers hold."""
    from safetensors.torch import save_file

    from attribution.sae.shards import MANIFEST, ShardSet, open_manifest, plan_shards, shard_tensors, write_atomic

    manifests = {lay: open_manifest(model, transcoder_hooks(lay), out / f"L{lay}", ctx, skip_first, bf16)
                 for lay in layers}
    n_done = min(len(m["shards"]) for m in manifests.values())
    ref = min(manifests.values(), key=lambda m: len(m["shards"]))
    for m in manifests.values():  # a layer ahead of the others (interrupted mid-shard) steps back to them
        m["shards"] = m["shards"][:n_done]
        m["windows_done"] = ref["windows_done"]
    got = sum(s["n_tokens"] for s in ref["shards"])
    windows, plan = plan_shards(model, texts, ref, n_tokens, ctx, batch_size, shard_tokens)
    import torch

    hooks = [h for lay in layers for h in transcoder_hooks(lay)]
    for a, b, _ in plan:
        chunk = windows[a:b]
        pad = torch.full((len(chunk), ctx), -1, dtype=torch.long)
        for i, w in enumerate(chunk):
            pad[i, : len(w)] = torch.tensor(w)

        def report(n: int, before: int = got) -> None:
            if on_progress:
                on_progress(min(before + n, n_tokens), n_tokens)

        first = ref["windows_done"]
        tensors = shard_tensors(model, hooks, chunk, pad, first, skip_first, bf16, batch_size, report)
        index = len(ref["shards"])
        entry = {"file": f"shard_{index:05d}.safetensors", "n_tokens": int(tensors["where"].shape[0]),
                 "n_windows": len(chunk)}
        for lay, m in manifests.items():
            part = {h: tensors[h] for h in transcoder_hooks(lay)}
            part |= {"where": tensors["where"], "windows": tensors["windows"]}
            d = out / f"L{lay}"
            write_atomic(d / entry["file"], lambda p, part=part: save_file(part, str(p)))
            if m is not ref:
                m["shards"].append(dict(entry))
                m["windows_done"] = first + len(chunk)
        ref["shards"].append(dict(entry))
        ref["windows_done"] = first + len(chunk)
        for lay, m in manifests.items():
            write_atomic(out / f"L{lay}" / MANIFEST, lambda p, m=m: p.write_text(json.dumps(m, indent=1)))
        got += entry["n_tokens"]
    return {lay: ShardSet.open(out / f"L{lay}") for lay in layers}


def build_set(model: Any, spec: SetSpec, name: str | None = None, root: Path | None = None,
              on_progress: Progress | None = None, on_layer: Callable[[int, dict[str, Any]], None] | None = None,
              texts: dict[str, Iterable[Any]] | None = None, half: bool = True) -> dict[str, Any]:
    """Build (or finish) the set: cache the layers still to build, train and measure each, atomically per
    layer; the set's summary (set.json plus every layer's metrics). ``texts``: {"train": ..., "heldout": ...}
    (default: the English corpus, documents shuffled)."""
    from attribution.sae.build import BuildSpec, build_dictionary

    spec.check()
    root = root or sets_root() / (name or default_name(spec.model, spec.width))
    old = read_set(root) if root.exists() and (root / SET_FILE).exists() else None
    theirs = {**LEGACY_TRAINING, **((old or {}).get("training") or {})}  # sets built before --epochs, the rule
    if spec.massive_above is None:  # not given: the set's own rule when it resumes, the default for a new set
        spec = replace(spec, massive_above=float(theirs["massive_above"]) if old else MASSIVE_ABOVE)
    spec = replace(spec, massive_above=float(spec.massive_above or 0))
    if spec.sparsity is None:  # likewise: the set's own when it resumes ("topk" before the choice), else SPARSITY
        spec = replace(spec, sparsity=str(theirs["sparsity"]) if old else SPARSITY)
    if old is not None:
        ours = spec.same_training()
        diff = [k for k in ours if k in theirs and theirs[k] != ours[k]]
        if diff:
            def v(x: Any) -> Any:  # 100.0 and 100 read alike
                return f"{x:g}" if isinstance(x, float) else x

            what = ", ".join(f"{k} {v(theirs[k])} (not {v(ours[k])})" for k in diff)
            raise RangeError(f"dictionary set {root.name!r} was built with {what}: resume it with those settings "
                             "or give another --name")
        layers = sorted(set(old["layers"]) | set(spec.layers))
        seconds = dict(old.get("seconds") or {})
    else:
        layers, seconds = list(spec.layers), {}
    # a resumed build: refuse layers built otherwise and damaged cached activations before writing anything
    built = built_layers(root)
    check_uniform(root, _layer_infos(root, [x for x in layers if x in built]), spec.same_training())
    todo = [x for x in spec.layers if x not in built]
    check_cache(root, todo)
    root.mkdir(parents=True, exist_ok=True)
    meta = {"model": spec.model, "kind": spec.kind, "layers": layers, "training": spec.same_training(),
            "spec": asdict(spec), "seconds": seconds}
    _write_json(root / SET_FILE, meta)
    acts = root / ".acts"
    t0 = time.time()
    if todo:
        src = texts or {}
        train_texts = src.get("train") or shuffled_docs("train", spec.seed)
        held_texts = src.get("heldout") or shuffled_docs("heldout", spec.seed)

        def cache_report(stage: str) -> Callable[[int, int], None]:
            return lambda done, total: on_progress(stage, done, total) if on_progress else None

        train = cache_layers(model, todo, train_texts, acts / "train", spec.tokens, spec.ctx,
                             shard_tokens=spec.shard_tokens, skip_first=spec.skip_first,
                             on_progress=cache_report("cache train"))
        held = cache_layers(model, todo, held_texts, acts / "heldout", spec.heldout_tokens, spec.ctx,
                            shard_tokens=spec.shard_tokens, skip_first=spec.skip_first,
                            on_progress=cache_report("cache heldout"))
        seconds["cache"] = round(seconds.get("cache", 0.0) + time.time() - t0, 1)
        meta["seconds"] = seconds
        _write_json(root / SET_FILE, meta)
        for layer in todo:
            t1 = time.time()
            bs = BuildSpec(hook=transcoder_hooks(layer)[0], **spec.training(), recipe=spec.recipe())
            info = build_dictionary(model, bs, layer_dir(root, layer), on_progress=on_progress,
                                    train_shards=train[layer], heldout_shards=held[layer],
                                    eval_windows=spec.eval_windows, half=half, eval_bf16=True)
            shutil.rmtree(acts / "train" / f"L{layer}", ignore_errors=True)  # its shards are spent
            shutil.rmtree(acts / "heldout" / f"L{layer}", ignore_errors=True)
            seconds[f"L{layer}"] = round(time.time() - t1, 1)
            meta["seconds"] = seconds
            _write_json(root / SET_FILE, meta)
            if on_layer:
                on_layer(layer, info)
    if set(built_layers(root)) >= set(layers):
        shutil.rmtree(acts, ignore_errors=True)
    return summary(root)


def summary(root: Path) -> dict[str, Any]:
    """The set's set.json plus a quality row per built layer (EV, L0, dead, spliced loss change, seconds)."""
    meta = read_set(root)
    rows = []
    for layer in built_layers(root):
        try:
            info = json.loads((layer_dir(root, layer) / "workbench.json").read_text())
        except (OSError, ValueError):
            rows.append({"layer": layer, "damaged": True})
            continue
        m = info.get("metrics") or {}
        rows.append({"layer": layer, "explained_variance": m.get("explained_variance"), "l0": m.get("l0"),
                     "dead_fraction": m.get("dead_fraction"), "ce_loss_delta": m.get("ce_loss_delta"),
                     # massive-activation tokens left out of training and of these figures (0 before the rule)
                     "massive_left_out": {"train": info.get("massive_train_tokens") or 0,
                                          "heldout": m.get("massive_tokens") or 0},
                     "seconds": (meta.get("seconds") or {}).get(f"L{layer}")})
    missing = [x for x in meta["layers"] if x not in built_layers(root)]
    return {"name": root.name, "path": str(root), "model": meta["model"], "kind": meta["kind"],
            "layers": meta["layers"], "missing": missing, "complete": not missing, "training": meta.get("training"),
            "seconds": meta.get("seconds"), "quality": rows}
