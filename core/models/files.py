"""Model files on disk: where converted weights are cached, a model folder checked (config.json, whole safetensors
weights, no pickles) before torch reads it, and the Hugging Face module and tokenizer loaded from a local folder.
Below every loader and backend (core.models.llm, core.models.gemma, core.models.backends); torch, transformers and
safetensors are imported only inside the functions that read weights."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import ModelFileError
from core.models.config import read_config


def cache_root() -> Path:
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))


def check_hf_dir(path: Path) -> None:
    if not path.is_dir():
        raise ModelFileError(f"model directory {str(path)!r} does not exist")
    read_config(path)
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        if pickles:  # refused up front: a pickle can run code when it is read
            raise ModelFileError(f"{str(path)!r} holds only pickle weights ({pickles[0]}); the workbench loads "
                                 "safetensors only (convert them where you trust the file)")
        raise ModelFileError(f"{str(path)!r} holds no weights (*.safetensors)")
    for file in weights:
        check_safetensors(file)


def check_safetensors(file: Path) -> None:
    """Catch truncated or corrupt files with a clear message before torch sees them."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as fh:
            keys = list(fh.keys())
            if keys:
                fh.get_slice(keys[-1])
        size = file.stat().st_size
        with open(file, "rb") as raw:
            header_len = int.from_bytes(raw.read(8), "little")
            header = json.loads(raw.read(header_len))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + header_len + end > size:
            raise ModelFileError(f"weights file {file} is truncated ({size} bytes, needs {8 + header_len + end})")
    except ModelFileError:
        raise
    except Exception as exc:  # safetensors raises several types for corrupt headers
        raise ModelFileError(f"weights file {file} is corrupt or unreadable: {exc}") from None


def load_hf_model(path: Path, device: str = "cpu", dtype: str = "float32"):
    """An HF causal LM and its tokenizer from a local directory (no hub access; safetensors only)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_hf_dir(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype),
                                                     attn_implementation="eager", use_safetensors=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelFileError(f"cannot load model from {str(path)!r}: {str(exc).splitlines()[0]}") from None
    return model.to(device).eval(), tokenizer


@contextmanager
def damaged_cache_hint(name: str) -> Iterator[None]:
    """A converted cache that fails its checks says how to rebuild it."""
    try:
        yield
    except ModelFileError as exc:
        raise ModelFileError(f"{exc}; the converted cache of {name} is damaged: rebuild it with "
                             f"`workbench prepare --model {name} --force`") from None
