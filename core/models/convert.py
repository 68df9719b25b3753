"""GGUF files shipped in registry packages, converted once into an HF-layout safetensors cache.

transformers loads a GGUF (with the ``gguf`` package), dequantizes it to float32 and, for Gemma, undoes
the norm-weight shift itself; ``save_pretrained`` refuses while its GGUF quantizer is attached, so the
state dict and config are written here. The cache is written atomically (a temporary folder, then a
rename) and stamped with ``workbench.json``; only a stamp of the current version counts as ready.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import ModelFileError

CACHE_VERSION = 1


def cache_ready(target: Path, version: int = CACHE_VERSION) -> bool:
    """Whether ``target`` holds a finished conversion of this version (nothing is converted)."""
    try:
        stamp = json.loads((target / "workbench.json").read_text())
        return isinstance(stamp, dict) and stamp.get("cache_version") == version \
            and (target / "model.safetensors").is_file() and (target / "config.json").is_file()
    except (OSError, ValueError):
        return False


def say(message: str) -> None:
    """A set-up progress line on stderr (stdout stays clean for --json)."""
    print(message, file=sys.stderr, flush=True)


def gguf_special_ids(path: Path) -> dict[str, int]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    found: dict[str, Any] = {}
    for key in ("bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id"):
        field = reader.fields.get(f"tokenizer.ggml.{key}")
        if field is not None:
            found[key] = int(field.parts[field.data[0]][0])
    add_bos = reader.fields.get("tokenizer.ggml.add_bos_token")
    found["add_bos_token"] = bool(add_bos.parts[add_bos.data[0]][0]) if add_bos else False
    return found


def convert_gguf(src: Path, target: Path, architecture: str, meta: dict[str, Any] | None = None,
                 check: Callable[[Any, Any], None] | None = None) -> Path:
    """Dequantize ``src`` to float32 and write an HF directory at ``target`` (replacing an older one).

    ``check(model, tokenizer)`` may refuse the loaded model (ModelFileError) before anything is written."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    started = time.time()
    say(f"  reading the tokenizer of {src.name} ...")
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    say(f"  dequantizing the weights to float32 ({time.time() - started:.0f} s so far) ...")
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    special = gguf_special_ids(src)
    # transformers' GGUF tokenizer conversion has had BOS/EOS slips: hold it to the metadata.
    for key in ("bos_token_id", "eos_token_id"):
        if key in special and getattr(tokenizer, key) != special[key]:
            raise ModelFileError(f"{src.name}: tokenizer {key} {getattr(tokenizer, key)} != GGUF {special[key]}")
    if check is not None:
        check(model, tokenizer)
    say(f"  writing the safetensors cache ({time.time() - started:.0f} s so far) ...")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)  # tied: safetensors refuses shared storage
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config_dict = model.config.to_dict()
        config_dict.pop("quantization_config", None)
        config_dict["architectures"] = [architecture]
        (tmp / "config.json").write_text(json.dumps(config_dict, indent=2))
        tokenizer.save_pretrained(tmp)
        (tmp / "workbench.json").write_text(json.dumps({
            "cache_version": CACHE_VERSION, "source": str(src), "gguf_special_tokens": special,
            "seconds_to_convert": round(time.time() - started, 1), **(meta or {}),
        }, indent=2))
        old = None
        if target.exists():
            old = target.with_name(f".old-{target.name}-{os.getpid()}")
            os.rename(target, old)
        os.rename(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
