"""SAE jobs: activation caching sharded over corpus shards ("sae_cache") and dictionary training ("sae_train",
one shard; progress counts training steps). See workbench/scheduler/kinds.py for what a kind is.

Caching: every worker plans the same shards from the corpus's window lengths (attribution/sae/shards.py
plan_shards), writes its contiguous share of them as files under ``out`` (each worker holding the model once),
and the driver writes the manifest last, so the directory is byte for byte what one process writes. The
workers write to ``out`` directly: on a cluster of several machines it must be on a shared file system.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attribution.sae.config import WIDTH_PER_DIM_FROM_SHARDS, WIDTH_PER_DIM_IN_MEMORY
from workbench.scheduler.kinds import split, worker_model

Progress = Callable[[str, int, int], None]  # (stage, done, total)


class SaeCacheJob:
    """``workbench sae cache``: the corpus's planned activation shards split over workers."""

    def label(self, spec: dict[str, Any]) -> str:
        return f"sae cache {len(spec['hooks'])} hook(s) · {spec['tokens']:,} tokens · {spec['model']}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[tuple[int, int]]:
        return [(k, workers) for k in range(workers)]  # the shard count needs the tokenizer: workers plan it

    def items(self, spec: dict[str, Any]) -> int:
        return int(spec["tokens"])

    def cost_key(self, spec: dict[str, Any]) -> str:
        from attribution.sae.cache import stop_layer

        stops = [stop_layer(h) for h in spec["hooks"]]
        depth = "all" if None in stops else max(stops)
        return "|".join(map(str, (spec["model"], depth, spec.get("ctx", 128), spec.get("bf16", True))))

    def run_shard(self, spec: dict[str, Any], shard: tuple[int, int], report: Any) -> dict[str, Any]:
        from attribution.sae.shards import cache_shards, open_manifest, plan_shards, write_shard

        model = worker_model(spec)
        out, texts = Path(spec["out"]), _texts(spec)
        args = {k: spec[k] for k in ("ctx", "batch_size", "shard_tokens", "skip_first", "bf16") if k in spec}
        k, pieces = shard
        if pieces == 1:  # one process: the plain resumable pass (its manifest rewritten after every shard)
            seen = [0]

            def progress(done: int, total: int) -> None:
                if not seen[0]:
                    report.total(total - done)  # what a resumed cache still has to do
                    seen[0] = done
                report.step(done - seen[0])
                seen[0] = done

            shards = cache_shards(model, spec["hooks"], texts, out, int(spec["tokens"]), on_progress=progress, **args)
            return {"manifest": shards.manifest}
        base = open_manifest(model, spec["hooks"], out, args.get("ctx", 128), args.get("skip_first", 1),
                             args.get("bf16", True))
        windows, plan = plan_shards(model, texts, base, int(spec["tokens"]), args.get("ctx", 128),
                                    args.get("batch_size", 16), args.get("shard_tokens", 65_536))
        mine = split(len(plan), pieces)
        todo = list(range(*mine[k])) if k < len(mine) else []
        report.total(sum(plan[j][2] for j in todo))
        entries = []
        for j in todo:
            a, b, _ = plan[j]
            last = [0]

            def step(done: int, last: list[int] = last) -> None:
                report.step(done - last[0])
                last[0] = done

            entries.append(write_shard(model, base, out, len(base["shards"]) + j, windows[a:b],
                                       base["windows_done"] + a, args.get("batch_size", 16), step))
        return {"base": base, "first": todo[0] if todo else None, "entries": entries, "planned": len(plan)}

    def finish(self, spec: dict[str, Any], parts: list[dict[str, Any]]) -> SaeCacheResult:
        import json

        from attribution.sae.shards import MANIFEST, write_atomic
        from core.errors import DatasetError
        from workbench.scheduler.errors import JobError

        out = Path(spec["out"])
        if len(parts) == 1 and "manifest" in parts[0]:
            manifest = parts[0]["manifest"]
        else:
            bases = {json.dumps(p["base"], sort_keys=True) for p in parts}
            if len(bases) != 1 or len({p["planned"] for p in parts}) != 1:
                raise JobError(f"the workers found different caches at {out} (was it changed during the job?)")
            manifest = parts[0]["base"]
            for p in sorted((p for p in parts if p["entries"]), key=lambda p: p["first"]):
                for entry in p["entries"]:
                    manifest["shards"].append(entry)
                    manifest["windows_done"] += entry["n_windows"]
            if not manifest["shards"]:
                raise DatasetError("the corpus gave no token windows to cache")
            write_atomic(out / MANIFEST, lambda p: p.write_text(json.dumps(manifest, indent=1)))
        return SaeCacheResult(spec, manifest)


@dataclass
class SaeCacheResult:
    spec: dict[str, Any]
    manifest: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {"out": str(self.spec["out"]), "model": m["model"], "hooks": m["hooks"], "ctx": m["ctx"],
                "skip_first": m["skip_first"], "shards": len(m["shards"]),
                "tokens": sum(s["n_tokens"] for s in m["shards"]), "windows": m["windows_done"]}

    def save(self, store: Any) -> Any:
        from core.store import RunDraft

        args = {k: v for k, v in self.spec.items() if k not in ("kind",) and v is not None}
        return store.save(RunDraft(kind="sae-cache", model=self.manifest["model"], method="activation-shards",
                                   args=args, result=self.to_json()))


def _texts(spec: dict[str, Any]) -> list[str]:
    from core.corpus import english_texts

    return english_texts(spec.get("split", "train"), Path(spec["corpus"]) if spec.get("corpus") else None)


# -- training ---------------------------------------------------------------------------------------
class SaeTrainJob:
    """``workbench sae train``: one shard (cache, train, evaluate, save); progress counts training steps."""

    def label(self, spec: dict[str, Any]) -> str:
        return f"sae train {spec['sae_kind']} · {spec['hook']} · {spec['tokens']:,} tokens · {spec['model']}"

    def shards(self, spec: dict[str, Any], workers: int) -> list[int]:
        return [0]

    def run_shard(self, spec: dict[str, Any], shard: int, report: Any) -> SaeTrainResult:
        state = {"total": 0, "done": 0}

        def progress(stage: str, done: int, total: int) -> None:
            if not stage.startswith("train"):
                return
            steps, now = max(1, total // spec["batch_size"]), done // spec["batch_size"]
            if steps != state["total"]:
                report.total(steps)
                state["total"] = steps
            if now > state["done"]:
                report.step(now - state["done"])
                state["done"] = now

        result = train_dictionary(spec, progress)
        if state["total"] and state["done"] < state["total"]:
            report.step(state["total"] - state["done"])
        elif not state["total"]:
            report.total(1)
            report.step(1)
        return result

    def finish(self, spec: dict[str, Any], parts: list[Any]) -> SaeTrainResult:
        return parts[0]


@dataclass
class SaeTrainResult:
    """What ``sae train`` reports and saves as its run (kind "sae")."""

    result: dict[str, Any]
    model: str
    method: str
    args: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    made: str | None = None  # the dictionary's folder when this job created it

    def save(self, store: Any) -> Any:
        """The run; when it cannot be saved for want of space, the dictionary this job made goes too: nothing
        partial (a dictionary no run names) is kept."""
        import shutil

        from core.errors import DiskFullError
        from core.store import RunDraft

        try:
            return store.save(RunDraft(kind="sae", model=self.model, method=self.method, args=self.args,
                                       timings=self.timings, result=self.result))
        except DiskFullError:
            if self.made:
                shutil.rmtree(self.made, ignore_errors=True)
            raise


def from_shards(spec: dict[str, Any]) -> bool:
    """LLMs of the zoo train topk SAEs and transcoders from disk shards of the English corpus; toy models and
    --corpus train in memory."""
    return spec["sae_kind"] == "transcoder" or (spec["sae_kind"] == "topk" and spec.get("corpus") is None
                                                and not is_toy(spec["model"]))


def is_toy(model: str) -> bool:
    from core.errors import WorkbenchError
    from core.models import zoo

    try:
        return zoo.resolve(model).kind != "llm"
    except WorkbenchError:
        return True  # let the in-memory path report the bad model name as it always has


def check_out(out: str | None) -> None:
    """``--out`` names a directory to write the dictionary into: an existing file there (or a symlink) is
    refused (RangeError), never overwritten or followed."""
    from core.errors import RangeError

    if not out:
        return
    path = Path(out)
    if path.is_symlink():
        raise RangeError(f"--out {out} is a symlink: give a directory for the dictionary")
    if path.exists() and not path.is_dir():
        raise RangeError(f"--out {out} exists and is not a directory: give a directory for the dictionary")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise RangeError(f"--out {out}: {parent} is a file, not a directory")


def train_dictionary(spec: dict[str, Any], on_progress: Progress | None = None) -> SaeTrainResult:
    """Cache, train, evaluate and save one dictionary as ``spec`` says (the command's options: model, hook,
    tokens, sae_kind, width, k, epochs, lr, batch_size, l1, l0, ctx, corpus, out, seed, keep_first, device)."""
    import torch

    check_out(spec.get("out"))
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if from_shards(spec):
        return _from_shards(spec, on_progress)
    return _in_memory(spec, on_progress)


def _in_memory(spec: dict[str, Any], on_progress: Progress | None) -> SaeTrainResult:
    from attribution.sae.cache import cache_activations, model_texts
    from attribution.sae.train import train_sae
    from core.errors import RangeError
    from core.store import RunStore

    started = time.time()
    m = worker_model(spec)
    hook, tokens, kind, k = spec["hook"], spec["tokens"], spec["sae_kind"], spec["k"]
    m.check_hook(hook)
    ctx = min(spec["ctx"], m.arch.n_ctx)
    texts = model_texts(m, Path(spec["corpus"]) if spec.get("corpus") else None, tokens, ctx, spec["seed"])
    cache = cache_activations(m, hook, texts, tokens, ctx=ctx, skip_first=0 if spec["keep_first"] else 1)
    # the SAE's metadata names the model as the user gave it, so `sae features/eval` can reload it
    # (a zoo name, or a local path for models outside the zoo)
    cache.model = spec["model"]
    width = spec.get("width") or WIDTH_PER_DIM_IN_MEMORY * cache.d_in
    if kind in ("topk", "batchtopk") and not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the SAE width {width}")
    t_cache = time.time() - started
    safe_hook = hook.replace(".", "-")
    path = Path(spec["out"]) if spec.get("out") else \
        RunStore().root / "saes" / f"{Path(m.name).name}_{safe_hook}_{kind}{width}_{int(time.time())}"

    def step(done: int, total: int) -> None:
        if on_progress:
            on_progress(f"train {hook}", done, total)

    from core.checks import output_folder

    made = not path.exists()
    with output_folder(path, "SAE not saved"):  # a full disk (or any failure) keeps no half dictionary
        sae, metrics, info = train_sae(m, cache, kind, width, k, spec["epochs"], batch_size=spec["batch_size"],
                                       lr=spec["lr"], out=path, seed=spec["seed"], l1=spec["l1"], l0=spec["l0"],
                                       on_progress=step)
    result = {**metrics.to_json(), "path": str(path), "kind": kind, "width": width, "k": k, "hook": hook,
              "model": m.name, "train_tokens": info["train_tokens"]}
    args = {"hook": hook, "tokens": tokens, "width": width, "k": k, "epochs": spec["epochs"], "lr": spec["lr"],
            "ctx": spec["ctx"]}
    return SaeTrainResult(result, m.name, f"sae-{kind}", args,
                          {"cache_s": t_cache, "train_s": info["seconds"], "total_s": time.time() - started},
                          made=str(path) if made else None)


def _from_shards(spec: dict[str, Any], on_progress: Progress | None) -> SaeTrainResult:
    from attribution.sae.build import BuildSpec, build_dictionary, transcoder_input
    from core.errors import RangeError
    from core.store import RunStore

    kind, model, k = spec["sae_kind"], spec["model"], spec["k"]
    if is_toy(model):
        raise RangeError(f"--kind {kind} from disk shards trains on the English corpus; {model} is not an "
                         "LLM of the zoo (toy models train in memory with --kind topk)")
    started = time.time()
    m = worker_model(spec)
    m.check_hook(spec["hook"])
    hook_in = transcoder_input(spec["hook"]) if kind == "transcoder" else spec["hook"]
    width = spec.get("width") or WIDTH_PER_DIM_FROM_SHARDS * int(m.arch.d_model)
    if not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the dictionary width {width}")
    build = BuildSpec(hook=hook_in, kind=kind, width=width, k=k, tokens=spec["tokens"],
                      batch_size=spec["batch_size"], lr=spec["lr"], skip_first=0 if spec["keep_first"] else 1,
                      seed=spec["seed"])
    name = f"{Path(m.name).name}_L{build.layer}_{'transcoder' if kind == 'transcoder' else 'resid-topk'}{width}"
    path = Path(spec["out"]) if spec.get("out") else RunStore().root / "saes" / name
    from core.checks import output_folder

    made = not path.exists()
    with output_folder(path, "dictionary not saved"):  # a full disk (or any failure) keeps no half dictionary
        info = build_dictionary(m, build, path, on_progress)
    result = {**info["metrics"], "path": str(path), "kind": kind, "width": width, "k": k, "hook": build.hook,
              "hook_out": build.hook_out, "model": m.name, "train_tokens": info["train_tokens"]}
    args = {"hook": build.hook, "tokens": spec["tokens"], "width": width, "k": k, "lr": spec["lr"]}
    return SaeTrainResult(result, m.name, f"sae-{kind}", args, {**info["seconds"], "total_s": time.time() - started},
                          made=str(path) if made else None)
